"""What a supervisor is told about its children: ChildSpec, Backoff, and the restart rules."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any, Literal

import attrs

from ..actors import Actor
from ..actors._seam import DEFAULT_MAILBOX_SIZE, RESTART_TYPES, RestartType

__all__ = ["Backoff", "ChildSpec", "RestartType", "Strategy", "should_restart"]

Strategy = Literal["one_for_one", "one_for_all", "rest_for_one"]
STRATEGIES: tuple[Strategy, ...] = ("one_for_one", "one_for_all", "rest_for_one")


def should_restart(restart: RestartType, *, crashed: bool) -> bool:
    """The restart rule: permanent always, transient after a crash only, temporary never.

    Applies to ends the child was not given from outside: a crash, or the actor stopping
    itself. A stop or cancel sent through its ref (or by an ancestor) ends it for good.
    """
    if restart == "permanent":
        return True
    if restart == "transient":
        return crashed
    return False


@attrs.frozen(init=False)
class ChildSpec:
    """How to start one child: ``factory(*args)``, under ``name``, with a restart type.

    ``restart`` is ``"permanent"`` (the default: restarted after any end it did not get from
    outside), ``"transient"`` (after a crash only) or ``"temporary"`` (never).
    ``mailbox_size`` bounds its mailbox (default 1000, as for any actor).

    ``shutdown`` is how long the child gets to stop gracefully (``stop(reason)``) when its
    supervisor stops it, before it is cancelled with the same reason.
    """

    factory: Callable[..., Actor]
    args: tuple[Any, ...]
    name: str
    restart: RestartType
    shutdown: float
    mailbox_size: int

    def __init__(
        self,
        factory: Callable[..., Actor],
        *args: Any,
        name: str,
        restart: RestartType = "permanent",
        shutdown: float = 5.0,
        mailbox_size: int = DEFAULT_MAILBOX_SIZE,
    ) -> None:
        if restart not in RESTART_TYPES:
            raise ValueError(f"restart must be one of {', '.join(RESTART_TYPES)}, not {restart!r}")
        if shutdown < 0:
            raise ValueError(f"shutdown must not be negative, not {shutdown}")
        self.__attrs_init__(factory, args, name, restart, shutdown, mailbox_size)


@attrs.frozen(kw_only=True)
class Backoff:
    """Exponential backoff between restarts: ``initial * multiplier**n``, capped at ``maximum``.

    ``jitter`` is the fraction (0..1) of each delay that is randomized, so that many children
    failing together do not restart in lockstep. ``n`` counts the restarts inside the current
    intensity period, so a child that stays up long enough starts again from ``initial``.
    """

    initial: float = 0.01
    maximum: float = 1.0
    multiplier: float = 2.0
    jitter: float = 0.1

    def __attrs_post_init__(self) -> None:
        if not 0 <= self.initial <= self.maximum:
            raise ValueError("Backoff needs 0 <= initial <= maximum")
        if self.multiplier < 1:
            raise ValueError("Backoff multiplier must be at least 1")
        if not 0 <= self.jitter <= 1:
            raise ValueError("Backoff jitter must be within 0..1")

    def delay(self, attempt: int, rng: random.Random) -> float:
        """The delay before restart number ``attempt`` (0 for the first)."""
        base = min(self.maximum, self.initial * self.multiplier ** max(0, attempt))
        return base * (1 - self.jitter * rng.random())
