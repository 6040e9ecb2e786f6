"""The buttons: pause, cancel, resume, answer and stop a task, through the same runtime calls
the command's control commands make (``Runtime.pause``, ``cancel``, ``resume``, ``answer``,
``stop_agent_task``), on the view's own runtime, which never recovers runs by itself (L8: a
view acts on the run it is told to, only).

Each returns what the page shows, or raises :class:`Refused` with an HTTP status and a line
saying why (unknown 404, nothing to do or busy 409, too large 413, no ``--app`` 409).
"""

from __future__ import annotations

from typing import Any

import anyio.to_thread
import attrs

from ..executions import ExecutionBusy, InvalidPlan, NotWaiting, Runtime, UnknownExecution
from ..storage import TooLarge, redact
from ..storage._seam import holder


class Refused(Exception):
    """A control that did nothing: ``status`` is the HTTP status, the message says why."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


#: What the resume button says without ``--app``.
NO_APP = (
    "resuming runs your code (tools, agents): start the view with "
    "`mainspring ui --app module:attr`, as for `mainspring resume`"
)


class Controls:
    """The controls of one view: its runtime, and whether it was given the user's code
    (``can_resume``)."""

    def __init__(self, runtime: Runtime, *, can_resume: bool) -> None:
        self._rt = runtime
        self.can_resume = can_resume

    async def _current(self, execution_id: str) -> Any:
        record = await self._rt.get(execution_id)
        if record is None:
            raise Refused(404, f"no execution {execution_id} in this store")
        return record

    async def pause_or_cancel(self, action: str, execution_id: str, reason: str) -> dict[str, Any]:
        """``pause`` or ``cancel`` (as ``mainspring pause|cancel``): a finished run, or
        pausing a paused one, has nothing to do (409)."""
        before = await self._current(execution_id)
        if before.terminal or (action == "pause" and before.status == "paused"):
            raise Refused(409, f"nothing to {action}: the execution is {before.status}")
        call = self._rt.pause if action == "pause" else self._rt.cancel
        try:
            outcome = await call(execution_id, reason=reason)
        except UnknownExecution as exc:
            raise Refused(404, str(exc)) from None
        except ExecutionBusy as exc:
            raise Refused(409, str(exc)) from None
        return {"id": execution_id, "status": outcome.status, "summary": outcome.summary}

    async def resume(
        self, execution_id: str, *, answer: str | None, approve: bool
    ) -> dict[str, Any]:
        """``resume`` (as ``mainspring resume``): the run goes on in this view's runtime, with
        the code ``--app`` named; the page follows it live. Without ``--app``: refused, and
        says how."""
        if not self.can_resume:
            raise Refused(409, NO_APP)
        before = await self._current(execution_id)
        if before.terminal:  # R4: a finished run is left as it is
            raise Refused(409, f"nothing to resume: the execution is {before.status}")
        try:
            await self._rt.resume(execution_id, answer=answer, approve=approve)
        except UnknownExecution as exc:
            raise Refused(404, str(exc)) from None
        except (ExecutionBusy, NotWaiting) as exc:
            raise Refused(409, str(exc)) from None
        except InvalidPlan as exc:  # the code lacks a tool the run needs: nothing ran
            raise Refused(409, str(exc)) from None
        except TooLarge as exc:
            raise Refused(413, f"the answer cannot be stored: {exc}") from None
        return {"id": execution_id, "status": "resumed"}

    async def answer(self, execution_id: str, text: str) -> dict[str, Any]:
        """``answer`` (as ``mainspring answer``): stored for the run wherever it runs or
        next resumes; never sent back (only its digest is kept in the clear, E5)."""
        await self._current(execution_id)
        try:
            await self._rt.answer(execution_id, text)
        except UnknownExecution as exc:
            raise Refused(404, str(exc)) from None
        except (NotWaiting, ExecutionBusy) as exc:
            raise Refused(409, str(exc)) from None
        except TooLarge as exc:
            raise Refused(413, f"the answer cannot be stored: {exc}") from None
        record = await self._current(execution_id)
        now = await anyio.to_thread.run_sync(self._rt.store.now)
        live = holder(record.lease, now) is not None
        return {"id": execution_id, "status": record.status, "answered": True, "live": live}

    async def stop_task(self, task_id: str, *, cascade: bool) -> dict[str, Any]:
        """``stop-task`` (as ``mainspring stop-task``): S1, never a silent no-op. A task
        that is not stopped (finished already, or its worker cannot be confirmed gone) is a
        refusal with the reason (409), as the command's exit 1 is."""
        result = await self._rt.stop_agent_task(task_id, cascade=cascade)
        if result.state == "unknown":
            raise Refused(404, f"no agent task {task_id}: {result.reason}")
        if not result.ok:
            raise Refused(409, f"agent task {task_id} not stopped: {redact(result.reason)}")
        return dict(redact(attrs.asdict(result)))
