"""The typed values an execution keeps for its controls: a stop request, an approval, and
the id of an agent's question.

Storage v2 kept the first two as strings made by hand (``"op.cascade:task"``, ``"plan.v3"``,
``"step.X.v3"``) and wrote a stop request again into its audit line's free-text reason;
storage v3 keeps records (:class:`StopRequest`, :class:`Approval`), and the audit line of a
stop names its request in ``Control.stop``. The old strings are read here and nowhere else
(:meth:`StopRequest.parse_v2`, :meth:`Approval.parse_v2`), by ``mainspring migrate``; a
string that is not one is a :class:`BadEncoding`, never a guess.

A question an agent asks is an inner step of its task named ``ask.<n>`` (the n-th question
of that task, from 0): the step's observation holds the answer. :class:`QuestionId` is that
name as a value; it is stored as the name itself, so an inner step and the answer requests
that target it (``AnswerRequest.ask``) say the same thing.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar

import attrs

from ._errors import StorageError
from ._ids import is_valid_id
from ._validators import _counter, _id, _optional_id

__all__ = ["Approval", "BadEncoding", "QuestionId", "StopRequest"]


class BadEncoding(StorageError, ValueError):
    """A text that should encode a stop request, an approval or a question id and does not:
    nothing was read from it. ``kind`` says which was expected, ``text`` what was given."""

    def __init__(self, kind: str, text: object, why: str) -> None:
        shown = repr(text) if len(repr(text)) <= 120 else repr(text)[:117] + "..."
        super().__init__(f"not a {kind}: {shown} ({why})")
        self.kind = kind
        self.text = text


@attrs.frozen(kw_only=True)
class StopRequest:
    """A request to stop one agent task of a run (S1), kept on the execution until the run
    that holds the task applies it. ``operation_id`` names the request (the stop's
    operation; the audit line written with it says who asked); ``cascade``: the task's
    dependents are cancelled too, instead of running as after a plain stop (S2)."""

    operation_id: str = attrs.field(validator=_id)
    task_id: str = attrs.field(validator=_id)
    cascade: bool = attrs.field(default=False, validator=attrs.validators.instance_of(bool))

    _V2_CASCADE: ClassVar[str] = ".cascade"

    @classmethod
    def parse_v2(cls, text: object) -> StopRequest:
        """The request storage v2 wrote as ``"<operation>[.cascade]:<task>"`` (the
        operation id has no colon); :class:`BadEncoding` if ``text`` is not one."""
        kind = "v2 stop request"
        if type(text) is not str:
            raise BadEncoding(kind, text, "not a string")
        operation, colon, task_id = text.partition(":")
        if not colon or not task_id:
            raise BadEncoding(kind, text, "expected <operation>[.cascade]:<task id>")
        cascade = operation.endswith(cls._V2_CASCADE)
        operation = operation.removesuffix(cls._V2_CASCADE)
        if not is_valid_id(operation) or not is_valid_id(task_id):
            raise BadEncoding(kind, text, "the operation and the task must be ids")
        return cls(operation_id=operation, task_id=task_id, cascade=cascade)


@attrs.frozen(kw_only=True)
class Approval:
    """An approval given for version ``plan_version`` of a run's plan: of the plan as a
    whole (``step_id`` None) or of one step that requires it. A replan makes a new version,
    which needs approving again."""

    plan_version: int = attrs.field(validator=_counter)
    step_id: str | None = attrs.field(default=None, validator=_optional_id)

    @classmethod
    def parse_v2(cls, text: object) -> Approval:
        """The approval storage v2 wrote as ``"plan.v<n>"`` or ``"step.<id>.v<n>"``;
        :class:`BadEncoding` if ``text`` is not one."""
        kind = "v2 approval"
        if type(text) is not str:
            raise BadEncoding(kind, text, "not a string")
        if text.startswith("plan.v"):
            step_id, version = None, text.removeprefix("plan.v")
        elif text.startswith("step."):
            step_id, dot_v, version = text.removeprefix("step.").rpartition(".v")
            if not dot_v or not is_valid_id(step_id):
                raise BadEncoding(kind, text, "expected step.<step id>.v<plan version>")
        else:
            raise BadEncoding(kind, text, "expected plan.v<n> or step.<step id>.v<n>")
        if not re.fullmatch(r"0|[1-9][0-9]{0,6}", version):
            raise BadEncoding(kind, text, "the plan version must be a whole number")
        try:
            return cls(plan_version=int(version), step_id=step_id)
        except ValueError as exc:
            raise BadEncoding(kind, text, str(exc)) from None


@attrs.frozen(order=True)
class QuestionId:
    """The ``index``-th question (from 0) an agent task asked: the inner step named
    ``ask.<index>`` (:attr:`step_id`). Stored as that name."""

    index: int = attrs.field(validator=_counter)

    PREFIX: ClassVar[str] = "ask."

    @property
    def step_id(self) -> str:
        """The inner step this question is: ``ask.<index>``."""
        return f"{self.PREFIX}{self.index}"

    def __str__(self) -> str:
        return self.step_id

    @classmethod
    def is_question(cls, step_id: str) -> bool:
        """True if ``step_id`` is reserved for questions (it starts with ``ask.``): an agent's
        own inner steps may not use such names."""
        return step_id.startswith(cls.PREFIX)

    @classmethod
    def parse(cls, text: object) -> QuestionId:
        """The question named ``ask.<n>``; :class:`BadEncoding` if ``text`` is not one."""
        if type(text) is not str or not re.fullmatch(r"ask\.(0|[1-9][0-9]{0,6})", text):
            raise BadEncoding("question id", text, "expected ask.<n>")
        try:
            return cls(int(text.removeprefix(cls.PREFIX)))
        except ValueError as exc:
            raise BadEncoding("question id", text, str(exc)) from None


def _structure_question(value: Any, _: Any) -> QuestionId:
    return QuestionId.parse(value)
