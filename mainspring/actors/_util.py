"""Small helpers shared by the kernel's modules."""

from __future__ import annotations

import sys
from collections.abc import Callable
from math import inf
from time import monotonic
from typing import Any, NoReturn, TypeVar

from anyio.lowlevel import checkpoint, checkpoint_if_cancelled

T = TypeVar("T")


class NoPublicConstructor(type):
    """Metaclass for runtime-made objects: ``Cls(...)`` raises, ``Cls._create(...)`` works.

    Users receive these objects (refs, systems) from the runtime; building one by hand would
    give an object wired to nothing, so the constructor is closed (STYLE.md, habit 2).
    """

    def __call__(cls, *args: object, **kwargs: object) -> NoReturn:
        raise TypeError(
            f"{public_name(cls)} has no public constructor; the runtime creates it for you"
        )

    def _create(cls: type[T], *args: Any, **kwargs: Any) -> T:
        return super().__call__(*args, **kwargs)  # type: ignore[misc, no-any-return]


def public_name(cls: type) -> str:
    """Where users import ``cls`` from: ``mainspring.ActorRef``, not ``mainspring.actors._ref``.

    The top-level package if it exports the class under its name, else the module path up to
    its first private (underscored) part.
    """
    parts = cls.__module__.split(".")
    top = sys.modules.get(parts[0])
    if getattr(top, cls.__qualname__, None) is cls:
        return f"{parts[0]}.{cls.__qualname__}"
    public = []
    for part in parts:
        if part.startswith("_"):
            break
        public.append(part)
    return ".".join([*public, cls.__qualname__])


class SpawnPacer:
    """Makes spawning yield to the event loop at least once per ``slice`` seconds.

    Spawning is otherwise only a cancellation check, so starting a handful of actors stays
    cheap; but a loop that spawns 10,000 actors would hold the event loop for a second or more
    (a server's every other request waits). So a spawn is a full schedule point when the pacer
    has not yielded for ``slice`` seconds: a burst of spawns yields once per slice, and a spawn
    after a quiet spell yields at once (time passing is not proof that the caller yielded).
    """

    __slots__ = ("_clock", "_yielded_at", "slice")

    def __init__(self, slice: float = 0.01, clock: Callable[[], float] = monotonic) -> None:
        self.slice = slice
        self._clock = clock
        self._yielded_at = -inf

    async def pace(self) -> None:
        """A cancellation check, and a schedule point once per ``slice``."""
        if self._clock() - self._yielded_at > self.slice:
            await checkpoint()
            self._yielded_at = self._clock()
        else:
            await checkpoint_if_cancelled()
