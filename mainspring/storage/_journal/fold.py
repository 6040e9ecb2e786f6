"""Reading the journal back: the changes of ``_journal`` replayed (files) or the rows read in
position order (SQLite) into plain data, then parsed strictly into the execution."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import attrs

from .._codec import structure
from .._errors import RecordError
from .._records import MAX_CHECKPOINTS, Execution
from .model import DONE_REF, PARTS, RAW_PARTS

__all__ = ["Folded", "fold"]


@attrs.define
class Folded:
    """A stored execution as plain data while it is being read back (changes replayed in
    order, or rows read in position order)."""

    head: dict[str, Any] | None = None
    parts: dict[str, dict[str, Any]] = attrs.field(factory=lambda: {p: {} for p in PARTS})
    checkpoints: list[Any] = attrs.field(factory=list)
    seq: int = 0

    def apply(self, changes: Iterable[Any], *, kind: str) -> None:
        """Replay one commit's changes; anything malformed is a :class:`RecordError`."""
        try:
            for change in changes:
                self._apply(change)
        except (TypeError, ValueError, KeyError, IndexError, AttributeError) as exc:
            raise RecordError(kind, [f"journal: malformed change ({exc})"]) from None

    def _apply(self, change: Any) -> None:
        op = change[0]
        if op == "head":
            (_, head) = change
            if type(head) is not dict:
                raise TypeError("a head must be an object")
            self.head = head
        elif op == "put":
            _, part, key, _pos, value = change
            self.parts[_part(part)][_key(key)] = value
        elif op == "reset":
            _, part, entries = change
            self.parts[_part(part)] = {_key(key): value for key, value in entries}
        elif op == "drop":
            _, part, keys = change
            if type(keys) is not list:
                raise TypeError("dropped keys must be a list")
            items = self.parts[_part(part)]
            for key in keys:
                items.pop(_key(key), None)
        elif op == "group":
            _, part, task_id, _start, entries = change
            prefix = f"{_key(task_id)}/"
            items = self.parts[_part(part)]
            for key in [k for k in items if k.startswith(prefix)]:
                del items[key]
            items.update((_key(key), value) for key, value in entries)
        elif op == "ckpt":
            (_, value) = change
            self.checkpoints = [*self.checkpoints, value][-MAX_CHECKPOINTS:]
        elif op == "ckpts":
            (_, values) = change
            if type(values) is not list:
                raise TypeError("a checkpoint window must be a list")
            self.checkpoints = list(values)
        else:
            raise ValueError(f"unknown change {op!r}")


def _part(name: Any) -> str:
    if name not in PARTS:
        raise ValueError(f"unknown part {name!r}")
    return str(name)


def _key(value: Any) -> str:
    if type(value) is not str:
        raise TypeError("a key must be a string")
    return value


def fold(folded: Folded, *, kind: str) -> Execution:
    """The execution ``folded`` holds, parsed strictly (E8 for the record as a whole)."""
    if folded.head is None:
        raise RecordError(kind, ["journal: no head"])
    raw = dict(folded.head)
    parts = folded.parts
    plan = raw.get("plan")
    if type(plan) is dict:
        raw["plan"] = {**plan, "steps": list(parts["steps"].values())}
    raw["observations"] = list(parts["obs"].values())
    done = list(parts["done"].values())
    raw["completed_steps"] = done
    raw["agent_tasks"] = _assemble_tasks(parts, kind)
    for part in RAW_PARTS:  # raw records, parsed one by one where they are used (E8)
        raw[part] = list(parts[part].values())
    raw["checkpoints"] = [_resolve_checkpoint(c, done, kind) for c in folded.checkpoints]
    return structure(raw, Execution, kind=kind)


def _assemble_tasks(parts: dict[str, dict[str, Any]], kind: str) -> list[Any]:
    grouped: dict[str, dict[str, list[Any]]] = {}
    for part, field in (("inner_obs", "inner_observations"), ("inner_done", "inner_completed")):
        for key, value in parts[part].items():
            task_id = key.partition("/")[0]
            grouped.setdefault(task_id, {}).setdefault(field, []).append(value)
    tasks: list[Any] = []
    for key, stored in parts["tasks"].items():
        if type(stored) is not dict or len(stored) != 1:
            raise RecordError(kind, [f"journal: malformed agent task {key[:80]!r}"])
        if "whole" in stored:
            tasks.append(stored["whole"])
            continue
        head = stored.get("split")
        if type(head) is not dict:
            raise RecordError(kind, [f"journal: malformed agent task {key[:80]!r}"])
        inner = grouped.get(key, {})
        tasks.append(
            {
                **head,
                "inner_observations": inner.get("inner_observations", []),
                "inner_completed": inner.get("inner_completed", []),
            }
        )
    return tasks


def _resolve_checkpoint(raw: Any, done: list[Any], kind: str) -> Any:
    if type(raw) is not dict:
        return raw  # the strict parse names it
    ref = raw.get("completed_steps")
    if type(ref) is dict:
        count = ref.get(DONE_REF)
        if set(ref) != {DONE_REF} or type(count) is not int or not 0 <= count <= len(done):
            raise RecordError(kind, ["journal: a checkpoint's reference to done steps is bad"])
        return {**raw, "completed_steps": done[:count]}
    return raw
