"""OpenTelemetry for runs (O1): spans, metrics and the trace context a run keeps.

Nothing here imports ``opentelemetry`` until telemetry is on (:func:`telemetry_from`): a
runtime without the ``otel`` extra, or one whose application set no provider, pays nothing.
"""

from .switch import Telemetry as Telemetry
from .switch import telemetry_from as telemetry_from

__all__ = ["Telemetry", "telemetry_from"]
