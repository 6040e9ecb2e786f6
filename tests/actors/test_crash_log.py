"""How the kernel logs a crash (actors/_crash_log.py): the traceback as scrubbed text, never
``exc_info`` (E5, O1), bounded (O2), with the actor's path as a field."""

from __future__ import annotations

import logging
from typing import Any

import pytest

import mainspring as ms
from mainspring.actors._seam import log_error
from mainspring.storage import register_secret

pytestmark = pytest.mark.anyio

SECRET = "kernel-log-secret-8d1f"


def _kernel_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "mainspring.actors"]


async def test_E5_an_actor_crash_is_logged_with_its_traceback_and_no_registered_secret(
    caplog: pytest.LogCaptureFixture,
) -> None:
    register_secret(SECRET)

    class Leaky(ms.Actor):
        async def receive(self, message: Any) -> Any:
            raise RuntimeError(f"could not log in with {SECRET}")

    caplog.set_level(logging.ERROR, logger="mainspring.actors")
    async with ms.open_system() as system:
        ref = await system.spawn(Leaky, name="leaky")
        await ref.tell("go")
        reason = await ref.wait_stopped()
        assert isinstance(reason, ms.Crash)
    (record,) = [r for r in _kernel_records(caplog) if "crashed" in r.getMessage()]
    assert record.levelno == logging.ERROR
    assert record.exc_info is None  # a handler could print the exception's text as it is
    text = record.getMessage()
    assert "actor /leaky crashed" in text
    assert "Traceback" in text
    assert "RuntimeError" in text
    assert SECRET not in text
    assert SECRET not in caplog.text
    assert record.actor == "/leaky"  # type: ignore[attr-defined]


async def test_E5_an_on_stop_failure_is_logged_without_its_secret(
    caplog: pytest.LogCaptureFixture,
) -> None:
    register_secret(SECRET)

    class BadStop(ms.Actor):
        async def receive(self, message: Any) -> Any:
            return message

        async def on_stop(self, reason: ms.CancelReason) -> None:
            raise OSError(f"cleanup refused token {SECRET}")

    caplog.set_level(logging.ERROR, logger="mainspring.actors")
    async with ms.open_system() as system:
        ref = await system.spawn(BadStop, name="bad")
        await ref.stop(ms.Pause())
    (record,) = [r for r in _kernel_records(caplog) if "on_stop raised" in r.getMessage()]
    assert "OSError" in record.getMessage()
    assert SECRET not in caplog.text


def test_O2_a_logged_traceback_is_bounded_and_keeps_its_end(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from mainspring.actors._crash_log import MAX_LOGGED_TRACEBACK

    caplog.set_level(logging.ERROR, logger="test.crash")
    try:
        raise ValueError("x" * (MAX_LOGGED_TRACEBACK * 2) + " the end")
    except ValueError as exc:
        log_error(logging.getLogger("test.crash"), "it broke", exc=exc)
    (record,) = caplog.records
    text = record.getMessage()
    assert len(text) <= MAX_LOGGED_TRACEBACK + 100
    assert text.startswith("it broke\n...")
    assert text.endswith(" the end")


def test_O1_nothing_is_formatted_when_error_is_off() -> None:
    quiet = logging.getLogger("test.crash.quiet")
    quiet.setLevel(logging.CRITICAL)

    class Boom(Exception):
        def __str__(self) -> str:
            raise AssertionError("formatted although ERROR is off")

    log_error(quiet, "never %s", "seen", exc=Boom())


async def test_O2_an_actor_whose_crashes_are_reported_elsewhere_crashes_unlogged_by_the_kernel(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An actor class that says its crashes are logged by the code that knows what they
    mean (``_mainspring_crashes_reported``): the kernel still ends it with a Crash and tells
    its watchers, but logs nothing of it; another actor's crash is still logged."""

    class Reported(ms.Actor):
        _mainspring_crashes_reported = True

        async def receive(self, message: Any) -> Any:
            raise RuntimeError("reported by whoever watches it")

    class Plain(ms.Actor):
        async def receive(self, message: Any) -> Any:
            raise RuntimeError("logged by the kernel")

    caplog.set_level(logging.DEBUG, logger="mainspring.actors")
    async with ms.open_system() as system:
        reported = await system.spawn(Reported, name="reported")
        await reported.tell("go")
        reason = await reported.wait_stopped()
        plain = await system.spawn(Plain, name="plain")
        await plain.tell("go")
        await plain.wait_stopped()
    assert isinstance(reason, ms.Crash)
    assert reason.error_type == "RuntimeError"
    (record,) = _kernel_records(caplog)
    assert record.getMessage().startswith("actor /plain crashed")


_ACTORS_ALONE = """
import io, logging, sys
import anyio
import mainspring as ms

logged = io.StringIO()
logging.getLogger("mainspring.actors").addHandler(logging.StreamHandler(logged))


class Leaky(ms.Actor):
    async def receive(self, message):
        raise RuntimeError("signed in with AKIAABCDEFGHIJKLMNOP")


async def main():
    async with ms.open_system() as system:
        ref = await system.spawn(Leaky, name="leaky")
        await ref.tell("go")
        await ref.wait_stopped()


anyio.run(main, backend=sys.argv[1])
print("mainspring.storage" in sys.modules, "crashed" in logged.getvalue(),
      "AKIAABCDEFGHIJKLMNOP" in logged.getvalue())
"""


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_E5_a_program_of_actors_alone_logs_crashes_with_credentials_masked(backend: str) -> None:
    """E5: a program that uses only the kernel never imports the stores; its crash log
    still masks credential shapes. The masking used to be installed by importing storage,
    so such a program logged an AWS key as it was."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", _ACTORS_ALONE, backend], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["False", "True", "False"]  # no storage, logged, masked
