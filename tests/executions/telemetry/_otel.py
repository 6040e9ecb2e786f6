"""In-memory OpenTelemetry for the telemetry tests: a tracer provider whose finished spans a
test reads, a meter provider whose points it collects, and a runtime traced to both."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import mainspring as ms


class Otel:
    """Providers that keep what they were given, in memory."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])

    def spans(self, name: str | None = None) -> list[ReadableSpan]:
        found = list(self.exporter.get_finished_spans())
        return [s for s in found if name is None or s.name == name]

    def one(self, name: str, **attributes: Any) -> ReadableSpan:
        found = [
            s
            for s in self.spans(name)
            if all((s.attributes or {}).get(k) == v for k, v in attributes.items())
        ]
        assert len(found) == 1, [(s.name, s.attributes) for s in self.spans()]
        return found[0]

    def attempts(self, step_id: str | None = None) -> list[ReadableSpan]:
        """The spans of step attempts (any name: a tool or skill step's attempt is its call's
        span, ``mainspring.tool`` / ``mainspring.skill``; an agent step's, ``mainspring.step``),
        of ``step_id`` only if given, in attempt order."""
        found = [
            s
            for s in self.spans()
            if "mainspring.step.attempt" in (s.attributes or {})
            and (step_id is None or s.attributes["mainspring.step.id"] == step_id)
        ]
        return sorted(found, key=lambda s: s.attributes["mainspring.step.attempt"])

    def points(self, metric: str) -> list[Any]:
        data = self.reader.get_metrics_data()
        if data is None:
            return []
        return [
            point
            for resource in data.resource_metrics
            for scope in resource.scope_metrics
            for m in scope.metrics
            if m.name == metric
            for point in m.data.data_points
        ]

    def total(self, metric: str, **attributes: Any) -> float:
        return sum(
            p.value
            for p in self.points(metric)
            if all(p.attributes.get(k) == v for k, v in attributes.items())
        )

    @asynccontextmanager
    async def runtime(self, **options: Any) -> AsyncIterator[ms.Runtime]:
        options.setdefault("store", ms.testing.MemoryStore())
        async with ms.open_runtime(
            tracer_provider=self.tracer_provider, meter_provider=self.meter_provider, **options
        ) as rt:
            yield rt
