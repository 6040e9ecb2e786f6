"""Answers for runs that are live: here or on another host (R8 across hosts).

A run waiting for an answer with nothing else to do has ended and released its lease: a
resume with the answer runs it wherever it is given. A run still live (other steps running)
holds its lease, so the answer is written to its record instead (an :class:`AnswerRequest`)
and its runner takes it at its next heartbeat — at once where the store sends notices, or
where the run is live in this runtime (its actor is told). If the runner ends before taking
it, the next resume applies the stored request, so an answer is never lost.

``Runtime.answer`` writes the same request whether or not the run is live anywhere (a run
that waits with nothing live keeps it for its next resume, by hand or by ``recover``), the
run's own question included (R10).
"""

from __future__ import annotations

import contextlib
import time
from typing import Literal

import anyio
import anyio.to_thread

from ...actors import ActorDeadError, ActorRef, MailboxFull
from ...storage import Store
from ...storage._seam import Committer, LeaseResult
from .._run.messages import Heartbeat, RunConfig
from .handle import ExecutionBusy
from .record_controls import answer_request_edit, unreadable_asker_error

__all__ = ["answer_elsewhere", "check_answer", "request_answer", "wait_taken"]

#: How often a resumer looks whether the runner elsewhere took the answer.
POLL = 0.1
#: How long a resumer waits for the runner elsewhere to take the answer.
PATIENCE = 1.0


def check_answer(text: object) -> str:
    """``text`` if it can be an answer: a string with a UTF-8 form (a lone surrogate, as a
    command line's undecodable bytes become, has none and could never be stored).
    TypeError / ValueError otherwise, before anything is read or written."""
    if not isinstance(text, str):
        raise TypeError(f"an answer must be a string, not {type(text).__name__}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("an answer must be valid UTF-8 text (it has undecodable bytes)") from None
    return text


async def request_answer(
    committer: Committer,
    by: str,
    execution_id: str,
    answer: str,
    runner: ActorRef | None,
    *,
    live_only: bool = True,
) -> str | None:
    """Write ``answer`` for the task whose question is open on the live run; tell
    ``runner`` (the run's actor, when it is live here). Returns the task's id, or None if
    nothing was written (no agent's question is open, or no lease on the run is live).
    Without ``live_only``, written whenever the run waits for an answer, live or not
    (``Runtime.answer``; see ``answer_request_edit``). ExecutionBusy if every open question
    has an answer waiting already; RecordError if the asking task's record does not parse
    (E8)."""
    asked: list[str] = []
    edit = answer_request_edit(by, answer, asked, live_only=live_only)
    written = await committer.edit(execution_id, edit)
    if asked and asked[0].startswith("!"):
        raise unreadable_asker_error(execution_id, asked[0][1:])  # E8: not "busy"
    if asked == [""]:
        raise ExecutionBusy(
            execution_id,
            None,
            "its open question has an answer already, waiting for its task to take it",
        )
    if written is None or not asked:
        return None
    if runner is not None:
        # It reads the record now, not at its next beat; if it is busy or ending, its own
        # heartbeat (or the next resume) takes the answer.
        with contextlib.suppress(MailboxFull, ActorDeadError):
            runner.tell_nowait(Heartbeat())
    return asked[-1]


async def answer_elsewhere(
    committer: Committer,
    by: str,
    execution_id: str,
    answer: str,
    cfg: RunConfig,
    refused: LeaseResult,
) -> Literal["taken", "released"] | None:
    """R8 for a run live on another host (``refused``: our acquire's answer): write the
    answer, then wait about one heartbeat until its runner took it, or ended without it
    (``"released"``: the caller resumes it, and the resume applies the stored answer).
    None if nothing was written; ExecutionBusy if the runner has not taken it yet (the
    answer stays on the record for it, or for the next resume)."""
    task_id = await request_answer(committer, by, execution_id, answer, None)
    if task_id is None:
        return None
    # A store that notifies has the runner take it within a round trip; one that does not,
    # within the runner's heartbeat: past PATIENCE the caller is told "busy, kept".
    how = await wait_taken(committer.store, execution_id, task_id, min(PATIENCE, cfg.lease_ttl))
    if how == "waiting":
        kept = "; the answer is kept: it goes to the run when its runner next checks the "
        raise ExecutionBusy(execution_id, refused.lease, f"{refused.reason}{kept}record")
    return how


async def wait_taken(
    store: Store, execution_id: str, task_id: str, patience: float
) -> Literal["taken", "released", "waiting"]:
    """Whether the runner took the answer for ``task_id`` (its task no longer waits), or
    ended without it (no live lease: a resume must apply it), within ``patience`` s."""
    deadline = time.monotonic() + patience
    while True:
        stored = await anyio.to_thread.run_sync(store.get, execution_id)
        if stored is None or stored.terminal:
            return "taken"
        task = next((t for t in stored.task_records if t.id == task_id), None)
        if task is None or task.state != "waiting_for_clarification":
            return "taken"
        if stored.lease is None or not stored.lease.owner:
            # Released by its runner. A lapsed lease is not judged here: this host's
            # clock is not the store's (a caller told "busy" resumes later).
            return "released"
        if time.monotonic() >= deadline:
            return "waiting"
        await anyio.sleep(POLL)
