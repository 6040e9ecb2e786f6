"""A runtime's instruments (O1): counts, durations and sizes, with ids of kinds and states as
attributes, never an execution id (one series per run would grow without bound).

The counts (steps started, succeeded, failed and retried; runs live and ended; leases held;
recoveries) are tallies in this process that asynchronous instruments report when a reader
collects: counting a step is adding one to an integer, not an SDK measurement, and what a
reader sees is the same cumulative sum (or, for the up-down ones, the current value) a
counter would have. The tallies are kept per meter provider, shared by every runtime that
reports to it, as one instrument per name is. Durations and sizes are histograms, recorded
with attribute mappings made once and reused.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from opentelemetry import metrics

__all__ = ["Meters", "Tally"]

_SECONDS = "s"
_STEP_KIND = "mainspring.step.kind"
_STEP_STATE = "mainspring.step.state"
_STATUS = "mainspring.execution.status"

#: An attribute set, made once per provider and series and never changed (see ``Meters``).
Attributes = Mapping[str, str]
_NONE: Attributes = {}


class Tally:
    """Counts by attribute set, read by an asynchronous instrument's callback (possibly
    from a reader's thread: a lock keeps each change and each reading whole). A series is
    found by its attribute set's identity: sets are interned per provider (``Meters``)."""

    __slots__ = ("_counts", "_lock")

    def __init__(self) -> None:
        self._counts: dict[int, list[Any]] = {}
        self._lock = threading.Lock()

    def add(self, amount: int, attributes: Attributes = _NONE) -> None:
        with self._lock:
            entry = self._counts.get(id(attributes))
            if entry is None:
                self._counts[id(attributes)] = [attributes, amount]
            else:
                entry[1] += amount

    def observe(self, _options: Any = None) -> Iterable[metrics.Observation]:
        with self._lock:
            counts = [(attributes, value) for attributes, value in self._counts.values()]
        return [metrics.Observation(value, dict(attributes)) for attributes, value in counts]


class _Shared:
    """The tallies of one meter provider and the instruments that report them."""

    def __init__(self, meter: metrics.Meter) -> None:
        def observed(name: str, unit: str, description: str, *, up_down: bool = False) -> Tally:
            tally = Tally()
            create: Callable[..., Any] = (
                meter.create_observable_up_down_counter
                if up_down
                else meter.create_observable_counter
            )
            create(name, callbacks=[tally.observe], unit=unit, description=description)
            return tally

        self.steps_started = observed(
            "mainspring.steps.started", "{step}", "Step attempts started."
        )
        self.steps_succeeded = observed(
            "mainspring.steps.succeeded", "{step}", "Steps that succeeded."
        )
        self.steps_failed = observed(
            "mainspring.steps.failed", "{step}", "Steps that failed (after their last attempt)."
        )
        self.steps_retried = observed(
            "mainspring.steps.retried", "{attempt}", "Failed attempts whose step is retried."
        )
        self.runs = observed(
            "mainspring.runs", "{run}", "Runs live in this process, by status.", up_down=True
        )
        self.runs_ended = observed(
            "mainspring.runs.ended", "{run}", "Runs that stopped here, by the status they left."
        )
        self.leases_held = observed(
            "mainspring.leases.held",
            "{lease}",
            "Execution leases this process holds.",
            up_down=True,
        )
        self.recoveries = observed(
            "mainspring.recoveries", "{run}", "Runs nobody ran, taken over by this process."
        )
        self.step_duration = meter.create_histogram(
            "mainspring.step.duration", _SECONDS, "How long one attempt of a step ran."
        )
        self.commit_duration = meter.create_histogram(
            "mainspring.commit.duration", _SECONDS, "From a run's commit to its durable answer."
        )
        self.flush_size = meter.create_histogram(
            "mainspring.flush.batch_size", "{commit}", "Run commits written by one durable flush."
        )
        #: The attribute sets recorded with, one object per series (``Tally`` keys on it).
        self.sets: dict[tuple[str, ...], Attributes] = {}


#: Per meter provider (weakly: a provider dropped takes its tallies along).
_shared: weakref.WeakKeyDictionary[Any, _Shared] = weakref.WeakKeyDictionary()
_shared_lock = threading.Lock()


def _shared_for(provider: metrics.MeterProvider | None, version: str) -> _Shared:
    key = provider if provider is not None else metrics.get_meter_provider()
    with _shared_lock:
        found = _shared.get(key)
        if found is None:
            meter = metrics.get_meter("mainspring", version, meter_provider=key)
            found = _shared[key] = _Shared(meter)
        return found


class Meters:
    """Every instrument a runtime records to, bound once from ``provider`` (its meter is
    named ``mainspring``; ``None``: the global provider), and the attribute sets it records
    with, made once each."""

    def __init__(self, provider: metrics.MeterProvider | None, version: str) -> None:
        shared = _shared_for(provider, version)
        self.steps_started = shared.steps_started
        self.steps_succeeded = shared.steps_succeeded
        self.steps_failed = shared.steps_failed
        self.steps_retried = shared.steps_retried
        self.runs = shared.runs
        self.runs_ended = shared.runs_ended
        self.leases_held = shared.leases_held
        self.recoveries = shared.recoveries
        self.step_duration = shared.step_duration
        self.commit_duration = shared.commit_duration
        self.flush_size = shared.flush_size
        self._sets = shared.sets

    def _set(self, key: tuple[str, ...], make: Callable[[], Attributes]) -> Attributes:
        found = self._sets.get(key)
        if found is None:  # setdefault: one set even if two threads make it at once
            found = self._sets.setdefault(key, make())
        return found

    def kind(self, kind: str) -> Attributes:
        """The attribute set of a step kind's series."""
        return self._set(("kind", kind), lambda: {_STEP_KIND: kind})

    def kind_state(self, kind: str, state: str) -> Attributes:
        """The attribute set of a step kind's attempts that ended ``state``."""
        return self._set(("kind", kind, state), lambda: {_STEP_KIND: kind, _STEP_STATE: state})

    def status(self, status: str) -> Attributes:
        """The attribute set of runs with ``status``."""
        return self._set(("status", status), lambda: {_STATUS: status})
