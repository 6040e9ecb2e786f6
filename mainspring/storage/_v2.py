"""Reading storage v2 as v3, for ``mainspring migrate``: what changed in the stored shape, as
plain-data rewrites applied to what a v2 store holds. It never writes a store itself.

Storage v3 differs from v2 only in how some values are spelled; every record keeps its
fields, ids and positions:

- **one spelling of states** (snake_case): a worker's ``handing-off`` is ``handing_off``
  (``WorkerRecord.status``, ``TrailEntry.status``, a ``worker`` history entry's
  ``status``), a worker task's ``awaiting-delivery`` is ``awaiting_delivery``. Execution,
  step and agent task states were snake_case already.
- **typed stop requests**: ``Execution.stop_requests`` held ``"<op>[.cascade]:<task>"``
  strings, now :class:`~mainspring.storage.StopRequest` records; the ``stop-task`` audit
  line held the same string in its free-text ``reason``, now the request in ``stop`` (its
  reason empty).
- **typed approvals**: ``Execution.approvals`` held ``"plan.v<n>"`` / ``"step.<id>.v<n>"``,
  now :class:`~mainspring.storage.Approval` records.

A stop request or an approval that is not one of those strings was never acted on by v2
(its readers skipped it) and is left out; everything else is kept as it is, records that do
not parse included (E7: a record v2 could not read stays unreadable, never repaired). Ask
steps (``ask.<n>``) are stored alike in both.

The same rewrites serve each backend: :func:`upgrade_head` for an execution's head (or a
whole execution as 0.1 stored it), :func:`upgrade_part` for one stored item of a part,
:func:`upgrade_event` for one history entry, and :func:`upgrade_folded` for an execution
being read back whole.
"""

from __future__ import annotations

from typing import Any

from ._requests import Approval, BadEncoding, StopRequest

__all__ = ["RESPELLED", "upgrade_event", "upgrade_folded", "upgrade_head", "upgrade_part"]

#: v2 spelling -> v3 spelling, for the states that changed.
RESPELLED = {"handing-off": "handing_off", "awaiting-delivery": "awaiting_delivery"}

# Part -> the field of its items that holds a state.
_STATE_OF_PART = {"workers": "status", "worker_tasks": "state", "worker_trail": "status"}


def _respelled(value: Any) -> Any:
    return RESPELLED.get(value, value) if type(value) is str else value


def _stop_requests(raw: Any) -> Any:
    if type(raw) is not list:
        return raw  # the strict read names what is wrong
    upgraded: list[Any] = []
    for text in raw:
        if type(text) is dict:
            upgraded.append(text)  # v3 already
            continue
        try:
            request = StopRequest.parse_v2(text)
        except BadEncoding:
            continue  # never acted on in v2: its readers skipped it
        upgraded.append(
            {
                "operation_id": request.operation_id,
                "task_id": request.task_id,
                "cascade": request.cascade,
            }
        )
    return upgraded


def _approvals(raw: Any) -> Any:
    if type(raw) is not list:
        return raw
    upgraded: list[Any] = []
    for text in raw:
        if type(text) is dict:
            upgraded.append(text)
            continue
        try:
            approval = Approval.parse_v2(text)
        except BadEncoding:
            continue  # no v2 reader matched it against a plan
        upgraded.append({"plan_version": approval.plan_version, "step_id": approval.step_id})
    return upgraded


def _control(raw: Any) -> Any:
    if type(raw) is not dict or raw.get("action") != "stop-task" or "stop" in raw:
        return raw
    try:
        request = StopRequest.parse_v2(raw.get("reason"))
    except BadEncoding:
        return raw  # free text already
    stop = {
        "operation_id": request.operation_id,
        "task_id": request.task_id,
        "cascade": request.cascade,
    }
    return {**raw, "reason": "", "stop": stop}


def upgrade_head(head: Any) -> Any:
    """An execution's head as v3 stores it (or a whole execution: the parts it holds are
    rewritten too). Anything that is not an object is returned as it is."""
    if type(head) is not dict:
        return head
    head = dict(head)
    if "stop_requests" in head:
        head["stop_requests"] = _stop_requests(head["stop_requests"])
    if "approvals" in head:
        head["approvals"] = _approvals(head["approvals"])
    if type(head.get("controls")) is list:
        head["controls"] = [_control(line) for line in head["controls"]]
    for part in _STATE_OF_PART:
        if type(head.get(part)) is list:
            head[part] = [upgrade_part(part, item) for item in head[part]]
    return head


def upgrade_part(part: str, item: Any) -> Any:
    """One stored item of part ``part`` (``workers``, ``worker_tasks``, ``worker_trail``...)
    as v3 stores it; items of other parts are unchanged."""
    field = _STATE_OF_PART.get(part)
    if field is None or type(item) is not dict or field not in item:
        return item
    value = item[field]
    respelled = _respelled(value)
    return item if respelled is value else {**item, field: respelled}


def upgrade_event(entry: Any) -> Any:
    """One history entry's body as v3 stores it: a worker's status respelled."""
    if type(entry) is not dict or entry.get("kind") != "worker":
        return entry
    respelled = _respelled(entry.get("status"))
    return entry if respelled is entry.get("status") else {**entry, "status": respelled}


def upgrade_folded(head: Any, parts: dict[str, dict[str, Any]]) -> Any:
    """Rewrite an execution being read back whole (its head and its parts, in place)."""
    for part in _STATE_OF_PART:
        items = parts.get(part)
        if items:
            for key, item in items.items():
                items[key] = upgrade_part(part, item)
    return upgrade_head(head)
