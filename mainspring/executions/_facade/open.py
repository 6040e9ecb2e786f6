"""``open_runtime``: the actor system a :class:`Runtime` lives in, built and torn down.

It checks every option before anything starts (bad input is a clear error), opens the store
off the event loop, runs one persistence actor (the only writer) and the ``executions``
actor under which every ExecutionActor lives, watches a store that notifies (controls from
other hosts, at once), and on the way out stops every run with ``Shutdown`` while the writer
is still there, so each releases its lease and stays resumable.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from decimal import Decimal
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

from ...actors import Shutdown, open_system
from ...storage import RetryPolicy, Store, open_store
from ...storage._seam import Notifying, new_owner_id, open_committer
from ...supervision import RootSupervisor
from .._memory.memory import Memory, check_embedder, check_organization
from .._rules.usage import check_limits
from .._run.events import RunEventBus
from .._run.lease_guard import check_lease_clock
from .._run.lease_guard import lease_clock as default_lease_clock
from .._run.messages import RunConfig, RunServices
from .._run.results import agent_hash, envelope_hash, tool_hash
from .._telemetry import telemetry_from
from .._workers.evidence import EvidenceShelf
from .options import check_options, check_registries, check_step_limits
from .recovery import RecoveryWatch
from .runtime import Executions, Runtime
from .store_watch import watch_store

__all__ = ["open_runtime"]


def _default_reservation(remaining: int) -> int:
    return min(remaining, 10)


@asynccontextmanager
async def open_runtime(
    *,
    store: Store | str | os.PathLike[str] | None = None,
    tools: Mapping[str, Callable[..., Any]] | None = None,
    skills: Mapping[str, Callable[..., Any]] | None = None,
    agents: Mapping[str, Callable[..., Any]] | None = None,
    planner: Callable[..., Any] | None = None,
    workspace: str | os.PathLike[str] | None = None,
    max_parallel_steps: int = 8,
    limits: Mapping[str, int] | None = None,
    max_calls: int = 100,
    max_tokens: int | None = None,
    max_cost: Decimal | float | int | str | None = None,
    reservation: Callable[[int], int] = _default_reservation,
    token_reservation: Callable[[int], int] | None = None,
    cost_reservation: Callable[[Decimal], Any] | None = None,
    max_tool_calls: int = 1_000,
    lease_ttl: float = 15.0,
    heartbeat_interval: float | None = None,
    require_plan_approval: bool = False,
    max_replans: int = 0,
    config: Any = None,
    owner: str | None = None,
    timeouts: Mapping[str, float | None] | None = None,
    retries: Mapping[str, RetryPolicy] | None = None,
    organization: str | None = None,
    embedder: Callable[[list[str]], Any] | None = None,
    max_workers: int = 8,
    lease_clock: Callable[[], float] | None = None,
    recover: bool = True,
    telemetry: bool | None = None,
    tracer_provider: Any = None,
    meter_provider: Any = None,
) -> AsyncIterator[Runtime]:
    """Run durable executions for the duration of the ``async with`` block.

    ``store`` is a backend, a path (see :func:`open_store`) or None for the default under
    ``$MAINSPRING_HOME`` / the XDG state dir. ``tools`` and ``skills`` map names to callables
    (a skill is a model call: 1 call of the budget); ``agents`` to ``async def agent(ctx,
    input)``; an agent's definition (its qualified name and code, or its ``version``
    attribute when it has one) is part of its tasks' identity: a changed agent's stored
    tasks are not reused (R8). ``planner(goal, context)`` returns a :class:`Plan`.
    ``max_parallel_steps`` and ``limits`` (per tool/skill/agent name) bound concurrency (P3);
    ``max_calls`` is each run's default budget and ``reservation(remaining)`` what an agent
    step holds of it (P4). ``max_tokens`` (input and output together) and ``max_cost`` are
    each run's default token and cost budgets (None: unbounded); skills report what they
    spend by returning :class:`~mainspring.WithUsage` (B3).
    ``token_reservation(remaining)`` and ``cost_reservation(remaining)`` bound what one
    agent task may spend of what its run has left (None: all of it); past it, the task's
    next model call fails it with ``agent-call-budget``.
    ``lease_ttl`` is the lease's length (1 s to 10 min), renewed every
    ``heartbeat_interval`` (a third of it by default). A run starts no step, tool, model
    or planner call (an agent's included) unless its last confirmed renewal, timed from
    when it was sent, is younger than the lease less a margin (a fifth of it, at least
    0.25 s); otherwise it renews first. An answer from the store that comes later is
    vouched for by a renewal (granted only while the lease is still the run's, same
    tenure); refused, or late again, the run stops with ``LeaseLost`` (L5). ``lease_clock``
    (monotonic seconds; by default ``CLOCK_BOOTTIME`` where the system has it, which goes
    on while the machine is suspended, else :func:`time.monotonic`) is the clock that age
    is read from; tests pass a fake one. ``workspace`` is the directory
    checkpoints hash (R6); ``config`` any JSON value whose change counts as drift.

    ``timeouts`` and ``retries`` bound each step (B1): keys are a kind (``"tool"``,
    ``"skill"``, ``"agent"``, and ``"planner"`` for timeouts) or ``"kind:name"`` for one
    target (``"tool:fetch"``), which wins over its kind; a step's own ``PlanStep.timeout`` /
    ``PlanStep.retry`` wins over both. A timeout is in seconds (None: none); a step past it
    is cancelled with ``Timeout``. A retry policy is a :class:`~mainspring.storage.RetryPolicy`
    (tools and skills only). Without them nothing times out and nothing is retried.

    Memory (``runtime.memory``, ``ctx.memory``): ``organization`` (an id) enables the
    ``organization`` scope, whose facts belong to it; ``embedder(texts)`` (sync or async,
    one vector per text) makes searches rank by cosine similarity instead of full text.

    ``max_workers`` is the most active external workers (``WorkerAgent``) one run has:
    at most min(``max_parallel_steps``, ``max_workers``).

    ``recover`` (default True): while the block runs, the runtime takes over every run
    that nobody runs, without anyone calling :meth:`Runtime.recover` (L8): one whose lease
    was released or lapsed (on the store's clock; PostgreSQL also tells of a release at
    once), and one whose owner is a process of this host that is gone (L7: a ``kill -9``
    and a restart, within about a quarter second). A lease of another host is taken only
    once it lapses. ``recover=False`` turns this off: runs are then taken over only by
    :meth:`Runtime.recover` or :meth:`Runtime.resume`.

    Telemetry (O1, the ``otel`` extra): spans and metrics go to ``tracer_provider`` and
    ``meter_provider`` when given, else to the providers the application set globally, as
    OpenTelemetry libraries do; with neither, telemetry is off and ``opentelemetry`` is
    never imported. ``telemetry=False`` turns it off whatever is set; ``True`` turns it on
    with the global providers even if none was set. Spans and metrics carry ids, states,
    counts, durations and usage only, redacted (see the telemetry guide). A provider that
    is not an OpenTelemetry ``TracerProvider`` / ``MeterProvider`` is a ``TypeError``.

    Leaving the block stops every run here with ``Shutdown``: each releases its lease and
    leaves its record as it was, so :meth:`Runtime.recover` (here or in another process)
    picks it up, re-running only the steps that were in flight; another runtime open on
    the same store takes them over by itself.
    """
    interval = check_options(max_parallel_steps, max_calls, lease_ttl, heartbeat_interval)
    tools, skills, agents = check_registries(tools, skills, agents)
    default_tokens, default_cost = check_limits(max_tokens, max_cost)
    bounds = check_step_limits(timeouts, retries, (tools, skills, agents))
    organization = check_organization(organization)
    embedder = check_embedder(embedder)
    if lease_clock is not None:
        check_lease_clock(lease_clock)
    if not isinstance(recover, bool):
        raise TypeError(f"recover must be True or False, not {recover!r}")
    if isinstance(max_workers, bool) or not isinstance(max_workers, int) or max_workers < 1:
        raise ValueError(f"max_workers must be a whole number of at least 1, not {max_workers!r}")
    traced = telemetry_from(telemetry, tracer_provider, meter_provider)
    skill_versions = {name: str(getattr(fn, "version", "1")) for name, fn in skills.items()}
    tool_hashes = {name: tool_hash(fn) for name, fn in tools.items()}
    # Off the loop: opening a server store connects (and may create its schema).
    backend, close = await anyio.to_thread.run_sync(open_store, store)
    try:
        async with open_system("mainspring-runtime", root=RootSupervisor) as system:
            flushed = traced.flushed if traced is not None else None
            committer = await open_committer(system, backend, flushed=flushed)
            bus = RunEventBus(system.new_event)
            cfg = RunConfig(
                owner=owner or new_owner_id(),
                tools=tools,
                skills=skills,
                agents=agents,
                planner=planner,
                workspace=Path(workspace) if workspace is not None else None,
                max_parallel_steps=max_parallel_steps,
                limits=dict(limits or {}),
                max_calls=max_calls,
                reservation=reservation,
                lease_ttl=lease_ttl,
                heartbeat_interval=interval,
                require_plan_approval=require_plan_approval,
                max_replans=max_replans,
                max_tool_calls=max_tool_calls,
                config=config,
                skill_versions=skill_versions,
                tool_hashes=tool_hashes,
                agent_hashes={name: agent_hash(fn) for name, fn in agents.items()},
                agent_envelope=envelope_hash(tool_hashes, skill_versions, max_tool_calls),
                max_tokens=default_tokens,
                max_cost=default_cost,
                token_reservation=token_reservation,
                cost_reservation=cost_reservation,
                bounds=bounds,
                max_workers=max_workers,
                lease_clock=lease_clock or default_lease_clock,
            )
            services = RunServices(
                committer=committer,
                publish=bus.publish,
                listening=bus.listening,
                memory=Memory(committer, organization=organization, embedder=embedder),
                evidence=EvidenceShelf(committer, backend),
                telemetry=traced,
            )
            executions = await system.spawn(Executions, name="executions")
            runtime = Runtime(cfg, services, executions, bus)
            recovery = runtime._recovery
            if isinstance(backend, Notifying):  # controls from other hosts, at once
                notice = recovery.notice if recover else None
                await watch_store(system, backend, runtime._live, committer.durable, notice)
            watch = None
            if recover:  # L8: runs nobody runs are taken over while the runtime is open
                watch = await system.spawn(RecoveryWatch, recovery, name="recovery")
            try:
                yield runtime
            finally:
                with anyio.CancelScope(shield=True):
                    if watch is not None:
                        # Before the runs here stop: their released leases are not this
                        # runtime's own recovery's to take back.
                        reason = Shutdown(detail="the runtime is closing")
                        watch.cancel(reason)
                        await watch.stop(reason)
                    # Invariant V4: streams end as closing begins, not once the runs have
                    # stopped (a process tree's grace can take seconds, B2).
                    runtime.close_streams()
                    # Runs stop (and release their leases) while the writer is still there.
                    await executions.stop(Shutdown(detail="the runtime is closing"))
                    await committer.drain()
                    await runtime._followers.close()  # before the store closes
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(close)
