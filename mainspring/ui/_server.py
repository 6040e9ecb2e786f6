"""Serving the view: a runtime on the store, a socket, hypercorn on the running event loop
(asyncio or trio), and a clean stop.

Bound to 127.0.0.1 by default. Another address exposes the runs (and their controls) to
whoever can reach it, token or not over plain HTTP: it is refused unless ``allow_remote``
is given, and then warned about.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import anyio
import attrs
import sniffio
from hypercorn.config import Config

from ..executions import Runtime, open_runtime
from ..storage import Store
from ._app import make_app
from ._auth import PARAM, new_token

_log = logging.getLogger("mainspring.ui")
#: What listening beyond this machine means (said by the command when forced).
EXPOSED = (
    "anyone who can reach this address and learns the token can see and steer these runs, "
    "over plain HTTP"
)

#: How long stopping waits for open requests (seconds); streams end at once (V4). Reads
#: are short; a browser's idle keep-alive connection is not worth waiting for.
GRACE = 1.0


class RemoteRefused(ValueError):
    """A host that is not a loopback address, without ``allow_remote``."""


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine only (``localhost``, 127.0.0.0/8, ``::1``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@attrs.frozen(kw_only=True)
class UiServer:
    """A running view: where it listens, its token, the URL to open (with the token), and
    the runtime its controls go through."""

    host: str
    port: int
    token: str
    runtime: Runtime = attrs.field(repr=False)
    _stopping: anyio.Event = attrs.field(repr=False, alias="stopping")

    def stop(self) -> None:
        """Begin stopping now, before the ``async with`` block ends: every event stream
        ends (V4), no new request is taken, open ones get their grace."""
        self.runtime.close_streams()
        self._stopping.set()

    @property
    def base(self) -> str:
        """The view's address without the token."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def url(self) -> str:
        """The address to open: the first request sets the token's cookie."""
        return f"{self.base}/?{PARAM}={self.token}"


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host.strip("[]"), port))
        sock.listen(128)
    except BaseException:
        sock.close()
        raise
    return sock


async def _serve(app: Any, config: Config, stopping: anyio.Event, stopped: anyio.Event) -> None:
    try:
        if sniffio.current_async_library() == "trio":
            from hypercorn.trio import serve as serve_trio

            await serve_trio(app, config, shutdown_trigger=stopping.wait)
        else:
            from hypercorn.asyncio import serve as serve_asyncio

            await serve_asyncio(app, config, shutdown_trigger=stopping.wait)
    finally:
        stopped.set()


@asynccontextmanager
async def serve(
    store: Store | str,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    app: Mapping[str, Any] | None = None,
    allow_remote: bool = False,
    token: str | None = None,
) -> AsyncIterator[UiServer]:
    """Serve the view of ``store`` for the duration of the ``async with`` block, on the
    running event loop (asyncio or trio). ``port`` 0 picks a free one. ``app``: the
    options of ``open_runtime`` (the user's tools, agents...) that resuming needs, as
    ``mainspring resume --app`` loads them; without them the resume button explains.

    The view's runtime never recovers runs by itself (``recover=False``, L8): it acts on
    the runs it is told to. On the way out, every event stream ends (V4), open requests
    get :data:`GRACE` seconds, then the runtime closes (a run resumed here stops with
    ``Shutdown`` and stays resumable)."""
    if not is_loopback(host):
        if not allow_remote:
            raise RemoteRefused(
                f"{host} is not a loopback address: the view and its controls would be open "
                "to the network (pass --allow-remote to do it anyway)"
            )
        _log.warning("listening on %s, not a loopback address: %s", host, EXPOSED)
    options = dict(app or {})
    options.pop("store", None)
    options["recover"] = False
    secret = token or new_token()
    sock = _bind(host, port)
    bound_port = sock.getsockname()[1]
    config = Config()
    config.bind = [f"fd://{sock.detach()}"]
    config.graceful_timeout = GRACE
    config.accesslog = None
    config.loglevel = "WARNING"
    config.include_server_header = False
    logging.getLogger("hypercorn.error").setLevel(logging.WARNING)
    async with open_runtime(store=store, **options) as rt:
        stopping, stopped = anyio.Event(), anyio.Event()
        server = UiServer(host=host, port=bound_port, token=secret, runtime=rt, stopping=stopping)
        asgi = make_app(rt, token=secret, can_resume=app is not None)
        async with anyio.create_task_group() as tg:
            tg.start_soon(_serve, asgi, config, stopping, stopped)
            try:
                yield server
            finally:
                server.stop()  # V4: each stream ends now; browsers resume on reconnect
                # A graceful stop even when the block raised (the task group would cancel
                # the server mid-response): open requests get their grace, no more.
                with anyio.CancelScope(shield=True), anyio.move_on_after(GRACE + 2):
                    await stopped.wait()
