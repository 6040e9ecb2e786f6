"""``open_runtime``'s options, checked before anything starts: bad input is a clear error."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ...storage._seam import check_id
from .._rules.deadlines import Bounds, check_bounds

__all__ = [
    "MAX_LEASE_TTL",
    "MIN_LEASE_TTL",
    "check_options",
    "check_registries",
    "check_step_limits",
]

#: A lease shorter than a second lapses under ordinary load; one longer than ten minutes
#: leaves a crashed run unrecoverable for too long (the reference design's bounds).
MIN_LEASE_TTL = 1.0
MAX_LEASE_TTL = 600.0

Registry = Mapping[str, Callable[..., Any]] | None


def check_options(
    max_parallel_steps: Any, max_calls: Any, lease_ttl: Any, heartbeat_interval: Any
) -> float:
    """Raise ValueError for an option out of range; returns the heartbeat interval (a third
    of the lease by default)."""
    for name, value in (("max_parallel_steps", max_parallel_steps), ("max_calls", max_calls)):
        if not isinstance(value, int) or value < (1 if name == "max_parallel_steps" else 0):
            raise ValueError(f"{name} must be a non-negative whole number, not {value!r}")
    if (
        not isinstance(lease_ttl, int | float)
        or isinstance(lease_ttl, bool)
        or not MIN_LEASE_TTL <= lease_ttl <= MAX_LEASE_TTL
    ):
        raise ValueError(
            f"lease_ttl must be {MIN_LEASE_TTL:g} to {MAX_LEASE_TTL:g} seconds, not {lease_ttl!r}"
        )
    interval = heartbeat_interval if heartbeat_interval is not None else lease_ttl / 3
    if not 0 < interval < lease_ttl:
        raise ValueError("heartbeat_interval must be positive and shorter than lease_ttl")
    return float(interval)


def check_registries(
    tools: Registry, skills: Registry, agents: Registry
) -> tuple[dict[str, Callable[..., Any]], ...]:
    """Copies of the tool, skill and agent maps; every name an id, every value callable."""
    copies = (dict(tools or {}), dict(skills or {}), dict(agents or {}))
    for kind, registry in zip(("tool", "skill", "agent"), copies, strict=True):
        for key in registry:
            check_id(key)
            if not callable(registry[key]):
                raise TypeError(f"{kind} {key} is not callable")
    return copies


def check_step_limits(
    timeouts: Any, retries: Any, registries: tuple[dict[str, Callable[..., Any]], ...]
) -> Bounds:
    """``timeouts`` and ``retries`` (B1) checked against the registered tools, skills and
    agents: see ``executions._deadlines`` for the keys and how a step's limits are found."""
    tools, skills, agents = registries
    return check_bounds(timeouts, retries, {"tool": tools, "skill": skills, "agent": agents})
