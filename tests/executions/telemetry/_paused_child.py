"""Subprocess for the trace-across-processes test: start one run traced to an in-memory
exporter, pause it once its step is under way, and write its run span's ids to a file.

    python _paused_child.py <store> <execution id> <spans file>
"""

from __future__ import annotations

import json
import sys
from typing import Any

import anyio
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import mainspring as ms


async def main(store: str, execution_id: str, out: str) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    entered = anyio.Event()

    async def gate(**_: Any) -> int:
        entered.set()
        await anyio.sleep_forever()
        return 0

    gate.__qualname__ = "gate"  # the test's tool of that name: a resume there is no drift
    plan = ms.Plan(id="p", goal="g", steps=(ms.PlanStep(id="a", tool="gate", input={}),))
    async with ms.open_runtime(
        store=store, tools={"gate": gate}, recover=False, tracer_provider=provider
    ) as rt:
        handle = await rt.start("g", plan, execution_id=execution_id)
        await entered.wait()
        await rt.pause(handle.execution_id, reason="moving hosts")
    spans = [
        {
            "name": s.name,
            "trace_id": s.context.trace_id,
            "span_id": s.context.span_id,
            "attributes": dict(s.attributes or {}),
        }
        for s in exporter.get_finished_spans()
    ]
    await anyio.Path(out).write_text(json.dumps(spans))


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], sys.argv[2], sys.argv[3])
