"""Storage v2's model: an execution as a header plus keyed parts, what changed between two
versions of it (as changes), and the fold that builds an execution back from what is stored.

Every backend stores the same shape, so this module is the one place that knows it:

- the **head**: every field of :class:`Execution` that stays small (status, lease, budget,
  pending question, controls, the plan without its steps...), rewritten by each commit;
- the **parts**, ordered keyed collections that only grow in the common case: ``steps`` (the
  plan's steps, by id), ``obs`` (observations, by step id), ``done`` (completed step ids),
  ``tasks`` (agent task records, by task id, without their inner steps), ``inner_obs`` and
  ``inner_done`` (each agent task's inner observations and completed inner steps, keyed
  ``task-id/step-id``: ``/`` never occurs in an id, X1), and the external workers' records
  (``storage._workers``): ``workers`` (by worker id), ``worker_tasks`` (by agent task id),
  ``worker_trail`` (by ``str(seq)``; only the last ``MAX_TRAIL`` are kept, so the oldest
  leave as new ones come: a ``drop`` change names the keys that left, so an append costs
  one row written and one deleted, not a rewrite of the trail);
- the **checkpoints**: a window of at most five (E6); a checkpoint whose completed steps are
  the execution's own is stored as a reference to them (``{"$done": n}``: the first ``n``
  items of ``done``), so a checkpoint per step costs the same at step 10 and step 10,000.

:func:`diff` compares the version a backend last stored with the one being committed and
returns only what differs; it costs what changed, not the size of the run: the unchanged
prefix of each part is recognised by C-level tuple comparison, which succeeds on identity
(the runtime hands back the same objects for what it did not touch). Anything that is not
"some items replaced in place, some appended" (a replan, a removal, a reorder) rewrites that
part whole: correct always, fast in the common case.

A part item's position is fixed when its key is first stored and kept when it is replaced,
which is exactly how a dict keeps insertion order: backends store ``pos`` (SQLite) or replay
changes into dicts (files), and both read back the tuple that was committed.
"""

from __future__ import annotations

import itertools
import operator
import re
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import attrs

from .._append_only import AppendOnlyList
from .._codec import converter
from .._record_codec import execution_head, stored_observation
from .._records import MAX_CHECKPOINTS, Checkpoint, Execution, Observation
from .._stored_form import stored_raw, stored_raws
from .._validators import same_json
from .._vector import Vector
from .keys import (
    _RAW_KEYS,
    _by_position,
    _grown,
    _id_key,
    _inner_key,
    _inner_names,
    _keyed,
    _obs_key,
    _raw_keyed,
    _same_raw,
    _seq_key,
    _step_key,
)

__all__ = [
    "DONE_REF",
    "PARTS",
    "RAW_PARTS",
    "Base",
    "Change",
    "copy_with",
    "diff",
    "snapshot_changes",
]

#: The keyed parts of an execution, in the order a fold assembles them.
PARTS = (
    "steps",
    "obs",
    "done",
    "tasks",
    "inner_obs",
    "inner_done",
    "workers",
    "worker_tasks",
    "worker_trail",
)
_GROUPED = ("inner_obs", "inner_done")  # keyed "task-id/step-id"
#: The parts that hold raw records (``storage._workers``), each the ``Execution`` field of
#: the same name: stored as they are, parsed one by one when read (E8).
RAW_PARTS = ("workers", "worker_tasks", "worker_trail")
# The head is every Execution field but those the parts hold (_record_codec.execution_head).
_ID = re.compile(r"[A-Za-z0-9._:-]{1,256}\Z")
_ARRAYS = (list, AppendOnlyList)  # a stored list: an agent task's inner steps may be views
DONE_REF = "$done"  # a checkpoint's completed steps: the first n of ``done``

Change = list[Any]
"""One stored change, plain JSON data (``[op, ...]``):

- ``["head", head]``: the head, whole;
- ``["put", part, key, pos, value]``: store ``value`` under ``key`` (a new key takes ``pos``,
  an existing one keeps its position);
- ``["reset", part, [[key, value], ...]]``: the part is exactly these items, in order;
- ``["drop", part, [key, ...]]``: these keys leave the part (the oldest of the trail);
- ``["group", part, task_id, start, [[key, value], ...]]``: the items of one task in a
  grouped part are exactly these, at positions ``start``, ``start + 1``... (after every
  other item);
- ``["ckpt", value]``: a checkpoint joins the window (the oldest leaves past five);
- ``["ckpts", [value, ...]]``: the window is exactly these.
"""


def _unstructure(value: Any) -> Any:
    return converter.unstructure(value)


_FIELDS: dict[type[Any], tuple[str, ...]] = {}
_R = TypeVar("_R")


def copy_with(record: _R, **changes: Any) -> _R:
    """``attrs.evolve(record, **changes)`` without checking every field again, for a store's
    commit path (where an evolve is a good part of the work): only for values that were
    checked where they came from (another record's, or empty), and a record whose fields
    are checked each on its own (no check reads another field, no post-init)."""
    kind: Any = type(record)
    names = _FIELDS.get(kind)
    if names is None:
        names = _FIELDS[kind] = tuple(field.name for field in attrs.fields(kind))
    copy: _R = object.__new__(kind)
    put = object.__setattr__
    for name in names:
        put(copy, name, changes[name] if name in changes else getattr(record, name))
    return copy


# -- the base a diff is taken against -------------------------------------------------------


@attrs.define
class Base:
    """What a backend stored last for one execution: the execution, each part's keys and the
    next free position, the checkpoint window as stored, and the per-execution sequence
    number (one per commit).

    Owned by the backend's cache; a backend moves it on (:meth:`advance`) as it writes, and
    forgets every base when a write fails, so nothing half-written is remembered.
    """

    execution: Execution
    keys: dict[str, set[str]]
    next_pos: dict[str, int]
    seq: int
    window: list[Any]
    #: Bytes stored for the execution, as far as the backend keeps count (an upper bound
    #: that a backend may recompute exactly before refusing a write, X2).
    size: int = 0
    #: The parts stored by position (``#0``, ``#1``...: their keys repeat, or a task record
    #: does not parse): every change to one rewrites it whole.
    positional: set[str] = attrs.field(factory=set)
    #: The stored worker records by key: what a worker was before a commit replaced it, so
    #: the history finds its transitions at the cost of what changed (V2).
    workers: dict[str, Any] = attrs.field(factory=dict)
    #: Per part, the index of the item the last diff found replaced in place: the next
    #: diff looks there first (a run marks its plan steps done one after another). A
    #: guess, always checked: it may come from a diff whose write failed.
    hints: dict[str, int] = attrs.field(factory=dict)

    @classmethod
    def of(
        cls,
        execution: Execution,
        seq: int,
        next_pos: dict[str, int] | None = None,
        *,
        window: list[Any],
    ) -> Base:
        """The base of a stored ``execution`` (its keys computed once: O(size))."""
        items = _items(execution)
        keys = {part: set(entries) for part, entries in items.items()}
        positions = {part: len(entries) for part, entries in items.items()}
        if next_pos is not None:  # a backend that knows its stored positions says so
            positions = {part: max(positions[part], next_pos.get(part, 0)) for part in PARTS}
        positional = {part for part, entries in items.items() if _by_position(entries)}
        return cls(
            execution=execution,
            keys=keys,
            next_pos=positions,
            seq=seq,
            window=window,
            positional=positional,
            workers=items["workers"],
        )

    def window_after(self, changes: Sequence[Change]) -> list[Any]:
        """The checkpoint window once ``changes`` are stored."""
        window = self.window
        for change in changes:
            if change[0] == "ckpt":
                window = [*window, change[1]][-MAX_CHECKPOINTS:]
            elif change[0] == "ckpts":
                window = list(change[1])
        return window

    def advance(self, execution: Execution, changes: Sequence[Change]) -> None:
        """Take ``changes`` (made by :func:`diff` from this base to ``execution``) as stored."""
        self.window = self.window_after(changes)
        for change in changes:
            op = change[0]
            if op == "put":
                _, part, key, pos, value = change
                if key not in self.keys[part]:
                    self.keys[part].add(key)
                    self.next_pos[part] = max(self.next_pos[part], pos + 1)
                if part == "workers":
                    self.workers[key] = value
            elif op == "reset":
                _, part, entries = change
                self.keys[part] = {key for key, _ in entries}
                self.next_pos[part] = len(entries)
                if part == "workers":
                    self.workers = dict(entries)
                if entries and entries[0][0].startswith("#"):
                    self.positional.add(part)
                else:
                    self.positional.discard(part)
            elif op == "drop":
                self.keys[change[1]].difference_update(change[2])
            elif op == "group":
                _, part, task_id, start, entries = change
                prefix = f"{task_id}/"
                kept = {key for key in self.keys[part] if not key.startswith(prefix)}
                self.keys[part] = kept | {key for key, _ in entries}
                self.next_pos[part] = max(self.next_pos[part], start + len(entries))
        self.execution = execution
        self.seq += 1


# -- taking an execution apart --------------------------------------------------------------


class _Raws(Sequence[Any]):
    """The stored forms of a version of an execution's agent tasks, made as they are asked
    for (``storage._stored_form``): an agent task's from the version at the same position
    in ``before``, the tasks stored last."""

    def __init__(self, tasks: Sequence[Any], before: Sequence[Any]) -> None:
        self._tasks = tasks
        self._before = before

    def __len__(self) -> int:
        return len(self._tasks)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self._tasks)))]
        before = self._before
        prev = before[index] if 0 <= index < len(before) else None
        return stored_raw(self._tasks[index], prev)


def _head(execution: Execution) -> dict[str, Any]:
    # Every field but the parts (the raw parts are left out while empty, _record_codec),
    # unstructured straight from the record: no slimmed copy of it is made.
    head: dict[str, Any] = execution_head(execution)
    return head


def _encode_obs(observation: Observation) -> Any:
    # An output encoded where it was made goes to disk as those bytes (E10: the same ones).
    return stored_observation(observation)


def _splittable(raw: dict[str, Any]) -> bool:
    """A task record whose inner steps can be stored as their own items: its id and every
    inner step id are ids, none repeated. Anything else (a record that does not parse, E7)
    is stored whole, as it is."""
    task_id = raw.get("id")
    if type(task_id) is not str or not _ID.match(task_id):
        return False
    inner = raw.get("inner_observations")
    done = raw.get("inner_completed")
    if not isinstance(inner, _ARRAYS) or not isinstance(done, _ARRAYS):
        return False
    names = [item.get("step_id") if type(item) is dict else None for item in inner]
    if not all(type(name) is str and _ID.match(name) for name in names):
        return False
    if not all(type(name) is str and _ID.match(name) for name in done):
        return False
    return len(set(names)) == len(names) and len(set(done)) == len(done)


def _task_head(raw: dict[str, Any]) -> dict[str, Any]:
    return {
        "split": {
            key: value
            for key, value in raw.items()
            if key not in ("inner_observations", "inner_completed")
        }
    }


def _items(execution: Execution) -> dict[str, dict[str, Any]]:
    """Every part of ``execution`` as ``key -> item`` (structured items, raw task dicts)."""
    plan = execution.plan
    tasks: dict[str, Any] = {}
    inner_obs: dict[str, Any] = {}
    inner_done: dict[str, Any] = {}
    raws = stored_raws(execution.agent_tasks)  # (tasks held as read: none is parsed)
    ids = [raw.get("id") for raw in raws]
    whole = len(set(map(repr, ids))) != len(ids) or not all(_splittable(raw) for raw in raws)
    for index, raw in enumerate(raws):
        if whole:
            tasks[f"#{index}"] = raw
            continue
        task_id = raw["id"]
        tasks[task_id] = raw
        for item in raw.get("inner_observations", []):
            inner_obs[f"{task_id}/{item['step_id']}"] = item
        for name in raw.get("inner_completed", []):
            inner_done[f"{task_id}/{name}"] = name
    return {
        "steps": {step.id: step for step in plan.steps} if plan is not None else {},
        "obs": _keyed(execution.observations, _obs_key),
        "done": _keyed(execution.completed_steps, str),
        "tasks": tasks,
        "inner_obs": inner_obs,
        "inner_done": inner_done,
        "workers": _raw_keyed(stored_raws(execution.workers), _id_key),
        "worker_tasks": _raw_keyed(stored_raws(execution.worker_tasks), _id_key),
        "worker_trail": _raw_keyed(stored_raws(execution.worker_trail), _seq_key),
    }


def _encode_task(raw: dict[str, Any], split: bool) -> Any:
    return _task_head(raw) if split else {"whole": raw}


def _encode_checkpoint(checkpoint: Checkpoint, done: tuple[str, ...]) -> Any:
    steps = checkpoint.completed_steps
    if steps and (steps is done or steps == done):
        # A reference to the execution's own completed steps: they are not unstructured
        # (the checkpoint would cost the length of the run at every step).
        raw: dict[str, Any] = _unstructure(copy_with(checkpoint, completed_steps=()))
        raw["completed_steps"] = {DONE_REF: len(done)}
        return raw
    whole: dict[str, Any] = _unstructure(checkpoint)
    return whole


def snapshot_changes(execution: Execution) -> list[Change]:
    """The changes that store ``execution`` from nothing: its head and every part whole."""
    items = _items(execution)
    split = not any(key.startswith("#") for key in items["tasks"])
    changes: list[Change] = [["head", _head(execution)]]
    for part in PARTS:
        if part == "tasks":
            entries = [[key, _encode_task(raw, split)] for key, raw in items[part].items()]
        elif part == "steps":
            entries = [[key, _unstructure(item)] for key, item in items[part].items()]
        elif part == "obs":
            entries = [[key, _encode_obs(item)] for key, item in items[part].items()]
        else:
            entries = [[key, item] for key, item in items[part].items()]
            if not entries and part in RAW_PARTS:
                continue  # nothing stored of workers while there are none (before #17 too)
        changes.append(["reset", part, entries])
    done = execution.completed_steps
    changes.append(["ckpts", [_encode_checkpoint(c, done) for c in execution.checkpoints]])
    return changes


# -- what changed ---------------------------------------------------------------------------


class _Diff:
    """One diff under way: the changes so far and the positions they have taken, so a
    failed write leaves the base untouched (it advances only once the write is durable)."""

    def __init__(self, base: Base) -> None:
        self.base = base
        self.out: list[Change] = []
        self.next_pos = dict(base.next_pos)
        self.hints: dict[str, int] = {}

    def put(self, part: str, key: str, value: Any, *, new: bool) -> None:
        pos = 0
        if new:
            pos = self.next_pos[part]
            self.next_pos[part] = pos + 1
        self.out.append(["put", part, key, pos, value])

    def part(
        self,
        part: str,
        old: Sequence[Any],
        new: Sequence[Any],
        key: Callable[[Any], str],
        encode: Callable[[Any], Any],
    ) -> bool:
        """The changes of one part; False if the part had to be rewritten whole."""
        positional = part in self.base.positional
        hint = self.base.hints.get(part)
        grown = _grown(old, new, key, hint) if not positional else None
        if grown is not None:
            replaced, start = grown
            if replaced:
                self.hints[part] = replaced[-1]
            fresh = [key(item) for item in new[start:]]
            known = self.base.keys[part]
            if len(set(fresh)) == len(fresh) and not any(k in known for k in fresh):
                for index in replaced:
                    self.put(part, key(new[index]), encode(new[index]), new=False)
                for offset, item_key in enumerate(fresh):
                    self.put(part, item_key, encode(new[start + offset]), new=True)
                return True
        keyed = _keyed(new, key)
        self.out.append(["reset", part, [[k, encode(item)] for k, item in keyed.items()]])
        self.next_pos[part] = len(new)
        return False

    def tasks(self, old: Execution, new: Execution) -> None:
        old_tasks: Sequence[Any] = old.agent_tasks
        new_tasks: Sequence[Any] = new.agent_tasks
        if old_tasks is new_tasks:
            return
        if type(old_tasks) is Vector and type(new_tasks) is Vector:
            # Versions of the run's tasks: only those the nodes they do not share hold are
            # looked at, so a save costs its task, not every task of the run.
            changed = new_tasks.changed_since(old_tasks)
        else:
            common = min(len(old_tasks), len(new_tasks))
            changed = [i for i in range(common) if old_tasks[i] is not new_tasks[i]]
        if changed is None:
            changed = list(range(min(len(old_tasks), len(new_tasks))))
        old_raws = _Raws(old_tasks, ())
        new_raws = _Raws(new_tasks, old_tasks)
        # The records' stored forms (what was read, or made from the version before), each
        # compared as stored, types included.
        replaced = [
            i for i in changed if i < len(old_tasks) and not _same_raw(old_raws[i], new_raws[i])
        ]
        if not replaced and len(new_tasks) == len(old_tasks):
            return
        if self._tasks_grown(old_raws, new_raws, replaced):
            return
        # Every task part rewritten whole: a record that does not parse is kept as it is (E7).
        items = _items(new)
        split = not any(key.startswith("#") for key in items["tasks"])
        self.out.append(
            ["reset", "tasks", [[k, _encode_task(raw, split)] for k, raw in items["tasks"].items()]]
        )
        for part in _GROUPED:
            self.out.append(["reset", part, [[k, v] for k, v in items[part].items()]])
        self.next_pos.update({part: len(items[part]) for part in ("tasks", *_GROUPED)})

    def _tasks_grown(
        self, old_raws: Sequence[Any], new_raws: Sequence[Any], replaced: list[int]
    ) -> bool:
        """Tasks replaced (``replaced``: their positions, if known) and appended: each one's
        changes; False (nothing kept) if the tasks must be rewritten whole."""
        known = self.base.keys["tasks"]
        if "tasks" in self.base.positional or len(new_raws) < len(old_raws):
            return False  # stored whole: rewritten whole
        start = len(old_raws)
        if any(old_raws[i].get("id") != new_raws[i].get("id") for i in replaced):
            return False
        fresh = new_raws[start:]
        fresh_ids = [raw.get("id") for raw in fresh]
        if len(set(map(repr, fresh_ids))) != len(fresh_ids):
            return False
        if any(not _splittable(raw) or raw["id"] in known for raw in fresh):
            return False
        mark = len(self.out), dict(self.next_pos)
        for index in replaced:
            if not self._task(old_raws[index], new_raws[index]):
                del self.out[mark[0] :]  # undo: the caller rewrites every task
                self.next_pos = mark[1]
                return False
        for raw in fresh:
            self._task(None, raw)
        return True

    def _task(self, old: dict[str, Any] | None, new: dict[str, Any]) -> bool:
        """One task's changes: its inner steps appended (or its group rewritten), then its
        head. Only what was appended is checked, so a save costs what it added (X1 holds
        for every stored key: the rest was checked when it was stored)."""
        task_id = new.get("id")
        if type(task_id) is not str or (old is not None and old.get("id") != task_id):
            return False
        if old is not None and old.get("attempt") != new.get("attempt"):
            old = {"id": task_id}  # a new attempt's inner steps are written whole
        for part, field in (("inner_obs", "inner_observations"), ("inner_done", "inner_completed")):
            if field not in new:
                return False  # kept as it is, whole (E7)
            before = old.get(field, []) if old is not None else []
            after = new[field]
            if before is after:
                continue
            if type(after) is AppendOnlyList:
                # Appended to the list the stored version is a prefix of: only the new
                # items are looked at (an inner step costs what it added).
                if (
                    type(before) is AppendOnlyList
                    and after.shares(before)
                    and len(after) >= len(before)
                    and self._inner_appended(part, task_id, after[len(before) :])
                ):
                    continue
                after = list(after)  # the general path below, once (a branch, a reload)
            if type(before) is AppendOnlyList:
                before = list(before)
            if type(before) is not list or type(after) is not list:
                return False
            names = _inner_names(after[len(before) :], part)
            grown = _grown(before, after, _inner_key(part)) if names is not None else None
            if names is not None and grown is not None:
                keys = [f"{task_id}/{name}" for name in names]
                known = self.base.keys[part]
                if len(set(keys)) == len(keys) and not any(k in known for k in keys):
                    for index in grown[0]:  # replaced in place: same key, same position
                        key = f"{task_id}/{_inner_key(part)(after[index])}"
                        self.put(part, key, after[index], new=False)
                    for key, item in zip(keys, after[len(before) :], strict=True):
                        self.put(part, key, item, new=True)
                    continue
            everything = _inner_names(after, part)
            if everything is None or len(set(everything)) != len(everything):
                return False
            start = self.next_pos[part]
            entries = [[f"{task_id}/{n}", item] for n, item in zip(everything, after, strict=True)]
            self.out.append(["group", part, task_id, start, entries])
            self.next_pos[part] = start + len(entries)
        self.put("tasks", task_id, _task_head(new), new=old is None)
        return True

    def _inner_appended(self, part: str, task_id: str, fresh: Sequence[Any]) -> bool:
        """Put ``fresh``, appended to a task's inner part; False (nothing put) if one is
        not an id, or its key repeats or is stored already (then: the general path)."""
        names = _inner_names(fresh, part)
        if names is None:
            return False
        keys = [f"{task_id}/{name}" for name in names]
        known = self.base.keys[part]
        if len(set(keys)) != len(keys) or any(k in known for k in keys):
            return False
        for key, item in zip(keys, fresh, strict=True):
            self.put(part, key, item, new=True)
        return True

    def raw(self, part: str, old: Sequence[Any], new: Sequence[Any]) -> None:
        """The changes of a part of records read one by one (workers, worker tasks, the
        trail), each stored as its stored form (``_stored_form``): records replaced under
        their key, appended, and (the trail) the oldest dropped; anything else rewrites the
        part whole."""
        if old is new:
            return
        if part not in self.base.positional and self._raw_moved(part, old, new):
            return
        keyed = _raw_keyed(stored_raws(new), _RAW_KEYS[part])
        self.out.append(["reset", part, [[k, raw] for k, raw in keyed.items()]])
        self.next_pos[part] = len(new)

    def _raw_moved(self, part: str, old: Sequence[Any], new: Sequence[Any]) -> bool:
        raw_key = _RAW_KEYS[part]

        def key(entry: Any) -> str | None:
            return raw_key(stored_raw(entry))

        drop = 0
        if old and new and key(old[0]) != key(new[0]):
            # The oldest left (a bounded trail): found by walking from the oldest, so this
            # costs the count that left, and each entry leaves once (amortised O(1) per
            # appended entry). A first key not stored at all means every old one left.
            first = key(new[0])
            if first is None:
                return False
            while drop < len(old) and key(old[drop]) != first:
                drop += 1
        kept = old[drop:] if drop else old
        count = len(kept)
        if len(new) < count:
            return False
        common = new[:count] if len(new) > count else new
        replaced: list[int] = []
        # Compared by identity in C (the runtime hands back what it did not touch), then
        # as stored, types included, for the few that are other objects.
        for index in itertools.compress(range(count), map(operator.is_not, kept, common)):
            if not same_json(stored_raw(kept[index]), stored_raw(common[index])):
                if key(common[index]) is None or key(kept[index]) != key(common[index]):
                    return False
                replaced.append(index)
        fresh = new[count:]
        fresh_keys = [key(raw) for raw in fresh]
        if None in fresh_keys or len(set(fresh_keys)) != len(fresh_keys):
            return False
        dropped = [key(raw) for raw in old[:drop]]
        gone = set(dropped)
        known = self.base.keys[part]
        if any(k in known and k not in gone for k in fresh_keys):
            return False
        if dropped:
            self.out.append(["drop", part, dropped])
        for index in replaced:
            self.put(part, str(key(common[index])), stored_raw(common[index]), new=False)
        for item_key, entry in zip(fresh_keys, fresh, strict=True):
            self.put(part, str(item_key), stored_raw(entry), new=True)
        return True

    def checkpoints(self, old: Execution, new: Execution, done_reset: bool) -> None:
        before, after = old.checkpoints, new.checkpoints
        done = new.completed_steps
        if before == after and not done_reset:
            return
        if (
            not done_reset
            and after
            and after[:-1] == before[len(before) - (len(after) - 1) :]
            and (len(after) == len(before) + 1 or len(before) == MAX_CHECKPOINTS == len(after))
        ):
            self.out.append(["ckpt", _encode_checkpoint(after[-1], done)])
            return
        # A rewritten ``done`` invalidates references into it: the window is written out.
        kept = done if not done_reset else ()
        self.out.append(["ckpts", [_encode_checkpoint(c, kept) for c in after]])


def diff(base: Base, new: Execution) -> list[Change]:
    """What storing ``new`` over ``base`` must write; costs what changed (see module doc)."""
    old = base.execution
    work = _Diff(base)
    work.out.append(["head", _head(new)])
    if new is old:
        return work.out
    old_steps = old.plan.steps if old.plan is not None else ()
    new_steps = new.plan.steps if new.plan is not None else ()
    if old_steps is not new_steps:
        work.part("steps", old_steps, new_steps, _step_key, _unstructure)
    if old.observations is not new.observations:
        work.part("obs", old.observations, new.observations, _obs_key, _encode_obs)
    done_kept = True
    if old.completed_steps is not new.completed_steps:
        done_kept = work.part("done", old.completed_steps, new.completed_steps, str, str)
    work.tasks(old, new)
    for part in RAW_PARTS:
        work.raw(part, getattr(old, part), getattr(new, part))
    work.checkpoints(old, new, not done_kept)
    # Only a guess for the next diff, checked there: kept even if this write then fails.
    base.hints.update(work.hints)
    return work.out
