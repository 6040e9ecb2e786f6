"""How often a failed step is tried again, and how long it waits in between (B1).

A :class:`RetryPolicy` is a plain value stored on a plan step (``PlanStep.retry``) or given
to ``open_runtime`` as a default per tool / skill: every field is JSON, so a policy rides on
the plan through every backend and reads back equal. Attempts themselves are counted on the
step's observation (see ``mainspring.executions``), so a crash never resets the count.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable
from typing import Any

import attrs

from ._validators import MAX_COUNTER

__all__ = ["MAX_ATTEMPTS", "MAX_RETRY_DELAY", "RetryPolicy", "check_timeout"]

#: The most attempts one policy may allow: each failed attempt is kept on the record.
MAX_ATTEMPTS = 100
#: The longest wait between two attempts (a day): longer is a schedule, not a retry.
MAX_RETRY_DELAY = 86_400.0
#: The most exception type names one policy lists.
MAX_RETRY_ON = 50


def _finite(lowest: float, highest: float) -> Any:
    def check(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise TypeError(f"{attribute.name} must be a number, not {type(value).__name__}")
        if not (math.isfinite(value) and lowest <= value <= highest):
            raise ValueError(
                f"{attribute.name} must be within {lowest:g}..{highest:g}, not {value}"
            )

    return check


def _attempts(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if type(value) is not int:
        raise TypeError(f"max_attempts must be a whole number, not {type(value).__name__}")
    if not 1 <= value <= MAX_ATTEMPTS:
        raise ValueError(f"max_attempts must be within 1..{MAX_ATTEMPTS}, not {value}")


def _names(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if not isinstance(value, tuple):
        raise TypeError("retry_on must be a tuple of exception type names")
    if len(value) > MAX_RETRY_ON:
        raise ValueError(f"retry_on lists at most {MAX_RETRY_ON} exception types")
    for name in value:
        if not isinstance(name, str) or not name or len(name) > 200 or not name.isprintable():
            raise ValueError(f"retry_on holds exception type names, not {name!r}")


def _flag(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if type(value) is not bool:
        raise TypeError(f"{attribute.name} must be True or False, not {type(value).__name__}")


def _as_tuple(value: Any) -> Any:
    # A list (as JSON gives, or as written by hand) is taken as the tuple it means; a string
    # is not split into letters.
    return tuple(value) if isinstance(value, list) else value


@attrs.frozen(kw_only=True)
class RetryPolicy:
    """Try a failed tool or skill step again, up to ``max_attempts`` times in all.

    After failed attempt ``n`` the step waits ``base_delay * multiplier ** (n - 1)`` seconds,
    capped at ``max_delay``, less a random part of at most ``jitter`` of it (so steps failing
    together do not retry in lockstep): the wait is always within
    ``[(1 - jitter) * d, d]`` for that capped ``d``, never negative, never above
    ``max_delay``.

    ``retry_on`` names the exceptions worth retrying, by type name (``"ConnectionError"``)
    or qualified name (``"httpx.ReadTimeout"``); a subclass matches its bases' names. Empty
    means every exception. ``retry_timeouts`` says whether a step that ran past its timeout
    is tried again. A result that cannot be stored is never retried (the step would return
    it again).
    """

    max_attempts: int = attrs.field(default=3, validator=_attempts)
    base_delay: float = attrs.field(default=1.0, validator=_finite(0.0, MAX_RETRY_DELAY))
    max_delay: float = attrs.field(default=60.0, validator=_finite(0.0, MAX_RETRY_DELAY))
    multiplier: float = attrs.field(default=2.0, validator=_finite(1.0, 1_000.0))
    jitter: float = attrs.field(default=0.1, validator=_finite(0.0, 1.0))
    retry_on: tuple[str, ...] = attrs.field(default=(), converter=_as_tuple, validator=_names)
    retry_timeouts: bool = attrs.field(default=True, validator=_flag)

    def __attrs_post_init__(self) -> None:
        if self.base_delay > self.max_delay:
            raise ValueError(
                f"base_delay ({self.base_delay:g}) must not exceed max_delay ({self.max_delay:g})"
            )

    def delay(self, failed: int, rng: random.Random | None = None) -> float:
        """The wait after failed attempt number ``failed`` (1 for the first), in seconds."""
        exponent = min(max(failed, 1) - 1, 1_000)
        try:
            capped = min(self.max_delay, self.base_delay * self.multiplier**exponent)
        except OverflowError:  # a huge wait is capped; no wait at all stays none
            capped = self.max_delay if self.base_delay else 0.0
        draw = (rng or random).random()
        return max(0.0, capped * (1.0 - self.jitter * draw))

    def retries(self, error_types: Iterable[str], *, timed_out: bool = False) -> bool:
        """Whether a failure of this kind is worth another attempt (attempts left or not)."""
        if timed_out:
            return self.retry_timeouts
        names = tuple(error_types)
        if not names:  # not an exception (a result that cannot be stored): never retried
            return False
        if not self.retry_on:
            return True
        return any(name in self.retry_on for name in names)


def check_timeout(value: Any, what: str = "timeout") -> float | None:
    """``value`` as a timeout in seconds (None: none): positive and finite, else a clear
    ``TypeError`` / ``ValueError`` naming ``what``."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{what} must be a number of seconds or None, not {type(value).__name__}")
    if not (math.isfinite(value) and 0 < value <= MAX_COUNTER):
        raise ValueError(
            f"{what} must be a positive, finite number of seconds, at most {MAX_COUNTER}, "
            f"not {value!r}"
        )
    return float(value)
