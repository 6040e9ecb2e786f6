"""Hypothesis stateful test: random worker operations against a reference model (issue #17).

The machine keeps a small run (three tasks, a capacity of min(jobs, maximum)) twice: as
records driven through ``executions._fleet``, and as plain dicts driven by :class:`Model`,
which restates the rules of the issue without calling the module. Each step draws an
operation and a caller's belief (exact, or stale: another id, an older or newer generation,
another status) and asserts both sides agree on whether it succeeded and, if not, on which
error; then that the records match the model, and the invariants: at most one active worker
per task and ``limit`` per run, generations never go down, nothing is stopped, fenced or
blocked without its process confirmed dead, delivered and blocked are sinks.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from mainspring.executions._workers import fleet as fleet
from mainspring.executions._workers.fleet import Expect, StaleWorker, WorkerRefused
from mainspring.storage import WorkerRecord, WorkerTask
from mainspring.storage._seam import ProcessIdentity, StopIntent, WorkerFailure
from tests._examples import SHRINKING, examples

ACTIVE = {"assigned", "starting", "running", "idle", "handing_off"}
STATUSES = [
    "assigned",
    "starting",
    "running",
    "idle",
    "handing_off",
    "fenced",
    "delivered",
    "stopped",
    "blocked",
]
TASKS = ("t0", "t1", "t2")
DIGESTS = ("a" * 64, "b" * 64)
PROC = ProcessIdentity(host="h", pid=7, group=7)
#: a belief is exact, or stale in one way
BELIEFS = st.sampled_from(["exact"] * 12 + ["id", "older", "newer", "status"])
WORKERS = st.integers(0, 15)
STATUS = st.sampled_from(STATUSES)


class Model:
    """The rules as the issue states them, on dicts: tasks ``{state, worker}``, workers
    ``{task, gen, status, intent, delivered, failure}``."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.tasks: dict[str, dict[str, Any]] = {
            t: {"state": "ready", "worker": None} for t in TASKS
        }
        self.workers: dict[str, dict[str, Any]] = {}

    def active(self) -> list[str]:
        return [i for i, w in self.workers.items() if w["status"] in ACTIVE]

    # Each method answers None (done) or the error: "stale", or a WorkerRefused code.

    def assign(self, task_id: str, worker_id: str) -> str | None:
        task = self.tasks[task_id]
        if task["state"] != "ready":
            return "task-busy"
        if worker_id in self.workers:
            return "illegal-move"
        if any(self.workers[i]["task"] == task_id for i in self.active()):
            return "task-busy"
        if len(self.active()) >= self.limit:
            return "capacity"
        self.workers[worker_id] = {
            "task": task_id,
            "gen": 1,
            "status": "assigned",
            "intent": None,
            "delivered": None,
            "failure": None,
            "epoch": None,
        }
        task["worker"] = worker_id
        return None

    def _gate(
        self, wid: str, belief: tuple[str, int, str], allowed: set[str], code: str, own: bool
    ) -> str | None:
        w = self.workers[wid]
        if belief != (wid, w["gen"], w["status"]):
            return "stale"
        if own and self.tasks[w["task"]]["worker"] != wid:
            return "wrong-task"
        if w["status"] not in allowed:
            return code
        return None

    def _set(self, wid: str, status: str, task_state: str | None = None) -> None:
        w = self.workers[wid]
        w["status"] = status
        if task_state is not None:
            self.tasks[w["task"]]["state"] = task_state

    def starting(self, wid: str, belief: Any, epoch: tuple[str, str]) -> str | None:
        error = self._gate(wid, belief, {"assigned"}, "illegal-move", own=False)
        if error is None:
            self._set(wid, "starting")
            self.workers[wid]["epoch"] = epoch
        return error

    def started(self, wid: str, belief: Any) -> str | None:
        error = self._gate(wid, belief, {"starting"}, "illegal-move", own=True)
        if error is None:
            self._set(wid, "running", "running")
        return error

    def start_failed(self, wid: str, belief: Any) -> str | None:
        error = self._gate(wid, belief, {"starting"}, "illegal-move", own=True)
        if error is None:
            self._set(wid, "blocked", "ready")
        return error

    def heartbeat(self, wid: str, belief: Any, lease: float | None) -> str | None:
        error = self._gate(wid, belief, ACTIVE, "not-live", own=False)
        if error is None and lease is not None and not 1 <= lease <= 600:
            return "ValueError"
        return error

    def observe(self, wid: str, belief: Any, seen: str) -> str | None:
        error = self._gate(wid, belief, {"running", "idle"}, "not-live", own=True)
        if error is None and seen in ("running", "idle"):
            self._set(wid, seen)
        elif error is None and seen == "exited":
            self._set(wid, "stopped", "ready")
        return error

    def takeover(self, wid: str, belief: Any, dead: bool) -> str | None:
        w = self.workers[wid]
        error = self._gate(wid, belief, ACTIVE | {"stopped"}, "illegal-move", own=True)
        if error is not None:
            return error
        if self.tasks[w["task"]]["state"] not in ("ready", "running"):
            return "illegal-move"
        if w["status"] == "stopped":
            others = [i for i in self.active() if i != wid]
            if any(self.workers[i]["task"] == w["task"] for i in others):
                return "task-busy"
            if len(others) >= self.limit:
                return "capacity"
        if not dead:
            return "not-dead"
        w.update(gen=w["gen"] + 1, intent=None, epoch=None)
        self._set(wid, "assigned", "ready")
        return None

    def failure(self, wid: str, belief: Any, key: int, useful: bool) -> tuple[str | None, bool]:
        error = self._gate(wid, belief, {"running", "idle"}, "not-live", own=False)
        if error is not None:
            return error, False
        w = self.workers[wid]
        previous = w["failure"]
        w["failure"] = (key, useful)
        # two consecutive identical failures, neither with useful progress
        return None, previous == (key, False) and not useful

    def repair(self, wid: str, belief: Any, text: str) -> str | None:
        error = self._gate(wid, belief, {"running", "idle"}, "not-live", own=False)
        stripped = text.strip()
        if error is None and not (0 < len(stripped) <= fleet.MAX_REPAIR and "\0" not in text):
            return "bad-repair"
        return error

    def usage(self, wid: str, gen: int, epoch: tuple[str, str]) -> str | None:
        w = self.workers[wid]
        return None if (gen, epoch) == (w["gen"], w["epoch"]) else "stale-usage"

    def handoff(self, wid: str, belief: Any, digests: tuple[str, str]) -> str | None:
        w = self.workers[wid]
        if belief[:2] == (wid, w["gen"]) and w["status"] in ("handing_off", "fenced", "delivered"):
            return None if w["intent"] == digests else "digest-mismatch"
        error = self._gate(wid, belief, {"running", "idle"}, "not-live", own=False)
        if error is None:
            self._set(wid, "handing_off")
            w["intent"] = digests
        return error

    def fence(self, wid: str, belief: Any, dead: bool) -> str | None:
        w = self.workers[wid]
        if belief[:2] == (wid, w["gen"]) and w["status"] in ("fenced", "delivered"):
            return None
        error = self._gate(wid, belief, {"handing_off"}, "illegal-move", own=True)
        if error is None and not dead:
            return "not-dead"
        if error is None:
            self._set(wid, "fenced", "awaiting_delivery")
        return error

    def deliver(self, wid: str, belief: Any, digest: str) -> str | None:
        w = self.workers[wid]
        if belief[:2] == (wid, w["gen"]) and w["status"] == "delivered":
            return None if w["delivered"] == digest else "digest-mismatch"
        error = self._gate(wid, belief, {"fenced"}, "illegal-move", own=True)
        if error is None and w["intent"][0] != digest:
            return "digest-mismatch"
        if error is None:
            self._set(wid, "delivered", "delivered")
            w["delivered"] = digest
        return error

    def stop(self, wid: str, belief: Any, dead: bool, task_state: str) -> str | None:
        error = self._gate(wid, belief, ACTIVE, "illegal-move", own=True)
        if error is None and not dead:
            return "not-dead"
        if error is None:
            self._set(wid, "stopped", task_state)
        return error

    def block(self, wid: str, belief: Any, dead: bool) -> str | None:
        error = self._gate(wid, belief, ACTIVE, "illegal-move", own=True)
        if error is None and not dead:
            return "not-dead"
        if error is None:
            self._set(wid, "blocked", "blocked")
        return error


def _outcome(call: Any) -> tuple[str | None, Any]:
    try:
        return None, call()
    except StaleWorker:
        return "stale", None
    except WorkerRefused as exc:
        return exc.code, None
    except ValueError:
        return "ValueError", None


class FleetMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0
        self.next_id = 0
        self.generations: dict[str, int] = {}
        self.sinks: dict[str, str] = {}

    @initialize(jobs=st.integers(1, 4), maximum=st.integers(1, 4))
    def start(self, jobs: int, maximum: int) -> None:
        self.limit = fleet.capacity(jobs, maximum)
        self.model = Model(self.limit)
        self.tasks = {t: WorkerTask(id=t, step_id="s", updated_at=0.0) for t in TASKS}
        self.workers: dict[str, WorkerRecord] = {}

    # -- helpers --------------------------------------------------------------------------

    def tick(self) -> float:
        self.now += 1.0
        return self.now

    def pick(self, index: int) -> str | None:
        """A worker, an active one more often (most steps then move something)."""
        active = sorted(i for i, w in self.workers.items() if w.active)
        ids = active * 3 + sorted(self.workers)
        return ids[index % len(ids)] if ids else None

    def belief(self, wid: str, how: str, status: str) -> tuple[Expect, tuple[str, int, str]]:
        w = self.workers[wid]
        key = {
            "exact": (wid, w.generation, w.status),
            "id": ("ghost", w.generation, w.status),
            "older": (wid, w.generation - 1, w.status),
            "newer": (wid, w.generation + 1, w.status),
            "status": (wid, w.generation, status),
        }[how]
        return Expect(key[0], key[1], frozenset({key[2]})), key

    def apply(self, wid: str, expected: str | None, call: Any, *, dead: bool = False) -> Any:
        """Run ``call`` on the records; it must agree with the model's ``expected``."""
        before = self.workers[wid].status
        error, result = _outcome(call)
        assert error == expected, (error, expected)
        if error is not None:
            return None
        worker = result if isinstance(result, WorkerRecord) else result[0]
        task = (
            result[1] if isinstance(result, tuple) and isinstance(result[1], WorkerTask) else None
        )
        self.workers[wid] = worker
        if task is not None:
            was = self.tasks[task.id].state
            if task.state in ("blocked", "awaiting_delivery") and task.state != was:
                assert dead, f"task {task.id} became {task.state} with a live worker process"
            self.tasks[task.id] = task
        if worker.status in ("stopped", "fenced", "blocked") and worker.status != before:
            assert dead, f"{wid} became {worker.status} without its process confirmed dead"
        return result

    # -- rules --------------------------------------------------------------------------

    @rule(task=st.sampled_from(TASKS), reuse=st.booleans(), index=WORKERS)
    def assign(self, task: str, reuse: bool, index: int) -> None:
        wid = self.pick(index) if reuse and self.workers else f"w{self.next_id}"
        assert wid is not None
        expected = self.model.assign(task, wid)
        error, result = _outcome(
            lambda: fleet.assign(
                self.tasks[task],
                self.workers.values(),
                wid,
                agent_id="a",
                limit=self.limit,
                now=self.tick(),
            )
        )
        assert error == expected, (error, expected)
        if result is not None:
            self.tasks[task], self.workers[wid] = result
            self.next_id += 1

    @rule(index=WORKERS, how=BELIEFS, status=STATUS)
    def mark_starting(self, index: int, how: str, status: str) -> None:
        if (wid := self.pick(index)) is None:
            return
        belief, key = self.belief(wid, how, status)
        epoch = (f"s{self.next_id}", f"j{self.now}")
        self.next_id += 1
        expected = self.model.starting(wid, key, epoch)
        w = self.workers[wid]
        self.apply(
            wid,
            expected,
            lambda: fleet.mark_starting(w, belief, session=epoch[0], job=epoch[1], now=self.tick()),
        )

    @rule(index=WORKERS, how=BELIEFS, status=STATUS, ok=st.booleans())
    def mark_started(self, index: int, how: str, status: str, ok: bool) -> None:
        if (wid := self.pick(index)) is None:
            return
        belief, key = self.belief(wid, how, status)
        w, t = self.workers[wid], self.tasks[self.workers[wid].task_id]
        if ok:
            expected = self.model.started(wid, key)
            self.apply(
                wid, expected, lambda: fleet.mark_started(w, t, belief, PROC, now=self.tick())
            )
        else:
            expected = self.model.start_failed(wid, key)
            self.apply(
                wid,
                expected,
                lambda: fleet.start_failed(w, t, belief, now=self.tick(), digest=None),
                dead=True,  # no process was started
            )

    @rule(
        index=WORKERS,
        how=BELIEFS,
        status=STATUS,
        lease=st.sampled_from([None, 1, 30, 600, 0.5, 601]),
    )
    def heartbeat(self, index: int, how: str, status: str, lease: float | None) -> None:
        if (wid := self.pick(index)) is None:
            return
        belief, key = self.belief(wid, how, status)
        expected = self.model.heartbeat(wid, key, lease)
        w = self.workers[wid]
        self.apply(wid, expected, lambda: fleet.heartbeat(w, belief, now=self.tick(), lease=lease))

    @rule(
        index=WORKERS,
        how=BELIEFS,
        status=STATUS,
        seen=st.sampled_from(["running", "idle", "exited", "unknown"]),
    )
    def observe(self, index: int, how: str, status: str, seen: Any) -> None:
        if (wid := self.pick(index)) is None:
            return
        belief, key = self.belief(wid, how, status)
        expected = self.model.observe(wid, key, seen)
        w, t = self.workers[wid], self.tasks[self.workers[wid].task_id]
        self.apply(
            wid,
            expected,
            lambda: fleet.observe(w, t, belief, seen, now=self.tick()),
            dead=seen == "exited",  # an exited process was inspected: it is dead
        )

    @rule(index=WORKERS, how=BELIEFS, status=STATUS, dead=st.booleans())
    def takeover(self, index: int, how: str, status: str, dead: bool) -> None:
        if (wid := self.pick(index)) is None:
            return
        belief, key = self.belief(wid, how, status)
        expected = self.model.takeover(wid, key, dead)
        w, t = self.workers[wid], self.tasks[self.workers[wid].task_id]
        self.apply(
            wid,
            expected,
            lambda: fleet.takeover(
                w,
                t,
                belief,
                workers=self.workers.values(),
                limit=self.limit,
                confirmed_dead=dead,
                now=self.tick(),
            ),
            dead=dead,
        )

    @rule(index=WORKERS, how=BELIEFS, status=STATUS, key=st.integers(0, 1), useful=st.booleans())
    def report_failure(self, index: int, how: str, status: str, key: int, useful: bool) -> None:
        if (wid := self.pick(index)) is None:
            return
        belief, bkey = self.belief(wid, how, status)
        expected, stop = self.model.failure(wid, bkey, key, useful)
        failure = WorkerFailure(
            failure_class="tests", fingerprint=DIGESTS[key], useful_progress=useful
        )
        w = self.workers[wid]
        result = self.apply(
            wid, expected, lambda: fleet.report_failure(w, belief, failure, now=self.tick())
        )
        if result is not None:
            assert result[1] == stop

    @rule(
        index=WORKERS,
        how=BELIEFS,
        status=STATUS,
        text=st.sampled_from(["fix", "  fix  ", "", " \n", "a\0b", "x" * (fleet.MAX_REPAIR + 1)]),
    )
    def repair(self, index: int, how: str, status: str, text: str) -> None:
        if (wid := self.pick(index)) is None:
            return
        belief, key = self.belief(wid, how, status)
        expected = self.model.repair(wid, key, text)
        w = self.workers[wid]
        self.apply(wid, expected, lambda: fleet.repair(w, belief, text, now=self.tick()))

    @rule(index=WORKERS, which=st.sampled_from(["now", "old-gen", "session", "job"]))
    def add_usage(self, index: int, which: str) -> None:
        if (wid := self.pick(index)) is None:
            return
        w = self.workers[wid]
        gen = w.generation - 1 if which == "old-gen" else w.generation
        session = "other" if which == "session" else (w.session or "none")
        job = "other" if which == "job" else (w.job or "none")
        epoch = self.model.workers[wid]["epoch"]
        expected = self.model.usage(wid, gen, (session, job) if epoch else ("?", "?"))
        self.apply(
            wid,
            expected,
            lambda: fleet.add_usage(
                w,
                generation=gen,
                session=session,
                job=job,
                input_tokens=1,
                cost=Decimal("0.01"),
                now=self.tick(),
            ),
        )

    @rule(index=WORKERS, how=BELIEFS, status=STATUS, d=st.integers(0, 1), c=st.integers(0, 1))
    def begin_handoff(self, index: int, how: str, status: str, d: int, c: int) -> None:
        if (wid := self.pick(index)) is None:
            return
        belief, key = self.belief(wid, how, status)
        expected = self.model.handoff(wid, key, (DIGESTS[d], DIGESTS[c]))
        intent = StopIntent(
            delivery_digest=DIGESTS[d], contract_digest=DIGESTS[c], expires_at=1e9, at=self.tick()
        )
        w = self.workers[wid]
        self.apply(wid, expected, lambda: fleet.begin_handoff(w, belief, intent))

    @rule(index=WORKERS, how=BELIEFS, status=STATUS, dead=st.booleans())
    def fence(self, index: int, how: str, status: str, dead: bool) -> None:
        if (wid := self.pick(index)) is None:
            return
        belief, key = self.belief(wid, how, status)
        expected = self.model.fence(wid, key, dead)
        w, t = self.workers[wid], self.tasks[self.workers[wid].task_id]
        self.apply(
            wid,
            expected,
            lambda: fleet.fence(w, t, belief, confirmed_dead=dead, now=self.tick()),
            dead=dead,
        )

    @rule(index=WORKERS, how=BELIEFS, status=STATUS, d=st.integers(0, 1))
    def deliver(self, index: int, how: str, status: str, d: int) -> None:
        if (wid := self.pick(index)) is None:
            return
        belief, key = self.belief(wid, how, status)
        expected = self.model.deliver(wid, key, DIGESTS[d])
        w, t = self.workers[wid], self.tasks[self.workers[wid].task_id]
        self.apply(
            wid,
            expected,
            lambda: fleet.deliver(w, t, belief, delivery_digest=DIGESTS[d], now=self.tick()),
        )

    @rule(
        index=WORKERS,
        how=BELIEFS,
        status=STATUS,
        dead=st.booleans(),
        then=st.sampled_from(["ready", "blocked", "block"]),
    )
    def stop(self, index: int, how: str, status: str, dead: bool, then: Any) -> None:
        if (wid := self.pick(index)) is None:
            return
        belief, key = self.belief(wid, how, status)
        w, t = self.workers[wid], self.tasks[self.workers[wid].task_id]
        now = self.tick()
        if then == "block":
            expected = self.model.block(wid, key, dead)
            call = lambda: fleet.block(w, t, belief, confirmed_dead=dead, reason="r", now=now)  # noqa: E731
        else:
            expected = self.model.stop(wid, key, dead, then)
            call = lambda: fleet.mark_stopped(  # noqa: E731
                w, t, belief, confirmed_dead=dead, reason="r", task_state=then, now=now
            )
        self.apply(wid, expected, call, dead=dead)

    @rule(index=WORKERS, digest=st.integers(0, 1))
    def advance(self, index: int, digest: int) -> None:
        """The next step of a worker's natural life, with an exact belief: without it,
        random steps seldom get a worker as far as a delivery."""
        if (wid := self.pick(index)) is None:
            return
        status = self.workers[wid].status
        if status == "assigned":
            self.mark_starting(index=index, how="exact", status=status)
        elif status == "starting":
            self.mark_started(index=index, how="exact", status=status, ok=True)
        elif status in ("running", "idle"):
            self.begin_handoff(index=index, how="exact", status=status, d=digest, c=0)
        elif status == "handing_off":
            self.fence(index=index, how="exact", status=status, dead=True)
        elif status == "fenced":
            self.deliver(index=index, how="exact", status=status, d=digest)
        elif status == "stopped":
            self.takeover(index=index, how="exact", status=status, dead=True)

    advance_again = advance

    # -- invariants ---------------------------------------------------------------------

    @invariant()
    def records_match_the_model(self) -> None:
        if not hasattr(self, "model"):
            return
        for wid, w in self.workers.items():
            m = self.model.workers[wid]
            intent = (w.intent.delivery_digest, w.intent.contract_digest) if w.intent else None
            assert (w.task_id, w.generation, w.status, intent, w.delivered_digest) == (
                m["task"],
                m["gen"],
                m["status"],
                m["intent"],
                m["delivered"],
            ), wid
        assert set(self.workers) == set(self.model.workers)
        for tid, t in self.tasks.items():
            assert (t.state, t.worker_id) == (
                self.model.tasks[tid]["state"],
                self.model.tasks[tid]["worker"],
            ), tid

    @invariant()
    def one_active_worker_per_task_and_limit_per_run(self) -> None:
        if not hasattr(self, "model"):
            return
        active = [w for w in self.workers.values() if w.active]
        assert len(active) <= self.limit
        assert len({w.task_id for w in active}) == len(active)

    @invariant()
    def generations_never_go_down_and_sinks_stay(self) -> None:
        for wid, w in self.workers.items():
            assert w.generation >= self.generations.get(wid, 1)
            self.generations[wid] = w.generation
            if wid in self.sinks:
                assert w.status == self.sinks[wid], (wid, self.sinks[wid], w.status)
            if w.status in ("delivered", "blocked"):
                self.sinks[wid] = w.status


TestFleetAgainstTheModel = pytest.mark.timeout(SHRINKING)(FleetMachine.TestCase)
TestFleetAgainstTheModel.settings = settings(
    max_examples=examples(200), stateful_step_count=100, deadline=None
)
