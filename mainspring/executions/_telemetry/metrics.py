"""A runtime's instruments (O1): counts, durations and sizes, with ids of kinds and states as
attributes, never an execution id (one series per run would grow without bound)."""

from __future__ import annotations

from opentelemetry import metrics

__all__ = ["Meters"]

_SECONDS = "s"


class Meters:
    """Every instrument a runtime records to, made once from ``provider`` (its meter is
    named ``mainspring``)."""

    def __init__(self, provider: metrics.MeterProvider | None, version: str) -> None:
        meter = metrics.get_meter("mainspring", version, meter_provider=provider)
        self.steps_started = meter.create_counter(
            "mainspring.steps.started", "{step}", "Step attempts started."
        )
        self.steps_succeeded = meter.create_counter(
            "mainspring.steps.succeeded", "{step}", "Steps that succeeded."
        )
        self.steps_failed = meter.create_counter(
            "mainspring.steps.failed", "{step}", "Steps that failed (after their last attempt)."
        )
        self.steps_retried = meter.create_counter(
            "mainspring.steps.retried", "{attempt}", "Failed attempts whose step is retried."
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
        self.runs = meter.create_up_down_counter(
            "mainspring.runs", "{run}", "Runs live in this process, by status."
        )
        self.runs_ended = meter.create_counter(
            "mainspring.runs.ended", "{run}", "Runs that stopped here, by the status they left."
        )
        self.leases_held = meter.create_up_down_counter(
            "mainspring.leases.held", "{lease}", "Execution leases this process holds."
        )
        self.recoveries = meter.create_counter(
            "mainspring.recoveries", "{run}", "Runs nobody ran, taken over by this process."
        )
