"""What a run hands back: its result, a stop's answer, summaries; and the hashes and
redaction applied to what a plan declares."""

from __future__ import annotations

import functools
import hashlib
import inspect
import types
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs

from ...actors import CancelReason
from ...storage import (
    AgentTaskRecord,
    Execution,
    Finding,
    Observation,
    Pending,
    Plan,
    PlanStep,
    Usage,
    redact,
)
from ...storage._seam import STEP_FINISHED, plain_record, redact_flagged, sha256_hex


@attrs.frozen(kw_only=True)
class StepFailure:
    """Why one step (or the planner) failed, as a result reports it (O2).

    ``step_id`` is the plan step's id (``plan`` for the planner or the run itself, with
    ``kind`` ``planner``); ``kind`` ``tool``, ``skill``, ``agent`` or ``planner``;
    ``error_type`` the exception's class name (None when no exception caused it: a timeout,
    a budget, an unstorable result); ``message`` the error as stored (redacted, E5);
    ``attempt`` the attempt that failed last (1 without a retry policy); ``agent_task_id``
    the agent task of an agent step; ``traceback`` the bounded, redacted traceback kept on
    the record (None when none was kept).
    """

    step_id: str
    kind: str
    error_type: str | None = None
    message: str = ""
    attempt: int = 1
    agent_task_id: str | None = None
    traceback: str | None = None


@attrs.frozen(kw_only=True)
class ExecutionResult:
    """Where a run stands when :meth:`ExecutionHandle.wait` returns.

    ``status`` is the execution's status as last committed (``completed``, ``paused``,
    ``waiting_for_clarification``...). ``outputs`` and ``observations`` hold what steps
    returned, unredacted for steps that ran in this process (E5: only disk is slimmed);
    ``redacted`` names the steps whose output here was read back from disk with secrets
    masked, so it is not what the step returned (E10; their observations say
    ``redacted=True``). ``findings`` are the agents' findings. ``pending`` is the open
    question, if any.
    ``stopped_by`` is the reason the run stopped in this process (None if it did not run
    here); ``error`` says what went wrong: why the run failed (the planner's error, the
    failed steps' errors) or why a run whose steps all finished did not complete.
    ``failures`` lists each failed step (and a failed planner) with its error type, message,
    attempt and traceback (O2). ``stopped_steps`` are the plan steps whose agent task a user
    stopped: done without a result (S2). ``stale_steps`` are the completed agent steps a
    resume kept (R7: not run again) although their agent's definition changed since they
    ran; each one's task records both hashes (``definition_hash``,
    ``kept_under_definition``) and says so in its diagnostics.
    """

    execution_id: str
    status: str
    summary: str
    outputs: Mapping[str, Any] = attrs.field(factory=dict)
    redacted: tuple[str, ...] = ()
    observations: tuple[Observation, ...] = ()
    findings: tuple[Finding, ...] = ()
    pending: Pending | None = None
    calls_used: int = 0
    #: Tokens and cost the run's model calls reported, across resumes (B3).
    usage: Usage = attrs.field(factory=Usage)
    steps_done: int = 0
    steps_total: int = 0
    stopped_by: CancelReason | None = None
    error: str | None = None
    stopped_steps: tuple[str, ...] = ()
    failures: tuple[StepFailure, ...] = ()
    stale_steps: tuple[str, ...] = ()


@attrs.frozen(kw_only=True)
class StopResult:
    """The answer to ``stop_agent_task`` (S1): never a silent no-op.

    ``state`` is ``stopping`` (a live task is being cancelled), ``cancelled`` (a stored task
    was marked cancelled), the task's final state if it had already finished (then ``ok`` is
    False), or ``unknown``. ``operation_id`` names this request in events and the audit.
    """

    ok: bool
    state: str
    reason: str
    task_id: str
    execution_id: str | None = None
    operation_id: str = ""


def summarize(execution: Execution) -> tuple[str, int, int]:
    """A one-line summary of ids and counts (V1), steps done and steps total."""
    plan = execution.plan
    total = len(plan.steps) if plan is not None else 0
    counts: dict[str, int] = {}
    if plan is not None:
        for step in plan.steps:
            counts[step.status] = counts.get(step.status, 0) + 1
    done = sum(counts.get(state, 0) for state in STEP_FINISHED)
    order = ("succeeded", "failed", "skipped", "cancelled", "stopped")
    parts = [f"{counts[s]} {s}" for s in order if s in counts]
    detail = ", ".join(parts) if parts else "no steps finished"
    return f"{execution.status}: {detail} of {total} steps", done, total


def shortfall(steps: Iterable[PlanStep], status: Mapping[str, str]) -> str | None:
    """Why a run whose steps all finished without failing did not produce what it was asked
    for, or None if it did. It did not if a step was cancelled (a stop's cascade), or if no
    step succeeded while some were stopped (S2: a stopped step produced nothing)."""
    cancelled = [step.id for step in steps if status.get(step.id) == "cancelled"]
    stopped = [step.id for step in steps if status.get(step.id) == "stopped"]
    if cancelled:
        also = f"; stopped: {', '.join(stopped)}" if stopped else ""
        return f"not completed: steps were cancelled: {', '.join(cancelled)}{also}"
    if stopped and "succeeded" not in status.values():
        names = ", ".join(stopped)
        return f"nothing was produced: every step was stopped or skipped; stopped: {names}"
    return None


def run_failure(observations: Iterable[Observation]) -> Observation | None:
    """The run's own failed observation (why the planner or the run failed), or None. It is
    stored under the id ``plan`` and names no tool, skill or agent: a plan step may be called
    ``plan`` too, and its observation always names what it ran (O2: never reported as the
    planner, never taken for why the run failed)."""
    return next(
        (
            o
            for o in observations
            if o.step_id == "plan" and not o.ok and o.tool is None and o.skill is None
            and o.agent is None
        ),
        None,
    )  # fmt: skip


def failed_steps_error(observations: Iterable[Observation], failed: Iterable[str]) -> str | None:
    """``step a failed: ValueError: ...`` for the first of the ``failed`` steps (and how many
    more failed), from their observations; None when none failed."""
    by_id = {obs.step_id: obs for obs in observations}
    ids = list(failed)
    if not ids:
        return None
    first = by_id.get(ids[0])
    why = f": {first.error[:300]}" if first is not None and first.error else ""
    more = f" (and {len(ids) - 1} more failed steps)" if len(ids) > 1 else ""
    return f"step {ids[0]} failed{why}{more}"


def _attempt_of(obs: Observation) -> int:
    number = obs.data.get("attempt")
    if type(number) is int and number >= 1:
        return number
    attempts = obs.data.get("attempts")
    return len(attempts) if type(attempts) is list and attempts else 1


def failures_of(execution: Execution) -> tuple[StepFailure, ...]:
    """Every failed plan step of ``execution`` (in plan order), then the run's own failure (O2).
    An agent step's traceback is its task's (the task record keeps it)."""
    by_id = {obs.step_id: obs for obs in execution.observations}
    tasks = execution.task_records
    task_failures = {task.id: task.failure for task in tasks if task.failure is not None}
    found: list[StepFailure] = []
    steps = execution.plan.steps if execution.plan is not None else ()
    for step in steps:
        obs = by_id.get(step.id)
        if step.status != "failed" or obs is None:
            continue
        error_type, traceback = obs.error_type, obs.traceback
        failure = task_failures.get(obs.agent_task_id or "")
        if failure is not None and traceback is None:
            error_type, traceback = failure.error_type, failure.traceback
        found.append(
            StepFailure(
                step_id=step.id,
                kind=step.kind,
                error_type=error_type,
                message=obs.error or "",
                attempt=_attempt_of(obs),
                agent_task_id=obs.agent_task_id,
                traceback=traceback,
            )
        )
    # The run's own failure (the planner's, a plan it returned that is not runnable, a
    # planner timeout, a run that could not go on): listed whether or not an exception
    # caused it, so a failed run never has an empty list.
    plan = run_failure(execution.observations)
    if plan is not None:
        found.append(
            StepFailure(
                step_id="plan",
                kind="planner",
                error_type=plan.error_type,
                message=plan.error or "",
                traceback=plan.traceback,
            )
        )
    return tuple(found)


def result_from(
    execution: Execution,
    *,
    outputs: Mapping[str, Any] | None = None,
    stopped_by: CancelReason | None = None,
    error: str | None = None,
) -> ExecutionResult:
    """An :class:`ExecutionResult` built from a stored execution (and live outputs)."""
    summary, done, total = summarize(execution)
    if error is None and execution.status == "failed":
        # Why the run failed is on the record (the "plan" observation), for every reader.
        why = run_failure(execution.observations)
        error = why.error if why is not None else None
        if error is None and execution.plan is not None:  # O2: which steps failed, and why
            failed = [step.id for step in execution.plan.steps if step.status == "failed"]
            error = failed_steps_error(execution.observations, failed)
    tasks = execution.task_records
    findings = [finding for task in tasks for finding in task.findings]
    stored = {obs.step_id: obs.output for obs in execution.observations if obs.ok}
    live = dict(outputs or {})
    merged = {**stored, **live}
    # A live output replaces the stored one (E10: the real value, not its masked copy);
    # an observation that already holds it as it is stays as it is.
    observations = tuple(
        attrs.evolve(obs, output=live[obs.step_id], redacted=False)
        if obs.ok and obs.step_id in live and (obs.redacted or live[obs.step_id] is not obs.output)
        else obs
        for obs in execution.observations
    )
    redacted = tuple(obs.step_id for obs in observations if obs.ok and obs.redacted)
    # E10: plain data (tuples, not a live record's Vectors), as a result read back is.
    return plain_record(
        ExecutionResult(
            execution_id=execution.id,
            status=execution.status,
            summary=summary,
            outputs=merged,
            redacted=redacted,
            observations=observations,
            findings=tuple(findings),
            pending=execution.pending,
            calls_used=execution.calls_used,
            usage=execution.usage,
            steps_done=done,
            steps_total=total,
            stopped_by=stopped_by,
            error=error,
            stopped_steps=tuple(
                step.id for step in execution.plan.steps if step.status == "stopped"
            )
            if execution.plan is not None
            else (),
            failures=failures_of(execution),
            stale_steps=_stale_steps(execution, tasks),
        )
    )


def _stale_steps(execution: Execution, tasks: Iterable[AgentTaskRecord]) -> tuple[str, ...]:
    """The succeeded steps whose task a resume kept under another agent definition (R7)."""
    plan = execution.plan
    if plan is None:
        return ()
    stale = {
        task.id
        for task in tasks
        if task.kept_under_definition and task.kept_under_definition != task.definition_hash
    }
    if not stale:
        return ()
    by_step = {obs.step_id: obs.agent_task_id for obs in execution.observations if obs.ok}
    return tuple(
        step.id
        for step in plan.steps
        if step.status == "succeeded" and by_step.get(step.id) in stale
    )


def tool_hash(fn: Callable[..., Any]) -> str:
    """A declaration hash for a tool: its qualified name and signature (R6)."""
    try:
        signature = str(inspect.signature(fn))
    except (TypeError, ValueError):
        signature = "(?)"
    # Not the module: a script's tools live in __main__ when it runs them and under the
    # script's name when `mainspring resume --app` imports them; they are the same tools.
    name = getattr(fn, "__qualname__", type(fn).__qualname__)
    return hashlib.sha256(f"{name}{signature}".encode()).hexdigest()


def _constant(value: Any) -> str:
    # The text of a code object's constant, the same in every process: no addresses, and a
    # frozenset's order (which follows string hashing, randomised per process) made canonical.
    if isinstance(value, types.CodeType):
        return f"code:{_code_digest(value)}"
    if isinstance(value, tuple):
        return "(" + ",".join(_constant(item) for item in value) + ")"
    if isinstance(value, frozenset):
        return "{" + ",".join(sorted(_constant(item) for item in value)) + "}"
    return f"{type(value).__name__}:{value!r}"


def _code_digest(code: types.CodeType) -> str:
    """What a code object does: its bytecode, constants (nested functions included), names
    and arguments; not its file or line numbers, so moving a function does not change it."""
    parts = [
        code.co_qualname,
        code.co_code.hex(),
        ",".join(_constant(value) for value in code.co_consts),
        ",".join(code.co_names),
        ",".join(code.co_varnames),
        ",".join(code.co_freevars),
        ",".join(code.co_cellvars),
        f"{code.co_argcount}/{code.co_posonlyargcount}/{code.co_kwonlyargcount}/{code.co_flags}",
    ]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


_PLAIN = (type(None), bool, int, float, str, bytes)
_MAX_DEPTH = 32  # functions and containers nested deeper than this are not looked into
_MAX_ITEMS = 10_000  # a bound tuple or frozenset larger than this is hashed by type and size


@attrs.define
class _Walk:
    """One definition hash's walk: the functions on the current path (a recursion guard) and the
    digests already taken (a function reached twice is hashed once). Ids never reach the
    text, so the hash stays the same in every process."""

    path: set[int] = attrs.field(factory=set)
    done: dict[int, str] = attrs.field(factory=dict)


def _value_text(value: Any, walk: _Walk, depth: int) -> str:
    """The text of a value a definition binds or closes over (R8), the same in every process:
    plain constants, and tuples and frozensets of them (in a canonical order), by value; a
    function by its definition; anything else, mutable containers included, by its type's
    qualified name only: what it holds is state, which may change while the agent does not
    (declare a ``version`` when behaviour depends on it)."""
    kind = type(value)
    if kind in _PLAIN:
        text = format(value, "x") if kind is int else repr(value)  # no int-to-str limit
        return f"{kind.__name__}:{text}"
    name = kind.__qualname__
    if depth >= _MAX_DEPTH or id(value) in walk.path:
        return f"{name}:..."
    if isinstance(value, types.FunctionType | types.MethodType | functools.partial):
        return f"fn:{_definition(value, walk, depth + 1)}"
    if kind not in (tuple, frozenset):
        return f"object:{name}"
    if len(value) > _MAX_ITEMS:
        return f"{name}:len {len(value)}"
    items = [_value_text(item, walk, depth + 1) for item in value]
    if kind is frozenset:
        items.sort()
    return f"{name}[" + ",".join(items) + "]"


def _keywords_text(keywords: Mapping[str, Any], walk: _Walk, depth: int) -> str:
    # Keyword defaults or a partial's keywords: part of the definition, unlike a dict's state.
    items = sorted(f"{name}={_value_text(value, walk, depth)}" for name, value in keywords.items())
    return "{" + ",".join(items) + "}"


def _function_digest(fn: types.FunctionType, walk: _Walk, depth: int) -> str:
    """A function's code, and what it binds: its defaults and its closure's cells. A function
    that binds nothing keeps its code's digest (the hash stored before defaults counted)."""
    parts = [_code_digest(fn.__code__)]
    if fn.__defaults__:
        parts.append(f"defaults:{_value_text(fn.__defaults__, walk, depth)}")
    if fn.__kwdefaults__:
        parts.append(f"kwdefaults:{_keywords_text(fn.__kwdefaults__, walk, depth)}")
    for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or (), strict=False):
        try:
            contents = cell.cell_contents
        except ValueError:  # not assigned yet
            parts.append(f"cell {name}: empty")
        else:
            parts.append(f"cell {name}:{_value_text(contents, walk, depth)}")
    if len(parts) == 1:
        return parts[0]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def _class_digest(cls: type, walk: _Walk, depth: int) -> str:
    """What a callable object's class does: the functions (and plain class attributes) every
    class of its MRO but ``object`` defines, by name; not the instance's state."""
    parts = []
    for klass in cls.__mro__:
        if klass is object:
            continue
        members = []
        for name, member in sorted(vars(klass).items()):
            raw = member.__func__ if isinstance(member, staticmethod | classmethod) else member
            if isinstance(raw, property):
                accessors = (raw.fget, raw.fset, raw.fdel)
                texts = [_value_text(fn, walk, depth) for fn in accessors if fn is not None]
                members.append(f"{name}=property({','.join(texts)})")
            elif isinstance(raw, types.FunctionType) or not name.startswith("__"):
                members.append(f"{name}={_value_text(raw, walk, depth)}")
        parts.append(f"{klass.__qualname__}{{{';'.join(members)}}}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def _definition(fn: Any, walk: _Walk, depth: int) -> str:
    """The digest of what a callable does (R8): a partial's bound arguments and the function
    it calls; a bound method's function and its object's class; a function's code and what
    it binds; a callable object's class."""
    key = id(fn)
    if key in walk.done:
        return walk.done[key]
    walk.path.add(key)
    try:
        digest = _definition_of(fn, walk, depth)
    finally:
        walk.path.discard(key)
    walk.done[key] = digest
    return digest


def _definition_of(fn: Any, walk: _Walk, depth: int) -> str:
    target: Any = inspect.unwrap(fn)
    bound: list[str] = []
    while isinstance(target, functools.partial):  # the function it calls, and what it binds
        bound.append(_value_text(target.args, walk, depth))
        bound.append(_keywords_text(target.keywords, walk, depth))
        target = inspect.unwrap(target.func)
    if isinstance(target, types.MethodType):  # a bound method: its function, and its class
        owner = target.__self__
        bound.append(_class_digest(owner if isinstance(owner, type) else type(owner), walk, depth))
        target = target.__func__
    if isinstance(target, types.FunctionType):
        digest = _function_digest(target, walk, depth)
    elif isinstance(target, type):
        digest = _class_digest(target, walk, depth)
    elif isinstance(getattr(target, "__code__", None), types.CodeType):
        digest = _code_digest(target.__code__)
    elif isinstance(target, types.BuiltinFunctionType) or not callable(target):
        digest = "no code"
    else:  # a callable object
        digest = _class_digest(type(target), walk, depth)
    if not bound:
        return digest
    return hashlib.sha256("\n".join([digest, *bound]).encode()).hexdigest()


def agent_hash(fn: Callable[..., Any]) -> str:
    """An agent's definition hash (R8): its qualified name and its definition, or its
    qualified name and ``fn.version`` when the agent declares one (as skills do).

    The definition is its code and what it binds: default arguments, a partial's arguments,
    the values its closure holds (plain constants, and tuples and frozensets of them, by
    value; functions by their definition; other objects, lists and dicts too, by type only),
    and for a callable object every function its classes define. It is stable across
    processes and follows the code: a changed body changes it, and so may another Python
    version's bytecode; declare a version to decide yourself (and whenever behaviour depends
    on state the hash cannot see). Like :func:`tool_hash` it leaves out the module
    (``__main__`` in a script is the same agent under its module name elsewhere).
    """
    target: Any = inspect.unwrap(fn)
    while isinstance(target, functools.partial):
        target = inspect.unwrap(target.func)
    name = getattr(target, "__qualname__", type(target).__qualname__)
    version = getattr(fn, "version", getattr(target, "version", None))
    if version is not None:
        return hashlib.sha256(f"{name}\nversion:{version}".encode()).hexdigest()
    digest = _definition(fn, _Walk(), 0)
    return hashlib.sha256(f"{name}\ncode:{digest}".encode()).hexdigest()


def envelope_hash(
    tool_hashes: Mapping[str, str], skill_versions: Mapping[str, str], max_tool_calls: int
) -> str:
    """What wraps an agent's definition in a task: the tools and skills it may call (their
    declarations) and its tool-call limit. Recorded on the task, not compared (R8)."""
    envelope = {"tools": dict(tool_hashes), "skills": dict(skill_versions)}
    return sha256_hex({**envelope, "max_tool_calls": max_tool_calls})


def redact_plan(plan: Plan) -> Plan:
    """The plan as it may reach disk: free text and inputs redacted, ids untouched (E5)."""
    return stored_plan(plan)[0]


def stored_plan(plan: Plan) -> tuple[Plan, tuple[str, ...]]:
    """:func:`redact_plan` and :func:`masked_inputs` of ``plan`` from one walk of each
    step's input (E5, E10): what a new run stores, and which inputs disk holds masked."""
    steps: list[PlanStep] = []
    masked: list[str] = []
    for step in plan.steps:
        value, changed = redact_flagged(step.input)
        if changed:
            masked.append(step.id)
        steps.append(attrs.evolve(step, description=redact(step.description), input=value))
    redacted = attrs.evolve(
        plan, goal=redact(plan.goal), reason=redact(plan.reason), steps=tuple(steps)
    )
    return redacted, tuple(masked)


def masked_inputs(plan: Plan | None) -> tuple[str, ...]:
    """The ids of the steps whose input redaction changes: what disk holds of them is not
    what they were planned with (E10)."""
    if plan is None:
        return ()
    return tuple(step.id for step in plan.steps if redact_flagged(step.input)[1])


def config_hash(config: Any) -> str | None:
    """The hash a checkpoint keeps of the runtime's ``config`` (R6); None when there is none."""
    if config is None:
        return None
    return sha256_hex(config)
