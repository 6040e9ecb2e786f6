"""Review of issue #14: a server that went away is met with StoreUnavailable within
``reconnect_timeout`` (not the pool's ``connect_timeout``), nothing written; a busy pool is not
reported as an unreachable server. The server is "gone" behind a TCP proxy of our own (never
the shared test server stopped)."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator

import psycopg
import pytest

import mainspring as ms
from tests._postgres import drop_schema, fresh_schema, require_server, server_url, with_schema
from tests._tcp_proxy import TcpProxy

pytestmark = pytest.mark.slow


def _execution(execution_id: str = "ex-1") -> ms.storage.Execution:
    return ms.storage.Execution(id=execution_id, goal="g", created_at=1.0, updated_at=1.0)


def _gone(proxy: TcpProxy) -> None:
    """The server goes away: every connection through the proxy is reset, new ones refused."""
    proxy._closed = True
    proxy._flowing.set()
    with proxy._lock:
        sockets, proxy._sockets = proxy._sockets, []
    for sock in (proxy._listener, *sockets):
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            sock.close()


@pytest.fixture
def proxied() -> Iterator[tuple[TcpProxy, str, str]]:
    """A proxy to the test server, a store URL through it and the direct one (same schema)."""
    url = require_server()
    info = psycopg.conninfo.conninfo_to_dict(url)
    proxy = TcpProxy((str(info.get("host", "127.0.0.1")), int(info.get("port", 5432))))
    schema = fresh_schema()
    user = info.get("user", "postgres")
    through = f"postgresql://{user}@127.0.0.1:{proxy.port}/{info.get('dbname', 'test')}"
    try:
        yield proxy, with_schema(through, schema), with_schema(url, schema)
    finally:
        proxy.close()
        drop_schema(schema)


@pytest.mark.parametrize("call", ["get", "create"])
def test_a_call_fails_within_reconnect_timeout_once_the_server_is_gone(
    proxied: tuple[TcpProxy, str, str], call: str
) -> None:
    """reconnect_timeout=0.5 s, connect_timeout=12 s: today every call waits the pool's
    ``getconn`` timeout (connect_timeout) before its first retry decision, so the bound the
    docstring gives (reconnect_timeout) is not kept. Cause: _pg_connect.Connections._borrowed
    calls ``getconn()`` with the pool's timeout (= connect_timeout)."""
    proxy, url, direct = proxied
    store = ms.storage.PostgresStore(url, reconnect_timeout=0.5, connect_timeout=12)
    try:
        store.create(_execution())
        _gone(proxy)
        calls = {
            "get": lambda: store.get("ex-1"),
            "create": lambda: store.create(_execution("ex-2")),
            "edit": lambda: store.edit("ex-1", lambda e, now: e),
            "history": lambda: store.history(),
        }
        began = time.monotonic()
        with pytest.raises(ms.storage.StoreUnavailable):
            calls[call]()
        took = time.monotonic() - began
        assert took < 6.0, f"{call} took {took:.1f} s with reconnect_timeout=0.5"
    finally:
        store.close()
    check = ms.storage.PostgresStore(direct)
    try:
        assert check.get("ex-2") is None  # nothing of the refused call was written
    finally:
        check.close()


def test_a_pool_busy_with_a_write_waiting_for_a_row_lock_is_not_an_unreachable_server() -> None:
    """The server is up and answering; the store's one connection is in a write waiting for
    another host's row lock. A read meanwhile is told "PostgreSQL ... was unreachable"
    (StoreUnavailable, meant for a server gone away) after reconnect_timeout: the pool's
    PoolTimeout is taken for a lost server (_pg_connect.Connections._borrowed)."""
    url = require_server()
    schema = fresh_schema()
    store = ms.storage.PostgresStore(
        with_schema(url, schema) + "&application_name=rev14_pool",
        pool_size=1,
        connect_timeout=1,
        reconnect_timeout=1,
    )
    blocker = psycopg.connect(server_url())
    thread: threading.Thread | None = None
    try:
        store.create(_execution())
        blocker.execute(f'SELECT 1 FROM "{schema}".executions WHERE id = %s FOR UPDATE', ("ex-1",))
        thread = threading.Thread(target=lambda: store.acquire("ex-1", "a:1:x", 30.0))
        thread.start()
        with psycopg.connect(server_url(), autocommit=True) as watch:
            deadline = time.monotonic() + 30
            while not watch.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'rev14_pool' "
                "AND wait_event_type = 'Lock'"
            ).fetchone()[0]:  # type: ignore[index]
                assert time.monotonic() < deadline
                time.sleep(0.01)
        try:
            store.get("ex-1")
        except ms.storage.StoreUnavailable as exc:
            pytest.fail(f"a busy pool was reported as an unreachable server: {exc}")
        except ms.StorageError:
            pass  # a clear "busy" error is fine
    finally:
        blocker.rollback()
        blocker.close()
        if thread is not None:
            thread.join(30)
        store.close()
        drop_schema(schema)
