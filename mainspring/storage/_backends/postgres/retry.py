"""How PostgresStore's calls outlast a server that went away: what a failed transaction
means for the call (run again on a new connection, decide again, or give up), and the loop
that retries it within ``reconnect_timeout``."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from ..._errors import StorageError
from .connect import Lost

__all__ = [
    "DecideAgain",
    "LockWait",
    "Retry",
    "StatementTimedOut",
    "StoreUnavailable",
    "retry_loop",
]

T = TypeVar("T")

#: A call decided again more often than this is refused: the row cannot be what it says.
MAX_DECISIONS = 5


class StoreUnavailable(StorageError, OSError):
    """The server could not be reached in time; nothing of the refused call was written."""


class Retry(Exception):
    """The transaction certainly did not commit (the connection was lost before COMMIT, or
    the server says it aborted): run the whole call again on a new connection."""


class DecideAgain(Retry):
    """The server refused a write as decided (a lease lapsed meanwhile, L4; a deadlock
    broken): run the call again at once, deciding from what is stored now."""


class LockWait(Retry):
    """A row stayed locked by another session for the store's ``lock_timeout`` (L6): the
    server rolled this transaction back and the call is tried again. A stalled holder's
    session is ended by the server after its idle timeout, so the lock comes free."""


class StatementTimedOut(Retry):
    """A statement ran past the store's ``statement_timeout`` (L6), waiting for a lock
    or working: the server rolled this transaction back and the call is tried again, within
    the same bound as a lock wait."""


def retry_loop(
    shown: str,
    reconnect_timeout: float,
    deadline: float,
    check: Callable[[], None],
    call: Callable[..., T],
    *args: Any,
    **kwargs: Any,
) -> T:
    """Run ``call`` until it completes: at once when it must be decided again, after a
    growing pause (at most 1 s, checking the pool's connections) while the server at
    ``shown`` is away, until ``deadline`` (``time.monotonic()``). A lock held elsewhere
    (:class:`LockWait`) is waited for again, a ``lock_timeout`` at a time, until the same
    deadline (L6); then the call fails with :class:`StoreUnavailable` (nothing written)."""
    pause = 0.05
    decisions = 0
    while True:
        try:
            return call(*args, **kwargs)
        except LockWait as waited:
            if time.monotonic() >= deadline:
                raise StoreUnavailable(
                    f"PostgreSQL at {shown}: a row this call needs stayed locked by another "
                    f"session for {reconnect_timeout:g} s; nothing of this call was written "
                    f"({waited})"
                ) from None
            time.sleep(0.01)  # in a worker thread; the wait itself was the server's lock_timeout
        except StatementTimedOut as timed_out:
            if time.monotonic() >= deadline:
                raise StoreUnavailable(
                    f"PostgreSQL at {shown}: a statement of this call ran past the store's "
                    f"statement_timeout on every try for {reconnect_timeout:g} s; nothing of "
                    f"this call was written ({timed_out})"
                ) from None
            time.sleep(0.01)  # in a worker thread; the wait was the server's statement_timeout
        except DecideAgain as again:
            decisions += 1
            if decisions >= MAX_DECISIONS:
                raise StorageError(
                    f"PostgreSQL at {shown} refused this write as decided {decisions} times; "
                    f"nothing of it was written ({again})"
                ) from None
        except (Retry, Lost) as retry:
            if time.monotonic() + pause > deadline:
                raise StoreUnavailable(
                    f"PostgreSQL at {shown} was unreachable for {reconnect_timeout:g} s; "
                    f"nothing of this call was written ({retry})"
                ) from None
            time.sleep(pause)  # a worker thread's wait, never an event loop's
            pause = min(pause * 2, 1.0)
            check()
