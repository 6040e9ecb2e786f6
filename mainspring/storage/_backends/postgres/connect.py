"""PostgreSQL connections for PostgresStore: a psycopg pool, the session settings that make
a lost host let go of its locks, and settling a transaction whose connection was lost.

psycopg and psycopg_pool are imported here only (the ``postgres`` extra): importing
``mainspring.storage`` never needs them.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import math
import os
import re
import threading
import time
import weakref
from collections.abc import Iterator
from typing import Any

import attrs

from ..._errors import StorageError
from .schema import Address, scrub

_log = logging.getLogger("mainspring.storage")

__all__ = [
    "LOCK_NOT_AVAILABLE",
    "QUERY_CANCELED",
    "Connections",
    "Lost",
    "SessionTimeouts",
    "channel_name",
    "check_seconds",
    "is_driver_error",
    "is_lost",
    "is_refused_data",
    "is_retryable",
    "quiet_pipeline",
    "send_sync",
]


class Lost(Exception):
    """The connection to the server broke (restart, terminated session, network cut)."""


def channel_name(schema: str) -> str:
    """The LISTEN/NOTIFY channel of the store in ``schema``."""
    return f"mainspring_{schema}"


def _psycopg() -> Any:
    try:
        import psycopg
        import psycopg_pool
    except ImportError:  # pragma: no cover - the extra is installed in every test run
        raise StorageError(
            "PostgresStore needs psycopg 3: pip install 'mainspring[postgres]'"
        ) from None
    return psycopg, psycopg_pool


#: SQLSTATEs that end the session: class 08 (connection exception), the server shutting
#: down or not yet up (57P01-57P03), a session timeout (25P03, 57P05).
_SESSION_ENDED = ("57P01", "57P02", "57P03", "25P03", "57P05")


def is_lost(exc: BaseException, conn: Any) -> bool:
    """True when ``exc`` means the connection is gone (not the server refusing a statement).

    The whole chain counts: a session ended while a pipeline was busy surfaces as "cannot
    exit pipeline mode while busy" raised over the server's "terminating connection", on a
    connection not yet marked broken. Taking a live connection for lost is safe (the
    transaction is then settled by its id); the reverse would report a refusal that was not.
    """
    psycopg, _ = _psycopg()
    if isinstance(exc, Lost):
        return True
    if not isinstance(exc, psycopg.Error):
        return False
    if conn is None or conn.broken or conn.closed:
        return True
    pgconn = getattr(conn, "pgconn", None)
    if pgconn is not None and pgconn.status != psycopg.pq.ConnStatus.OK:
        return True
    seen: set[int] = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        if isinstance(link, Lost):
            return True
        if isinstance(link, psycopg.Error):
            state = link.sqlstate
            if state is None and isinstance(link, psycopg.OperationalError):
                return True  # the client's side of the connection failed, not a statement
            if state is not None and (state.startswith("08") or state in _SESSION_ENDED):
                return True
        link = link.__cause__ or link.__context__
    return False


def is_driver_error(exc: BaseException) -> bool:
    """True for any psycopg error (the server refused a statement, or worse)."""
    psycopg, _ = _psycopg()
    return isinstance(exc, psycopg.Error)


def is_retryable(exc: BaseException) -> bool:
    """True for errors after which the server rolled the transaction back and running it
    again is expected to succeed (a deadlock broken by the server, a serialization
    failure)."""
    psycopg, _ = _psycopg()
    return isinstance(exc, psycopg.errors.DeadlockDetected | psycopg.errors.SerializationFailure)


def is_refused_data(exc: BaseException) -> bool:
    """True when the server refused a statement for the data it was given (SQLSTATE classes
    22 and 23): the fault of that one write, not of the store."""
    psycopg, _ = _psycopg()
    return isinstance(exc, psycopg.DataError | psycopg.IntegrityError)


#: SQLSTATE lock_not_available: ``lock_timeout`` passed while waiting for a lock (L6).
LOCK_NOT_AVAILABLE = "55P03"

#: SQLSTATE query_canceled: ``statement_timeout`` passed (or the statement was cancelled);
#: the server rolled the transaction back.
QUERY_CANCELED = "57014"


#: The longest server-side timeout PostgreSQL accepts (its INT_MAX milliseconds), seconds.
MAX_SESSION_TIMEOUT = 2_147_483.0


def check_seconds(name: str, value: object) -> float:
    """``value`` if it is a finite, positive number of seconds; ValueError (TypeError for
    what is not a number) naming ``name`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be a number of seconds, not {value!r}")
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a positive, finite number of seconds, not {value!r}")
    return float(value)


@attrs.frozen(kw_only=True)
class SessionTimeouts:
    """The server-side timeouts every session of a store carries (L6), in seconds.

    ``idle`` is ``idle_in_transaction_session_timeout``: a session whose host stopped
    talking to it in a transaction (frozen, cut off, crashed) is ended by the server after
    it, and its row locks go with it. The store syncs every transaction before it does
    anything else, so a stalled host's session is always *idle* in its transaction, never
    left "active" mid-pipeline where no timeout applies. ``lock`` is ``lock_timeout``: a
    statement waits that long for a lock, then the store retries the whole call (so a
    waiter is never stuck in the server, and its caller can give up between tries).
    ``statement`` is ``statement_timeout`` (None: the server's own setting).
    """

    idle: float = 5.0
    lock: float = 2.0
    statement: float | None = None

    def __attrs_post_init__(self) -> None:
        # Named as PostgresStore takes them.
        for name, option in (
            ("idle", "session_timeout"),
            ("lock", "lock_timeout"),
            ("statement", "statement_timeout"),
        ):
            value = getattr(self, name)
            if name == "statement" and value is None:
                continue
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not 0 < value <= MAX_SESSION_TIMEOUT
            ):
                raise ValueError(
                    f"{option} must be a number of seconds in "
                    f"(0, {MAX_SESSION_TIMEOUT:.0f}], not {value!r}"
                )

    def settings(self) -> dict[str, int]:
        """The server parameters, in milliseconds."""
        wanted = {
            "idle_in_transaction_session_timeout": self.idle,
            "lock_timeout": self.lock,
            "statement_timeout": self.statement,
        }
        return {
            name: max(1, round(seconds * 1000))
            for name, seconds in wanted.items()
            if seconds is not None
        }


#: A setting named in libpq's ``options`` (``-c name=value``, ``-cname=value`` or
#: ``--name=value``; the server takes a dash in a name for an underscore, in any case).
_SETTING = re.compile(r"(?:^|\s)(?:-c\s*|--)([A-Za-z0-9_.\-]+)=")


def _named(options: str) -> set[str]:
    """The server settings ``options`` sets, by their canonical name."""
    return {name.lower().replace("-", "_") for name in _SETTING.findall(options)}


def _options(given: str | None, timeouts: SessionTimeouts) -> str:
    """``-c name=value`` for each timeout the URL's own ``options`` does not set, after
    those options (kept as they are). A name is matched whole: ``deadlock_timeout`` is not
    ``lock_timeout``."""
    named = _named(given) if given else set()
    ours = " ".join(
        f"-c {name}={millis}" for name, millis in timeouts.settings().items() if name not in named
    )
    return " ".join(part for part in (given, ours) if part)


def _defaults(conninfo: str, connect_timeout: float, timeouts: SessionTimeouts) -> dict[str, Any]:
    """Settings a connection gets unless the URL gives its own: the session's server-side
    timeouts (L6: a session cut off from its host ends on the server, its row locks with
    it; a wait for a lock is bounded), and a host notices a dead network within ~10 s
    instead of the kernel's minutes."""
    psycopg, _ = _psycopg()
    given = psycopg.conninfo.conninfo_to_dict(conninfo)
    wanted: dict[str, Any] = {
        "connect_timeout": max(1, round(connect_timeout)),
        "keepalives": 1,
        "keepalives_idle": 5,
        "keepalives_interval": 2,
        "keepalives_count": 3,
        "tcp_user_timeout": 10_000,
        "application_name": "mainspring",
    }
    settings = {key: value for key, value in wanted.items() if key not in given}
    # libpq takes PGOPTIONS only when no options are given: ours would drop it, so it is
    # kept as the URL's own would be.
    options = _options(given.get("options", os.environ.get("PGOPTIONS")), timeouts)
    if options:
        settings["options"] = options
    return settings


@contextlib.contextmanager
def quiet_pipeline(conn: Any) -> Iterator[Any]:
    """``conn.pipeline()``, left quietly when its block raises: the block's error is raised
    as it was, and any error met leaving the pipeline after it is dropped. Left on an error,
    psycopg reads the answers still owed (the statements the server skipped after the
    first error) and logs what that raises ("error ignored terminating <psycopg.Pipeline
    ...>: pipeline aborted"), a line on stderr for an application that configured no
    logging, for an ordinary outcome such as a stamp guard's miss (O1). A block that ends
    well leaves the pipeline as psycopg does, its errors raised: leaving sends a Sync and
    reads every answer still owed (the block's last round trip), the server's first refusal
    raised as it is."""
    failure: BaseException | None = None
    try:
        with conn.pipeline() as pipeline:
            try:
                yield pipeline
            except BaseException as exc:  # held, raised below
                failure = exc  # psycopg leaves the pipeline as if nothing failed
    except BaseException:  # after ``failure``: dropped
        if failure is None:
            raise
        # Leaving the pipeline failed too, after ``failure``: ``failure`` says why.
    if failure is not None:
        raise failure


def send_sync(pipeline: Any) -> None:
    """Send a Sync on ``pipeline`` now, without waiting for anything: its answer is read
    with the later ones. Past a Sync the server sees a session in a transaction as *idle*
    in it, so its ``idle_in_transaction_session_timeout`` applies should the host stall
    (L6); before one it is "active", and no timeout does. psycopg's public ``sync`` waits
    for every answer (a round trip); this is the same Sync, queued as ``sync`` queues it,
    and sent as each statement in the pipeline is sent."""
    enqueue = getattr(pipeline, "_enqueue_sync", None)
    communicate = getattr(pipeline, "_communicate_gen", None)
    if enqueue is None or communicate is None:  # a psycopg without them: the public Sync,
        pipeline.sync()  # which waits (one more round trip), is as safe for L6
        return
    enqueue()
    pipeline._conn.wait(communicate())


#: A session's own start, told apart from any later session given the same pid.
_BACKEND_START = "SELECT backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid()"


class Connections:
    """A pool of autocommit connections (the store opens its transactions itself)."""

    def __init__(
        self,
        address: Address,
        *,
        pool_size: int,
        connect_timeout: float,
        timeouts: SessionTimeouts,
    ) -> None:
        psycopg, psycopg_pool = _psycopg()
        if isinstance(pool_size, bool) or not isinstance(pool_size, int) or pool_size < 1:
            raise ValueError(f"pool_size must be a positive whole number, not {pool_size!r}")
        self.address = address
        self.connect_timeout = connect_timeout
        self._psycopg = psycopg
        #: Per thread: when the call under way must give up (see PostgresStore._retrying).
        self.local = threading.local()
        #: Set by ``close``: nothing connects any more (a feed does not reconnect).
        self.closed = False
        try:
            settings = _defaults(address.conninfo, connect_timeout, timeouts)
        except psycopg.Error as exc:  # the driver's message may quote the password
            raise StorageError(
                f"{address.shown} is not a usable PostgreSQL address: {self.scrub(exc)}"
            ) from None
        self._kwargs = {"autocommit": True} | settings
        # Each pooled session's backend_start, noted as it connects: the server gives a
        # gone session's pid to another, so a session is named by both (see ``started``).
        self._started: weakref.WeakKeyDictionary[Any, datetime.datetime] = (
            weakref.WeakKeyDictionary()
        )
        self._started_lock = threading.Lock()
        self._pool = psycopg_pool.ConnectionPool(
            address.conninfo,
            min_size=1,
            max_size=pool_size,
            kwargs=self._kwargs,
            open=False,
            timeout=connect_timeout,
            name="mainspring",
            configure=self._note_start,
        )

    def _note_start(self, conn: Any) -> None:
        """The pool's hook for each new connection (in the pool's thread): note when its
        session started. A failure discards the connection (the pool makes another)."""
        row = conn.execute(_BACKEND_START).fetchone()
        if row is None or row[0] is None:
            raise Lost(f"PostgreSQL at {self.address.shown} did not say when a session began")
        with self._started_lock:
            self._started[conn] = row[0]

    def started(self, conn: Any) -> datetime.datetime | None:
        """When the session of pooled connection ``conn`` began (its ``backend_start``), or
        None if unknown. With its pid it names the session: a pid alone may have gone to
        another session since, another host's or another application's."""
        with self._started_lock:
            return self._started.get(conn)

    def connect(self) -> Any:
        """A new connection of its own (schema setup, the LISTEN feed, settling)."""
        if self.closed:
            raise Lost(f"the store at {self.address.shown} was closed")
        try:
            return self._psycopg.connect(self.address.conninfo, **self._kwargs)
        except self._psycopg.Error as exc:
            raise Lost(self._message(exc)) from None

    def scrub(self, exc: BaseException) -> str:
        """``exc``'s message without any secret of the store's URL."""
        return scrub(str(exc).strip(), self.address.conninfo)

    def _message(self, exc: BaseException) -> str:
        return f"cannot reach PostgreSQL at {self.address.shown}: {self.scrub(exc)}"

    @contextlib.contextmanager
    def direct(self) -> Iterator[Any]:
        """A connection for setup: failures are StorageErrors naming the (redacted) URL."""
        try:
            conn = self.connect()
        except Lost as exc:
            raise StorageError(str(exc)) from None
        try:
            yield conn
        except self._psycopg.Error as exc:
            raise StorageError(f"PostgreSQL at {self.address.shown}: {self.scrub(exc)}") from None
        finally:
            conn.close()

    def open(self) -> None:
        try:
            self._pool.open(wait=True, timeout=self.connect_timeout)
        except Exception as exc:  # the pool's or the driver's
            raise StorageError(self._message(exc)) from None

    def close(self) -> None:
        self.closed = True
        try:
            self._pool.close()
        except Exception as exc:  # the pool's or the driver's: closed for good either way
            _log.debug("closing the pool of %s: %s", self.address.shown, self.scrub(exc))

    def check(self) -> None:
        """Test every idle connection and replace those that broke meanwhile (a restarted
        server, ended sessions): a retry after a lost connection must not take another
        dead one from the pool, which it would if the pause before it outlasted them all."""
        with contextlib.suppress(Exception):  # the server may still be away: the retry says
            self._pool.check()

    @contextlib.contextmanager
    def _borrowed(self) -> Iterator[Any]:
        deadline = getattr(self.local, "deadline", None)
        wait = self.connect_timeout
        if deadline is not None:  # a call retried within reconnect_timeout: not beyond it
            wait = max(0.05, min(wait, deadline - time.monotonic()))
        try:
            conn = self._pool.getconn(timeout=wait)
        except Exception as exc:  # PoolTimeout: the server is away, or every connection busy
            stats = self._pool.get_stats()
            size = self._pool.max_size
            if stats.get("pool_size", 0) >= size and not stats.get("pool_available", 0):
                raise StorageError(
                    f"all {size} connections to {self.address.shown} stayed in use for "
                    f"{wait:g} s (pool_size={size})"
                ) from None
            raise Lost(self._message(exc)) from None
        try:
            yield conn
        finally:
            self._pool.putconn(conn)  # a broken one is discarded by the pool

    @contextlib.contextmanager
    def reading(self) -> Iterator[Any]:
        """A connection for one read statement; a lost connection raises :class:`Lost`."""
        with self._borrowed() as conn:
            try:
                yield conn
            except self._psycopg.Error as exc:
                if is_lost(exc, conn):
                    raise Lost(self.scrub(exc)) from None
                raise StorageError(
                    f"PostgreSQL at {self.address.shown}: {self.scrub(exc)}"
                ) from None

    @contextlib.contextmanager
    def writing(self) -> Iterator[Any]:
        """A connection for one write transaction (the store handles its errors)."""
        with self._borrowed() as conn:
            yield conn

    def settle_by_stamps(
        self,
        pid: int,
        table: str,
        written: dict[str, int],
        before: dict[str, int],
        timeout: float,
        *,
        started: datetime.datetime | None = None,
    ) -> str | None:
        """What became of a transaction whose connection (to backend ``pid``) was lost
        before its transaction id came back (a commit sent in one round trip): its session
        is ended if it is still there, then the header rows it guarded say. Every row holds
        the stamp the transaction wrote: ``"committed"``; every row still holds the stamp it
        was guarded on: ``"aborted"``; anything else (another writer came after), or no
        answer within ``timeout``: None.

        The session is the one with both that pid and ``started`` as its
        ``backend_start`` (``Connections.started``): a gone session's pid is the server's to
        give again, and a session that merely holds it now is left alone (``settle`` names
        its session by transaction id the same way). None names no session: none is
        ended."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                conn = self.connect()
            except Lost:
                conn = None
            if conn is not None:
                try:
                    while time.monotonic() < deadline:
                        alive = conn.execute(
                            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                            "WHERE pid = %s AND backend_start = %s",
                            (pid, started),
                        ).fetchall()
                        if not alive:
                            ids = sorted(written)
                            rows = conn.execute(
                                f"SELECT id, stamp FROM {table} WHERE id = ANY(%s)", (ids,)
                            ).fetchall()
                            stamps = dict(rows)
                            if all(stamps.get(i) == stamp for i, stamp in written.items()):
                                return "committed"
                            if all(stamps.get(i) == stamp for i, stamp in before.items()):
                                return "aborted"
                            return None
                        time.sleep(0.02)  # a worker thread's wait (a store call), never a loop's
                except self._psycopg.Error:
                    pass
                finally:
                    conn.close()
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.1)  # likewise: the store's calls run off the event loop

    def settle(self, txid: int, pid: int, timeout: float) -> str | None:
        """What became of transaction ``txid`` whose connection (to backend ``pid``) was
        lost: ``"committed"`` or ``"aborted"``, or None if the server could not be asked
        within ``timeout``. A session still running it (the network was cut, the server
        has not noticed) is ended first, so the answer is final."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                conn = self.connect()
            except Lost:
                conn = None
            if conn is not None:
                try:
                    while time.monotonic() < deadline:
                        (status,) = conn.execute("SELECT txid_status(%s)", (txid,)).fetchone()
                        if status != "in progress":
                            return str(status) if status is not None else None
                        conn.execute(
                            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                            "WHERE pid = %s AND backend_xid::text::bigint = %s",
                            (pid, txid % 2**32),
                        )
                        time.sleep(0.02)  # a worker thread's wait (a store call), never a loop's
                except self._psycopg.Error:
                    pass
                finally:
                    conn.close()
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.1)  # likewise: the store's calls run off the event loop
