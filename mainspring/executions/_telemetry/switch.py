"""Whether a runtime traces and meters its runs, and what it does so with.

As OpenTelemetry libraries do, mainspring reports to the providers the application set
(``opentelemetry.trace.set_tracer_provider`` / ``metrics.set_meter_provider``), or to those
given to ``open_runtime``. With neither, telemetry is off and ``opentelemetry`` is not even
imported: a runtime without the ``otel`` extra, or in an application that configured no
provider, pays nothing for it.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from opentelemetry.context import Context

    from ...storage import Execution
    from .metrics import Meters
    from .spans import RunSpans

__all__ = ["Telemetry", "telemetry_from"]


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("mainspring")
    except PackageNotFoundError:  # pragma: no cover - run from a source tree
        return "0"


def _global_provider_set() -> bool:
    """Whether the application set a global tracer or meter provider. If it never imported
    ``opentelemetry``, it set none: nothing is imported to find out."""
    if "opentelemetry.trace" not in sys.modules and "opentelemetry.metrics" not in sys.modules:
        return False
    from opentelemetry import metrics, trace

    traced = not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
    metered = type(metrics.get_meter_provider()).__name__ != "_ProxyMeterProvider"
    return traced or metered


def telemetry_from(enabled: Any, tracer_provider: Any, meter_provider: Any) -> Telemetry | None:
    """``open_runtime``'s ``telemetry``, ``tracer_provider`` and ``meter_provider``: the
    runtime's :class:`Telemetry`, or None when it is off. ``enabled`` None (the default):
    on when a provider is given or the application set a global one; True: on (the global
    providers, whatever they are); False: off, whatever is given. A provider given that is
    not OpenTelemetry's (API) ``TracerProvider`` / ``MeterProvider`` is a ``TypeError``."""
    if enabled is not None and not isinstance(enabled, bool):
        raise TypeError(f"telemetry must be True, False or None, not {enabled!r}")
    if enabled is False:
        return None
    given = tracer_provider is not None or meter_provider is not None
    if enabled is None and not given and not _global_provider_set():
        return None
    try:
        from opentelemetry import metrics, trace
    except ImportError as exc:
        raise ImportError("telemetry needs the otel extra: pip install 'mainspring[otel]'") from exc
    for name, given_one, kind, spelled in (
        ("tracer_provider", tracer_provider, trace.TracerProvider, "trace.TracerProvider"),
        ("meter_provider", meter_provider, metrics.MeterProvider, "metrics.MeterProvider"),
    ):
        if given_one is not None and not isinstance(given_one, kind):
            raise TypeError(
                f"{name} must be an opentelemetry.{spelled} (or None), "
                f"not {type(given_one).__name__}"
            )
    return Telemetry(tracer_provider, meter_provider)


class Telemetry:
    """A runtime's tracer and instruments (see the module docstring); made by
    :func:`telemetry_from` only once telemetry is on."""

    def __init__(self, tracer_provider: Any, meter_provider: Any) -> None:
        from opentelemetry import trace

        from .metrics import Meters

        version = _version()
        self.tracer = trace.get_tracer("mainspring", version, tracer_provider=tracer_provider)
        self.meters: Meters = Meters(meter_provider, version)

    def current(self) -> Context:
        """The caller's context: a run started or resumed here is traced under its span."""
        from opentelemetry import context

        return context.get_current()

    def run(self, record: Execution, caller: Context | None, *, resumed: bool) -> RunSpans:
        """The spans of one run of ``record`` (see ``spans``)."""
        from .spans import RunSpans

        return RunSpans(self.tracer, self.meters, record, caller, resumed=resumed)

    def flushed(self, commits: int) -> None:
        """The writer made ``commits`` run commits durable in one flush."""
        self.meters.flush_size.record(commits)

    def recovered(self) -> None:
        """A run nobody ran was taken over here."""
        self.meters.recoveries.add(1)

    def committed(self, seconds: float) -> None:
        """A run's commit was answered ``seconds`` after it was sent."""
        self.meters.commit_duration.record(seconds)
