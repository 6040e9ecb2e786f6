"""O1: telemetry is off unless the application set a provider (or gave one), and then the
``opentelemetry`` package is not even imported."""

from __future__ import annotations

import subprocess
import sys

import pytest

from mainspring.executions._telemetry import telemetry_from

_OFF = """
import sys, anyio, mainspring as ms
async def inc(x=0):
    return x + 1
async def main():
    plan = ms.Plan(id="p", goal="g", steps=(ms.PlanStep(id="a", tool="inc", input={}),))
    async with ms.open_runtime(store=ms.testing.MemoryStore(), tools={"inc": inc}) as rt:
        result = await (await rt.start("g", plan)).wait()
    print(result.status, any(m.startswith("opentelemetry") for m in sys.modules))
anyio.run(main)
"""


def test_O1_a_runtime_without_providers_never_imports_opentelemetry() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _OFF], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["completed", "False"]


def test_O1_telemetry_is_off_without_a_provider_and_on_with_one() -> None:
    from opentelemetry.sdk.trace import TracerProvider

    assert telemetry_from(False, TracerProvider(), None) is None
    assert telemetry_from(None, TracerProvider(), None) is not None
    assert telemetry_from(True, None, None) is not None  # the global providers, whatever


def test_O1_telemetry_takes_only_true_false_or_none() -> None:
    with pytest.raises(TypeError, match="telemetry"):
        telemetry_from("yes", None, None)


def test_O1_a_provider_of_the_wrong_type_is_a_clear_error() -> None:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.trace import TracerProvider

    with pytest.raises(TypeError, match="tracer_provider"):
        telemetry_from(None, "x", None)
    with pytest.raises(TypeError, match="tracer_provider"):
        telemetry_from(True, MeterProvider(), None)  # the two swapped
    with pytest.raises(TypeError, match="meter_provider"):
        telemetry_from(None, None, TracerProvider())
    with pytest.raises(TypeError, match="meter_provider"):
        telemetry_from(None, TracerProvider(), object())
