"""How the records of ``_records`` are stored: the converter hooks that make a version
required (E8), send user values through the typed encoding both ways (E10), leave fields
added later out while unset (a record that does not use them is stored as before), and read
the first formats of findings and observations. Imported by ``_records`` itself, last.

The hooks are made when the converter is first used (``_codec.on_first_use``), not when this
module is imported: generating them is most of what importing storage cost, and a command
that reads no record (``mainspring --version``) should not pay for it. :func:`_make_hooks`
registers them in the order they were registered at import before, so what they write and
read is the same.
"""

from __future__ import annotations

import functools
import operator
from typing import Any

import orjson
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override

from ._carried import take_carried
from ._codec import converter, make_hooks, on_first_use
from ._entries import Entries
from ._records import (
    AgentTaskRecord,
    Control,
    Execution,
    Failure,
    Finding,
    Observation,
    Plan,
    PlanStep,
    TaskEntry,
)
from ._requests import QuestionId
from ._stored_form import entries_hook, hook, stored_raw, stored_raws
from ._unreadable import Unreadable
from ._values import Malformed, decode_value, encode_value
from ._workers import ENTRY_KINDS, TrailItem, WorkerEntry, WorkerTaskEntry

__all__ = ["execution_head", "stored_observation"]


def _require_version(cls: type[Any]) -> None:
    # A stored document must say which version it is: a missing "v" is refused, not taken as
    # the current one (E8: never coerced).
    base = make_dict_structure_fn(cls, converter, _cattrs_forbid_extra_keys=True)

    def structure_versioned(value: Any, _: Any) -> Any:
        if type(value) is dict and "v" not in value:
            raise ValueError(f"{cls.__name__} records must carry their version (v)")
        return base(value, cls)

    converter.register_structure_hook(cls, structure_versioned)


def _structure_finding(value: Any, _: Any) -> Finding:
    """One way from the first format: evidence given as plain strings becomes
    ``{kind: note, detail: text}`` and a string provenance an evidence item of kind
    ``provenance`` (empty: none). Anything else is parsed strictly (E8: fail closed)."""
    if type(value) is dict:
        evidence = value.get("evidence")
        if type(evidence) is list and any(type(item) is str for item in evidence):
            value = {
                **value,
                "evidence": [
                    {"kind": "note", "detail": item} if type(item) is str else item
                    for item in evidence
                ],
            }
        provenance = value.get("provenance")
        if type(provenance) is str:
            value = {key: item for key, item in value.items() if key != "provenance"}
            if provenance:
                old = {"kind": "provenance", "detail": provenance}
                value["evidence"] = [*value.get("evidence", []), old]
    finding: Finding = _finding_fields(value, Finding)
    return finding


def _decode_input(raw: Any, _: Any) -> Any:
    value = decode_value(raw)
    if type(value) is not dict:
        raise Malformed("", f"a step's input must be an object, not {type(value).__name__}")
    return value


#: Fields added after records were first stored, written only when set: a record that does
#: not use them is stored (and shown by ``--json``) exactly as before they existed.
_OMITTED_IF_DEFAULT: dict[type[Any], tuple[str, ...]] = {
    PlanStep: ("timeout", "retry"),  # B1
    Observation: ("error_type", "traceback", "started_at", "ended_at"),  # O2
}  # and Execution.deadline_at (B1), AgentTaskRecord.kept_under_definition, registered below


def _typed_value(cls: type[Any], field: str, decode: Any) -> None:
    # E10: the one field of ``cls`` that holds user values goes through the typed encoding,
    # both ways; in memory it holds the values themselves.
    unstructure: dict[str, Any] = {field: override(unstruct_hook=encode_value)}
    for name in _OMITTED_IF_DEFAULT.get(cls, ()):
        unstructure[name] = override(omit_if_default=True)
    structure: dict[str, Any] = {field: override(struct_hook=decode)}
    converter.register_unstructure_hook(
        cls, make_dict_unstructure_fn(cls, converter, **unstructure)
    )
    converter.register_structure_hook(
        cls, make_dict_structure_fn(cls, converter, _cattrs_forbid_extra_keys=True, **structure)
    )


#: Execution fields added after records were first stored: left out while unset (see above).
_EXECUTION_LATER: dict[str, Any] = {
    name: override(omit_if_default=True)
    for name in (
        "deadline_at",
        "workers",
        "worker_tasks",
        "worker_trail",
        "proof_digest",
        "trace_context",
    )
}
_MASK_MARK = b"[redacted "  # how every mask begins (mainspring.storage.redact)


def _structure_observation(value: Any, _: Any) -> Observation:
    # An observation stored before ``redacted`` existed says nothing either way: if its
    # output holds a mask, it is taken as redacted, so it is never replayed as the original
    # (E10); one without a mask is what the step returned.
    if type(value) is dict and "redacted" not in value and value.get("output") is not None:
        try:
            masked = _MASK_MARK in orjson.dumps(value["output"])
        except TypeError:
            masked = False
        if masked:
            value = {**value, "redacted": True}
    result: Observation = _observation_fields(value, Observation)
    return result


# -- the pieces the journal stores (storage._journal) ----------------------------------------
# Made here, beside the hooks they must agree with, so that taking a record apart costs no
# ``attrs.evolve`` (a new Execution, validators and all) on every commit.


def _plan_or_none(plan: Plan | None) -> Any:
    return _plan_head(plan) if plan is not None else None


#: An execution's head: every field but its parts (storage._journal: the steps of its plan,
#: observations, completed steps, agent tasks, checkpoints, the workers' records), as
#: ``converter.unstructure`` writes the rest.
_HEAD: dict[str, Any] = {
    **_EXECUTION_LATER,
    **{
        name: override(omit=True)
        for name in (
            "observations",
            "completed_steps",
            "agent_tasks",
            "checkpoints",
            "workers",
            "worker_tasks",
            "worker_trail",
        )
    },
    "plan": override(unstruct_hook=_plan_or_none),
}
_OBSERVATION_REST: dict[str, Any] = {
    "output": override(omit=True),
    **{name: override(omit_if_default=True) for name in _OMITTED_IF_DEFAULT[Observation]},
}


# -- the hooks, made on the converter's first use -------------------------------------------
# Made by cattrs' code generation: set by ``_make_hooks``.
_finding_fields: Any = None
_observation_fields: Any = None
_plan_head: Any = None
_execution_head: Any = None
_observation_rest: Any = None


def _make_hooks() -> None:
    """Register every hook of the records, in this order (the order matters: a hook made
    with ``make_dict_*_fn`` takes the hooks of its fields registered before it)."""
    global _finding_fields, _observation_fields, _plan_head, _execution_head, _observation_rest
    # A question id is stored as the ask step it names (``ask.0``), read back strictly.
    converter.register_unstructure_hook(QuestionId, lambda question: question.step_id)
    converter.register_structure_hook(QuestionId, lambda raw, _: QuestionId.parse(raw))
    # A control line names its stop request only for a stop: left out otherwise.
    converter.register_unstructure_hook(
        Control, make_dict_unstructure_fn(Control, converter, stop=override(omit_if_default=True))
    )

    # Held as read and parsed each on its own, once, when first looked at (E8); written back
    # as stored (E7), an entry never looked at included. (Before the hooks of ``Execution``
    # are made, which take these.)
    converter.register_unstructure_hook(Unreadable, stored_raw)
    converter.register_unstructure_hook(Entries, stored_raws)
    for _union, _held, (_kind, _key) in zip(
        (TaskEntry, WorkerEntry, WorkerTaskEntry, TrailItem),
        (
            tuple[TaskEntry, ...],
            tuple[WorkerEntry, ...],
            tuple[WorkerTaskEntry, ...],
            tuple[TrailItem, ...],
        ),
        ((AgentTaskRecord, "id"), *ENTRY_KINDS.values()),
        strict=True,
    ):
        converter.register_structure_hook(_union, hook(_kind, _key))
        converter.register_unstructure_hook(_union, stored_raw)
        _is_entries = functools.partial(operator.eq, _held)
        converter.register_structure_hook_func(_is_entries, entries_hook(_kind))
        converter.register_unstructure_hook_func(_is_entries, stored_raws)

    _finding_fields = make_dict_structure_fn(Finding, converter, _cattrs_forbid_extra_keys=True)
    converter.register_structure_hook(Finding, _structure_finding)
    _require_version(Execution)
    _require_version(AgentTaskRecord)

    _typed_value(Observation, "output", lambda raw, _: decode_value(raw))
    _typed_value(PlanStep, "input", _decode_input)

    converter.register_unstructure_hook(
        Execution, make_dict_unstructure_fn(Execution, converter, **_EXECUTION_LATER)
    )
    converter.register_unstructure_hook(
        Failure,
        make_dict_unstructure_fn(
            Failure,
            converter,
            error_type=override(omit_if_default=True),  # O2: left out while unset
            traceback=override(omit_if_default=True),
        ),
    )
    converter.register_unstructure_hook(
        AgentTaskRecord,
        make_dict_unstructure_fn(
            AgentTaskRecord,
            converter,
            kept_under_definition=override(omit_if_default=True),  # R7 (added later, see above)
        ),
    )
    _observation_fields = converter.get_structure_hook(Observation)
    converter.register_structure_hook(Observation, _structure_observation)

    # The pieces the journal stores (below).
    _plan_head = make_dict_unstructure_fn(Plan, converter, steps=override(omit=True))
    _execution_head = make_dict_unstructure_fn(Execution, converter, **_HEAD)
    # Last: once it is set, every hook is made (``execution_head``, ``stored_observation``).
    _observation_rest = make_dict_unstructure_fn(Observation, converter, **_OBSERVATION_REST)


on_first_use(_make_hooks)


def execution_head(execution: Execution) -> dict[str, Any]:
    """An execution's head: every field but its parts (storage._journal: the steps of its
    plan, observations, completed steps, agent tasks, checkpoints, the workers' records), as
    ``converter.unstructure`` writes the rest."""
    if _observation_rest is None:  # set last (see _make_hooks)
        make_hooks()
    head: dict[str, Any] = _execution_head(execution)
    return head


def stored_observation(observation: Observation) -> dict[str, Any]:
    """``converter.unstructure(observation)`` as the journal stores it: an output encoded
    where it was made is carried beside the observation (``storage._carried``) and written
    as those bytes (``orjson.Fragment``), not encoded again (E10: the same bytes either
    way); they are let go once taken. Only for a store's own encoding: the result is not
    plain data."""
    if _observation_rest is None:
        make_hooks()
    raw: dict[str, Any] = _observation_rest(observation)
    data = take_carried(observation)
    raw["output"] = orjson.Fragment(data) if data is not None else encode_value(observation.output)
    return raw
