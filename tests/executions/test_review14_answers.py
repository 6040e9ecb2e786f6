"""Review #14: answers for a run live on another host (R8 across hosts, ``_answers.py``).

Host A (a process of its own, 60 s heartbeat) runs ``_shared.ASKING``: its agent asks while
another step keeps the run live. A is frozen with SIGSTOP once the question is stored, so
what the other hosts write lands before A's runner can take it; SIGCONT lets A go on.
"""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

import anyio
import anyio.to_thread
import pytest

import mainspring as ms

from .._postgres import postgres_url  # noqa: F401 - a fixture
from . import _shared
from ._review14_host import Host, answerer

pytestmark = pytest.mark.anyio

ID = "ex-ask"


def _host(url: str) -> AbstractAsyncContextManager[ms.Runtime]:
    return ms.open_runtime(
        store=url, tools=_shared.TOOLS, agents=_shared.AGENTS, **_shared.SLOW_HEARTBEAT
    )


async def _until(rt: ms.Runtime, ok: Callable[[ms.storage.Execution], bool]) -> None:
    with anyio.fail_after(60):
        while True:
            record = await rt.get(ID)
            if record is not None and ok(record):
                return
            await anyio.sleep(0.05)


def _waiting(record: ms.storage.Execution) -> bool:
    tasks, _ = ms.storage._seam.parse_agent_tasks(record)
    return bool(tasks) and tasks[0].state == "waiting_for_clarification"


@asynccontextmanager
async def _frozen_asker(url: str) -> AsyncIterator[Host]:
    """Host A with its question stored and its process frozen (SIGSTOP)."""
    a = Host(url, ID, plan="asking")
    try:
        assert await a.next_line() == "entered"
        async with _host(url) as watcher:
            await _until(watcher, _waiting)
        os.kill(a.proc.pid, signal.SIGSTOP)
        yield a
    finally:
        if a.proc.poll() is None:
            os.kill(a.proc.pid, signal.SIGCONT)
        await anyio.to_thread.run_sync(a.finish)


async def test_two_hosts_answering_one_question_only_one_answer_is_accepted(
    postgres_url: str,  # noqa: F811
) -> None:
    """B and C both answer A's one question. One answer is given to the agent; the other
    caller must be told its answer was not used (ExecutionBusy, as for an answer with no
    question open) and the audit must not say the question was answered twice. Today both
    writes are accepted (``answer_request_edit`` only checks the task still waits, not that
    an answer for that ask is already pending) and both callers get a handle back."""
    outcomes: dict[str, str] = {}
    async with _frozen_asker(postgres_url) as a, _host(postgres_url) as b, _host(postgres_url) as c:

        async def answer(rt: ms.Runtime, text: str) -> None:
            try:
                await rt.resume(ID, answer=text)
                outcomes[text] = "accepted"
            except ms.ExecutionBusy:
                outcomes[text] = "refused"

        async with anyio.create_task_group() as tg:
            tg.start_soon(answer, b, "Lisbon")
            await _until(b, lambda r: len(r.answer_requests) == 1)
            tg.start_soon(answer, c, "Porto")
            # Either C's answer is refused at once, or (today) it is written too.
            with anyio.fail_after(60):
                while "Porto" not in outcomes:
                    record = await b.get(ID)
                    assert record is not None
                    if len(record.answer_requests) == 2:
                        break
                    await anyio.sleep(0.05)
            os.kill(a.proc.pid, signal.SIGCONT)
        assert await a.next_line() == "answered Lisbon"
        record = await b.get(ID)
        assert record is not None
        await b.cancel(ID, reason="done")
    assert outcomes == {"Lisbon": "accepted", "Porto": "refused"}
    assert [ctl.action for ctl in record.controls].count("answer") == 1


async def test_an_answer_written_for_a_run_then_paused_is_applied_by_the_next_resume(
    postgres_url: str,  # noqa: F811
) -> None:
    """B answers while A is frozen (the answer is written to the record); C then pauses the
    run before A could take it; A wakes and pauses. ``_answers.py`` promises "If the runner
    ends before taking it, the next resume applies the stored request, so an answer is never
    lost". But ``_resume`` with no answer returns early for a paused run whose pending
    question belongs to an agent task (R5), before ``prepare_resume`` would apply the stored
    request: B's own follow-up resume (``how == "released"``) and every later one leave the run
    waiting, the answer unused."""
    async with _frozen_asker(postgres_url) as a, _host(postgres_url) as b, _host(postgres_url) as c:
        got: list[ms.ExecutionHandle] = []

        async def answer() -> None:
            got.append(await b.resume(ID, answer="Lisbon"))

        async with anyio.create_task_group() as tg:
            tg.start_soon(answer)
            await _until(b, lambda r: len(r.answer_requests) == 1)
            paused = await c.pause(ID, reason="from C")
            assert paused.status == "paused"
            os.kill(a.proc.pid, signal.SIGCONT)
        assert await a.next_line() == "reason Pause"
        first = await got[0].wait()
        # The caller's answer went somewhere: either the run went on with it, or a resume
        # of the paused run does.
        if first.status != "completed":
            again = await (await b.resume(ID)).wait()
        else:
            again = first
        record = await b.get(ID)
        assert record is not None
    assert again.status == "completed", (first.status, again.status, record.pending)
    assert again.outputs["ask"] == "Lisbon"


async def test_an_answer_from_a_host_whose_clock_is_ahead_is_not_reported_busy(
    postgres_url: str,  # noqa: F811
) -> None:
    """Host B's clock is an hour fast. B answers A's question (A frozen a moment, so B's
    check runs before A takes it). The answer is written, and A takes it once it wakes —
    yet B's call raises ExecutionBusy: ``wait_taken`` decides whether A's lease is live on
    B's clock (``holder(stored.lease, time.time())``, executions/_answers.py), sees it lapsed,
    treats it as released and resumes, which the server (its own clock) refuses. A caller told
    "busy" answers again, or gives up on an answer that was in fact used."""
    async with _frozen_asker(postgres_url) as a, _host(postgres_url) as watcher:
        b = answerer(postgres_url, ID, "Lisbon", skew=3600.0)
        try:
            await _until(watcher, lambda r: len(r.answer_requests) == 1)  # B's answer written
            os.kill(a.proc.pid, signal.SIGCONT)
            assert await a.next_line() == "answered Lisbon"  # A used it
            said = await anyio.to_thread.run_sync(lambda: b.communicate(timeout=120)[0])
        finally:
            if b.poll() is None:
                b.kill()
                b.wait()
        await watcher.cancel(ID, reason="done")
    assert said.strip().startswith("handle"), said
