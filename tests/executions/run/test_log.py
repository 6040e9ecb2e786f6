"""The run's log records, piece by piece (O1): a worker's moves under
``mainspring.workers`` at the level they deserve, reasons named by their kind, and nothing
built for a level that is off."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

import mainspring as ms
from mainspring.executions._run import log as _log
from mainspring.executions._run.events import ExecutionCancelled, WorkerChanged

from .._kit import linear, runtime


def _worker(status: str, reason: str | None = None) -> WorkerChanged:
    return WorkerChanged(
        execution_id="ex",
        at=0.0,
        worker_id="ex:w1",
        task_id="ex:t1",
        step_id="s",
        generation=2,
        status=status,
        reason=reason,
    )


@pytest.mark.parametrize(
    ("status", "reason", "level"),
    [
        ("assigned", "takeover", logging.WARNING),
        ("blocked", "no-progress:lint", logging.WARNING),
        ("starting", None, logging.INFO),
        ("delivered", None, logging.INFO),
        ("running", None, logging.DEBUG),
        ("idle", None, logging.DEBUG),
    ],
)
def test_O1_a_workers_move_is_logged_under_workers_at_its_level(
    caplog: pytest.LogCaptureFixture, status: str, reason: str | None, level: int
) -> None:
    caplog.set_level(logging.DEBUG, logger="mainspring.workers")
    _log.run_event(_worker(status, reason))
    (record,) = caplog.records
    assert record.name == "mainspring.workers"
    assert record.levelno == level
    fields = (record.execution_id, record.worker_id, record.task_id, record.step_id)
    assert fields == ("ex", "ex:w1", "ex:t1", "s")
    assert (record.status, record.generation, record.reason) == (status, 2, reason)
    assert record.getMessage() == (
        f"execution ex: worker ex:w1 of agent task ex:t1 is {status} "
        f"(generation=2, reason={reason})"
    )


def test_O1_a_reason_is_logged_as_its_roots_kind_never_its_text(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="mainspring.executions")
    shutdown = ms.ParentCancel(ms.Shutdown(detail="closing the server"))
    event = ExecutionCancelled(execution_id="ex", at=0.0, cancelled_tasks=2)
    _log.run_event(event, shutdown)
    _log.run_event(event)
    assert [r.reason for r in caplog.records] == ["shutdown", "cancel"]
    assert "closing the server" not in caplog.text


@pytest.mark.anyio
async def test_O1_with_DEBUG_off_a_steps_log_is_never_built(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cost of logging unconfigured is a level check: what a step's record needs (its
    duration, its attempt) is not even looked up."""

    def built(*_: Any) -> None:
        raise AssertionError("a step's log was built with DEBUG off")

    monkeypatch.setattr(_log, "step_started", built)
    monkeypatch.setattr(_log, "step_finished", built)
    caplog.set_level(logging.INFO, logger="mainspring")
    async with runtime(tmp_path) as rt:
        result = await (await rt.start("g", linear(3))).wait()
    assert result.status == "completed"
    assert [r.levelno for r in caplog.records if r.name == "mainspring.executions"] == [
        logging.INFO,
        logging.INFO,
    ]


#: An owner id anyone sharing the store could have written: a secret, a token, an escape.
_SECRET_OWNER = "s3cr3t-owner-for-the-log-tests"
_TOKEN = "sk-" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6"


def test_E5_an_owner_id_is_redacted_and_inert_in_a_lost_lease_and_a_takeover(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A holder named by a lost lease, or the owner a run was taken over from, is read from
    the store: it reaches a record as everything stored does, redacted (E5), with the
    characters a terminal would act on shown as escapes."""
    ms.storage.register_secret(_SECRET_OWNER)
    caplog.set_level(logging.WARNING, logger="mainspring.executions")
    owner = f"thief-{_SECRET_OWNER}-{_TOKEN}-\x1b[2J"
    _log.lease_lost("ex", ms.LeaseLost(owner), "foreign_lease")
    _log.recovered("ex", "running", owner, recovery=True)
    lost, taken = caplog.records
    for record, field in ((lost, "holder"), (taken, "previous_owner")):
        text = record.getMessage() + repr(record.__dict__)
        assert _SECRET_OWNER not in text
        assert _TOKEN not in text
        assert "\x1b" not in text
        assert getattr(record, field).startswith("thief-[redacted")
        assert getattr(record, field).endswith("-\\x1b[2J")


def test_O2_a_run_taken_up_after_a_shutdown_is_logged_at_INFO_naming_no_owner(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """No owner left the lease held (its runtime shut down and let it go): a resume, not a
    takeover from a dead owner, and never an owner called ``None``."""
    caplog.set_level(logging.DEBUG, logger="mainspring.executions")
    _log.recovered("ex", "running", None, recovery=True)
    _log.recovered("ex", "planned", "gone:1:x", recovery=False)
    after_shutdown, taken = caplog.records
    assert after_shutdown.levelno == logging.INFO
    assert after_shutdown.getMessage() == (
        "execution ex resumed after a shutdown: it was running, left for a resume"
    )
    assert (after_shutdown.reason, after_shutdown.previous_owner) == ("shutdown", None)
    assert after_shutdown.recovery is True
    assert "None" not in after_shutdown.getMessage()
    assert taken.levelno == logging.WARNING
    assert taken.getMessage() == (
        "execution ex taken over by a resume: it was planned and its owner gone:1:x was gone"
    )
    assert taken.reason == "owner-gone"
