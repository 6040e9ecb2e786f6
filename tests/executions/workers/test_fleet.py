"""The worker lifecycle's rules (issue #17), one test each, on the pure functions of
``executions._fleet``: no event loop, no host, records in and records out."""

from __future__ import annotations

import hashlib
from decimal import Decimal
from typing import Any

import attrs
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from mainspring.executions._workers import fleet as fleet
from mainspring.executions._workers.fleet import Expect, Proof, StaleWorker, WorkerRefused, expect
from mainspring.storage import TrailEntry, WorkerRecord, WorkerTask
from mainspring.storage._seam import (
    MAX_TRAIL,
    ProcessIdentity,
    StopIntent,
    Unreadable,
    WorkerFailure,
    sha256_hex,
)
from tests._examples import SHRINKING, examples

D1 = "1" * 64
D2 = "2" * 64
C1 = "c" * 64
PROC = ProcessIdentity(host="h", pid=10, group=10, started=5)


def sha(i: int) -> str:
    return hashlib.sha256(str(i).encode()).hexdigest()


def task(task_id: str = "t1", **changes: Any) -> WorkerTask:
    return attrs.evolve(WorkerTask(id=task_id, step_id="s", updated_at=0.0), **changes)


def assigned(task_id: str = "t1", worker_id: str = "w1") -> tuple[WorkerTask, WorkerRecord]:
    return fleet.assign(task(task_id), [], worker_id, agent_id="a", limit=4, now=1.0)


def starting() -> tuple[WorkerTask, WorkerRecord]:
    t, w = assigned()
    return t, fleet.mark_starting(w, expect(w), session="s1", job="j1", now=2.0)


def running() -> tuple[WorkerTask, WorkerRecord]:
    t, w = starting()
    w, t = fleet.mark_started(w, t, expect(w), PROC, now=3.0)
    return t, w


def intent(delivery: str = D1, contract: str = C1) -> StopIntent:
    return StopIntent(delivery_digest=delivery, contract_digest=contract, expires_at=99.0, at=4.0)


def handing_off() -> tuple[WorkerTask, WorkerRecord]:
    t, w = running()
    return t, fleet.begin_handoff(w, expect(w), intent())


def fenced() -> tuple[WorkerTask, WorkerRecord]:
    t, w = handing_off()
    w, t = fleet.fence(w, t, expect(w), confirmed_dead=True, now=5.0)
    return t, w


def stopped() -> tuple[WorkerTask, WorkerRecord]:
    t, w = running()
    w, t = fleet.mark_stopped(w, t, expect(w), confirmed_dead=True, reason="pause", now=5.0)
    return t, w


def failure(
    cls: str = "tests", fingerprint: str = D1, *, useful: bool = False, **kw: Any
) -> WorkerFailure:
    return WorkerFailure(
        failure_class=cls, fingerprint=fingerprint, useful_progress=useful, at=3.0, **kw
    )


# -- stale beliefs ----------------------------------------------------------------------

#: every write that takes a belief, as a call on (worker, task, belief), from a running worker
WRITES = {
    "mark_starting": lambda w, t, b: fleet.mark_starting(w, b, session="s", job="j", now=9.0),
    "mark_started": lambda w, t, b: fleet.mark_started(w, t, b, PROC, now=9.0),
    "start_failed": lambda w, t, b: fleet.start_failed(w, t, b, now=9.0, digest=None),
    "heartbeat": lambda w, t, b: fleet.heartbeat(w, b, now=9.0),
    "observe": lambda w, t, b: fleet.observe(w, t, b, "exited", now=9.0),
    "takeover": lambda w, t, b: fleet.takeover(
        w, t, b, workers=[w], limit=4, confirmed_dead=True, now=9.0
    ),
    "report_failure": lambda w, t, b: fleet.report_failure(w, b, failure(), now=9.0),
    "repair": lambda w, t, b: fleet.repair(w, b, "fix it", now=9.0),
    "begin_handoff": lambda w, t, b: fleet.begin_handoff(w, b, intent()),
    "fence": lambda w, t, b: fleet.fence(w, t, b, confirmed_dead=True, now=9.0),
    "deliver": lambda w, t, b: fleet.deliver(w, t, b, delivery_digest=D1, now=9.0),
    "mark_stopped": lambda w, t, b: fleet.mark_stopped(
        w, t, b, confirmed_dead=True, reason="r", now=9.0
    ),
    "block": lambda w, t, b: fleet.block(w, t, b, confirmed_dead=True, reason="r", now=9.0),
}


@pytest.mark.parametrize("write", sorted(WRITES))
@pytest.mark.parametrize("wrong", ["id", "generation", "status"])
def test_a_stale_belief_is_refused_with_stale_worker_for_every_write(
    write: str, wrong: str
) -> None:
    t, w = running()
    good = expect(w, "assigned", "starting", "running", "idle", "handing_off", "fenced")
    belief = {
        "id": attrs.evolve(good, worker_id="w2"),
        "generation": attrs.evolve(good, generation=2),
        "status": Expect(w.id, w.generation, frozenset({"stopped", "blocked", "delivered"})),
    }[wrong]
    with pytest.raises(StaleWorker) as caught:
        WRITES[write](w, t, belief)
    assert caught.value.worker_id == w.id


# -- capacity, one active worker per task -------------------------------------------------


def test_capacity_is_the_smaller_of_jobs_and_the_global_maximum() -> None:
    assert fleet.capacity(3, 8) == 3
    assert fleet.capacity(8, 3) == 3
    with pytest.raises(ValueError, match="at least 1"):
        fleet.capacity(0, 3)
    limit = fleet.capacity(5, 2)
    _t1, w1 = assigned("t1", "w1")
    t2, w2 = fleet.assign(task("t2"), [w1], "w2", agent_id="a", limit=limit, now=1.0)
    with pytest.raises(WorkerRefused) as caught:
        fleet.assign(task("t3"), [w1, w2], "w3", agent_id="a", limit=limit, now=1.0)
    assert caught.value.code == "capacity"
    # an inactive worker does not count
    w2, t2 = fleet.mark_stopped(w2, t2, expect(w2), confirmed_dead=True, reason="r", now=2.0)
    fleet.assign(task("t3"), [w1, w2], "w3", agent_id="a", limit=limit, now=1.0)


def test_at_most_one_active_worker_per_task() -> None:
    t, w = assigned()
    with pytest.raises(WorkerRefused) as caught:
        fleet.assign(attrs.evolve(t, state="ready"), [w], "w2", agent_id="a", limit=9, now=1.0)
    assert caught.value.code == "task-busy"


def test_takeover_of_a_stopped_worker_counts_against_capacity_and_the_task() -> None:
    t, w = stopped()
    _, other = assigned("t2", "w2")
    with pytest.raises(WorkerRefused) as caught:
        fleet.takeover(w, t, expect(w), workers=[w, other], limit=1, confirmed_dead=True, now=6.0)
    assert caught.value.code == "capacity"
    rival = attrs.evolve(other, task_id=t.id)  # an active worker of the same task
    with pytest.raises(WorkerRefused) as caught:
        fleet.takeover(w, t, expect(w), workers=[w, rival], limit=9, confirmed_dead=True, now=6.0)
    assert caught.value.code == "task-busy"


def test_a_task_reassigned_to_another_worker_cannot_be_taken_over_by_the_old_one() -> None:
    t, w = stopped()
    t, w2 = fleet.assign(t, [w], "w2", agent_id="a", limit=9, now=6.0)
    with pytest.raises(WorkerRefused) as caught:
        fleet.takeover(w, t, expect(w), workers=[w, w2], limit=9, confirmed_dead=True, now=7.0)
    assert caught.value.code == "wrong-task"


# -- generations and takeover ---------------------------------------------------------------


def test_generation_starts_at_one_and_takeover_adds_one_only_when_confirmed_dead() -> None:
    t, w = running()
    assert w.generation == 1
    with pytest.raises(WorkerRefused) as caught:
        fleet.takeover(w, t, expect(w), workers=[w], limit=1, confirmed_dead=False, now=6.0)
    assert caught.value.code == "not-dead"
    new, t2 = fleet.takeover(w, t, expect(w), workers=[w], limit=1, confirmed_dead=True, now=6.0)
    assert (new.generation, new.status, new.process, new.session) == (2, "assigned", None, None)
    assert (t2.state, t2.worker_id) == ("ready", w.id)
    with pytest.raises(StaleWorker):  # the old generation's owner is stale now
        fleet.heartbeat(new, expect(w), now=7.0)


def test_takeover_is_refused_for_a_task_blocked_for_good() -> None:
    t, w = running()
    w, t = fleet.mark_stopped(
        w, t, expect(w), confirmed_dead=True, reason="stop-task", task_state="blocked", now=5.0
    )
    with pytest.raises(WorkerRefused) as caught:
        fleet.takeover(w, t, expect(w), workers=[w], limit=1, confirmed_dead=True, now=6.0)
    assert caught.value.code == "illegal-move"


@pytest.mark.parametrize("make", [fenced, lambda: (running()[0], _blocked())])
def test_fenced_delivered_and_blocked_workers_are_not_taken_over(make: Any) -> None:
    t, w = make()
    with pytest.raises(WorkerRefused):
        fleet.takeover(w, t, expect(w), workers=[w], limit=1, confirmed_dead=True, now=6.0)


def _blocked() -> WorkerRecord:
    t, w = running()
    return fleet.block(w, t, expect(w), confirmed_dead=True, reason="r", now=5.0)[0]


# -- two-phase start --------------------------------------------------------------------------


def test_start_is_two_phase_with_a_lease_then_the_process_identity() -> None:
    t, w = starting()
    assert (w.status, w.session, w.job, w.process) == ("starting", "s1", "j1", None)
    assert w.lease_expires_at == 2.0 + 30.0
    w, t = fleet.mark_started(w, t, expect(w), PROC, now=3.0)
    assert (w.status, w.process, t.state, t.attempts) == ("running", PROC, "running", 1)


def test_a_worker_stopped_while_starting_makes_mark_started_stale() -> None:
    t, w = starting()
    belief = expect(w, "starting")
    w, t = fleet.mark_stopped(w, t, belief, confirmed_dead=True, reason="pause", now=3.0)
    with pytest.raises(StaleWorker):
        fleet.mark_started(w, t, belief, PROC, now=4.0)


def test_a_starting_worker_is_not_started_again_without_a_takeover() -> None:
    _t, w = starting()
    with pytest.raises(WorkerRefused) as caught:
        fleet.mark_starting(w, expect(w), session="s2", job="j2", now=3.0)
    assert caught.value.code == "illegal-move"


def test_mark_started_needs_a_starting_worker_whatever_the_caller_believes() -> None:
    t, w = running()
    other = ProcessIdentity(host="h", pid=99, group=99)
    with pytest.raises(WorkerRefused):
        fleet.mark_started(w, t, expect(w), other, now=4.0)


def test_a_failed_start_blocks_the_worker_native_start_and_readies_the_task() -> None:
    t, w = starting()
    w, t = fleet.start_failed(w, t, expect(w), now=3.0, digest=D2)
    assert (w.status, w.reason, w.lease_expires_at) == ("blocked", "native-start", None)
    assert w.failure is not None
    assert w.failure.failure_class == "native-start"
    assert w.failure.diagnostic_digest == D2
    assert (t.state, t.reason) == ("ready", "native-start")


def test_start_failed_on_a_running_worker_is_refused() -> None:
    t, w = running()  # its process is alive: blocking it would free the task for a second one
    with pytest.raises(WorkerRefused):
        fleet.start_failed(w, t, expect(w), now=4.0, digest=None)


# -- heartbeat and observe ------------------------------------------------------------------


def test_heartbeat_lease_bounds_and_default() -> None:
    _t, w = running()
    assert w.lease == 30.0
    assert fleet.heartbeat(w, expect(w), now=10.0).lease_expires_at == 40.0
    assert fleet.heartbeat(w, expect(w), now=10.0, lease=1).lease_expires_at == 11.0
    assert fleet.heartbeat(w, expect(w), now=10.0, lease=600).lease_expires_at == 610.0
    for bad in (0.5, 601, float("nan")):
        with pytest.raises(ValueError, match="lease"):
            fleet.heartbeat(w, expect(w), now=10.0, lease=bad)
    with pytest.raises(ValueError, match="lease"):
        fleet.assign(task(), [], "w", agent_id="a", limit=1, now=0.0, lease=0)


def test_heartbeat_of_a_worker_no_longer_active_is_refused() -> None:
    _t, w = stopped()
    with pytest.raises(WorkerRefused) as caught:
        fleet.heartbeat(w, expect(w), now=10.0)
    assert caught.value.code == "not-live"


def test_observe_maps_running_idle_and_exited() -> None:
    t, w = running()
    idle, _ = fleet.observe(w, t, expect(w), "idle", now=4.0)
    assert idle.status == "idle"
    back, _ = fleet.observe(idle, t, expect(idle), "running", now=5.0)
    assert back.status == "running"
    same, _ = fleet.observe(w, t, expect(w), "unknown", now=5.0)
    assert same == w
    gone, t2 = fleet.observe(w, t, expect(w), "exited", now=6.0)
    assert (gone.status, gone.reason) == ("stopped", "native-process-exited")
    assert (t2.state, t2.reason) == ("ready", "native-process-exited")
    with pytest.raises(ValueError, match="seen"):
        fleet.observe(w, t, expect(w), "gone", now=6.0)  # type: ignore[arg-type]


def test_a_write_with_another_workers_task_is_refused() -> None:
    _t, w = running()
    with pytest.raises(WorkerRefused) as caught:
        fleet.observe(w, task("t9", worker_id="w9"), expect(w), "exited", now=6.0)
    assert caught.value.code == "wrong-task"


# -- failures and the no-progress rule --------------------------------------------------------


@pytest.mark.parametrize(
    "bad",
    [
        {"fingerprint": "A" * 64},
        {"fingerprint": "1" * 63},
        {"check_id": "a/b"},
        {"pin_id": ""},
        {"diagnostic_digest": "xyz"},
        {"progress_digest": D1[:-1] + "G"},
        {"failure_class": "Bad Class"},
    ],
)
def test_failure_ids_and_digests_are_validated_at_construction(bad: dict[str, Any]) -> None:
    fields: dict[str, Any] = {"failure_class": "tests", "fingerprint": D1} | bad
    with pytest.raises(ValueError, match=next(iter(bad))):
        WorkerFailure(**fields)


def test_two_identical_failures_without_progress_say_stop() -> None:
    t, w = running()
    w, stop = fleet.report_failure(w, expect(w), failure(), now=4.0)
    assert not stop
    w, stop = fleet.report_failure(w, expect(w), failure(), now=5.0)
    assert stop
    w, t = fleet.block(w, t, expect(w), confirmed_dead=True, reason="no-progress:tests", now=6.0)
    assert (w.status, t.state, t.reason) == ("blocked", "blocked", "no-progress:tests")


def test_a_different_failure_or_useful_progress_resets_the_count() -> None:
    _t, w = running()
    w, _ = fleet.report_failure(w, expect(w), failure(), now=4.0)
    w, stop = fleet.report_failure(w, expect(w), failure(fingerprint=D2), now=5.0)
    assert not stop
    w, stop = fleet.report_failure(w, expect(w), failure(fingerprint=D2, useful=True), now=6.0)
    assert not stop
    w, stop = fleet.report_failure(w, expect(w), failure(fingerprint=D2), now=7.0)
    assert not stop  # the one before made useful progress
    w, stop = fleet.report_failure(w, expect(w), failure(fingerprint=D2), now=8.0)
    assert stop


def test_a_failure_is_reported_only_for_a_live_worker() -> None:
    _t, w = stopped()
    with pytest.raises(WorkerRefused) as caught:
        fleet.report_failure(w, expect(w), failure(), now=6.0)
    assert caught.value.code == "not-live"


# -- repair ---------------------------------------------------------------------------------


def test_repair_is_trimmed_bounded_and_only_its_digest_kept() -> None:
    _t, w = running()
    w2, text, digest = fleet.repair(w, expect(w), "  fix the test\n", now=4.0)
    assert text == "fix the test"
    assert digest == hashlib.sha256(b"fix the test").hexdigest() == w2.repair_digest
    assert "fix the test" not in repr(w2)
    fleet.repair(w, expect(w), "x" * fleet.MAX_REPAIR, now=4.0)
    for bad in ("", "   \n", "x" * (fleet.MAX_REPAIR + 1), "a\x00b", "\ud800"):
        with pytest.raises(WorkerRefused) as caught:
            fleet.repair(w, expect(w), bad, now=4.0)
        assert caught.value.code == "bad-repair"


# -- handoff ----------------------------------------------------------------------------------


def test_handoff_begins_fences_once_dead_and_delivers() -> None:
    t, w = handing_off()
    assert (w.status, w.intent) == ("handing_off", intent())
    with pytest.raises(WorkerRefused) as caught:
        fleet.fence(w, t, expect(w), confirmed_dead=False, now=5.0)
    assert caught.value.code == "not-dead"
    w, t = fleet.fence(w, t, expect(w), confirmed_dead=True, now=5.0)
    assert (w.status, t.state) == ("fenced", "awaiting_delivery")
    w, t = fleet.deliver(w, t, expect(w), delivery_digest=D1, now=6.0)
    assert (w.status, t.state, t.delivery_digest, w.delivered_digest) == (
        "delivered",
        "delivered",
        D1,
        D1,
    )


def test_each_handoff_step_repeated_with_the_same_digests_changes_nothing() -> None:
    t, w = handing_off()
    assert fleet.begin_handoff(w, expect(w, "running"), intent()) == w
    t, w = fenced()
    assert fleet.begin_handoff(w, expect(w, "running"), intent()) == w
    assert fleet.fence(w, t, expect(w, "handing_off"), confirmed_dead=False, now=9.0) == (w, t)
    w, t = fleet.deliver(w, t, expect(w), delivery_digest=D1, now=6.0)
    assert fleet.deliver(w, t, expect(w, "fenced"), delivery_digest=D1, now=9.0) == (w, t)
    assert fleet.fence(w, t, expect(w, "handing_off"), confirmed_dead=True, now=9.0) == (w, t)


def test_each_handoff_step_repeated_with_other_digests_is_refused() -> None:
    t, w = handing_off()
    for other in (intent(delivery=D2), intent(contract=D2)):
        with pytest.raises(WorkerRefused) as caught:
            fleet.begin_handoff(w, expect(w, "running"), other)
        assert caught.value.code == "digest-mismatch"
    t, w = fenced()
    with pytest.raises(WorkerRefused) as caught:
        fleet.deliver(w, t, expect(w), delivery_digest=D2, now=6.0)
    assert caught.value.code == "digest-mismatch"
    w, t = fleet.deliver(w, t, expect(w), delivery_digest=D1, now=6.0)
    with pytest.raises(WorkerRefused) as caught:
        fleet.deliver(w, t, expect(w, "fenced"), delivery_digest=D2, now=6.0)
    assert caught.value.code == "digest-mismatch"


def test_a_stale_deliver_is_stale_not_a_digest_mismatch() -> None:
    t, w = running()
    old = expect(w, "fenced")
    w, t = fleet.takeover(w, t, expect(w), workers=[w], limit=1, confirmed_dead=True, now=5.0)
    with pytest.raises(StaleWorker):
        fleet.deliver(w, t, old, delivery_digest=D1, now=6.0)


# -- stop and block ---------------------------------------------------------------------------


@pytest.mark.parametrize("make", [assigned, starting, running, handing_off])
def test_mark_stopped_and_block_require_confirmed_death(make: Any) -> None:
    t, w = make()
    for call in (
        lambda: fleet.mark_stopped(w, t, expect(w), confirmed_dead=False, reason="r", now=5.0),
        lambda: fleet.block(w, t, expect(w), confirmed_dead=False, reason="r", now=5.0),
    ):
        with pytest.raises(WorkerRefused) as caught:
            call()
        assert caught.value.code == "not-dead"
    w2, t2 = fleet.mark_stopped(w, t, expect(w), confirmed_dead=True, reason="r", now=5.0)
    assert (w2.status, t2.state) == ("stopped", "ready")


@pytest.mark.parametrize("make", [stopped, lambda: (running()[0], _blocked()), fenced])
def test_stopped_blocked_and_fenced_workers_are_not_stopped_or_blocked_again(make: Any) -> None:
    t, w = make()
    with pytest.raises(WorkerRefused) as caught:
        fleet.block(w, t, expect(w), confirmed_dead=True, reason="again", now=9.0)
    assert caught.value.code in ("illegal-move", "wrong-task")
    with pytest.raises(WorkerRefused):
        fleet.mark_stopped(w, t, expect(w), confirmed_dead=True, reason="again", now=9.0)


# -- usage ------------------------------------------------------------------------------------


def test_usage_is_added_only_while_generation_session_and_job_match() -> None:
    _t, w = running()
    w = fleet.add_usage(
        w, generation=1, session="s1", job="j1", input_tokens=3, output_tokens=4, now=4.0
    )
    w = fleet.add_usage(w, generation=1, session="s1", job="j1", cost=Decimal("0.5"), now=5.0)
    (epoch,) = w.usage
    assert (epoch.input_tokens, epoch.output_tokens, epoch.total_tokens) == (3, 4, 7)
    assert epoch.cost == Decimal("0.5")
    for stale in ({"generation": 2}, {"session": "s2"}, {"job": "j2"}):
        key: dict[str, Any] = {"generation": 1, "session": "s1", "job": "j1"} | stale
        with pytest.raises(WorkerRefused) as caught:
            fleet.add_usage(w, **key, input_tokens=1, now=6.0)
        assert caught.value.code == "stale-usage"


def test_usage_counts_are_not_negative() -> None:
    _t, w = running()
    w = fleet.add_usage(w, generation=1, session="s1", job="j1", input_tokens=10, now=4.0)
    with pytest.raises(ValueError, match="input_tokens"):
        fleet.add_usage(w, generation=1, session="s1", job="j1", input_tokens=-5, now=5.0)
    with pytest.raises(ValueError, match="cost"):
        fleet.add_usage(w, generation=1, session="s1", job="j1", cost=Decimal(-1), now=5.0)


# -- finalize ---------------------------------------------------------------------------------

RECEIPT = {"run": "r1", "tasks": ["t1"], "delivery": D1}


def proof(**changes: Any) -> Proof:
    fields: dict[str, Any] = {
        "verification": "passed",
        "review": "passed",
        "receipt": RECEIPT,
        "receipt_digest": sha256_hex(RECEIPT),
    } | changes
    return Proof(**fields)


def delivered() -> tuple[WorkerTask, WorkerRecord]:
    t, w = fenced()
    w, t = fleet.deliver(w, t, expect(w), delivery_digest=D1, now=6.0)
    return t, w


def test_finalize_returns_the_proofs_digest() -> None:
    t, w = delivered()
    p = proof()
    digest = fleet.finalize([t], [w], p)
    assert digest == sha256_hex(
        {
            "verification": "passed",
            "review": "passed",
            "receipt": RECEIPT,
            "receipt_digest": sha256_hex(RECEIPT),
        }
    )
    assert fleet.finalize([t], [w], proof()) == digest


@pytest.mark.parametrize(
    "changes",
    [
        {"verification": "failed"},
        {"review": "failed"},
        {"receipt_digest": D2},
        {"receipt": {"run": "r2"}},
    ],
)
def test_finalize_refuses_a_proof_that_does_not_hold(changes: dict[str, Any]) -> None:
    t, w = delivered()
    with pytest.raises(WorkerRefused) as caught:
        fleet.finalize([t], [w], proof(**changes))
    assert caught.value.code == "proof"


def test_finalize_refuses_while_a_task_is_not_delivered() -> None:
    t, w = delivered()
    t2, w2 = stopped()
    t2 = attrs.evolve(t2, id="t2")
    with pytest.raises(WorkerRefused) as caught:
        fleet.finalize([t, t2], [w, w2], proof())
    assert caught.value.code == "proof"


def test_finalize_refuses_while_a_worker_is_active() -> None:
    t, w = delivered()
    _, live = assigned("t2", "w2")
    with pytest.raises(WorkerRefused) as caught:
        fleet.finalize([t], [w, live], proof())
    assert caught.value.code == "active-writer"


def test_a_proof_is_validated_at_construction() -> None:
    for bad in ({"verification": "ok"}, {"receipt_digest": "x"}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            proof(**bad)
    with pytest.raises(TypeError):
        proof(receipt=["not", "a", "mapping"])


# -- the trail --------------------------------------------------------------------------------


def entry(seq: int) -> TrailEntry:
    return TrailEntry(
        seq=seq, at=float(seq), worker_id="w1", generation=1, event="started", status="running"
    )


@pytest.mark.untraced  # its size is the point, not its lines (tests/conftest.py)
def test_the_trail_keeps_the_last_2000_entries_in_seq_order() -> None:
    trail: tuple[Any, ...] = ()
    assert fleet.next_trail_seq(trail) == 1
    for _ in range(MAX_TRAIL + 5):
        trail = fleet.trail_append(trail, entry(fleet.next_trail_seq(trail)))
    assert len(trail) == MAX_TRAIL == 2_000
    assert [e.seq for e in trail] == list(range(6, MAX_TRAIL + 6))
    assert trail[-1].status == "running"
    assert trail[-1].event == "started"
    assert fleet.next_trail_seq(trail) == MAX_TRAIL + 6


def test_a_trail_entry_must_come_after_the_trail() -> None:
    trail = fleet.trail_append((), entry(5))
    for seq in (5, 4):
        with pytest.raises(ValueError, match="seq"):
            fleet.trail_append(trail, entry(seq))
    assert len(fleet.trail_append(trail, entry(9))) == 2


def test_a_trail_entry_must_come_after_the_next_seq_the_caller_keeps() -> None:
    trail = fleet.trail_append((), entry(5), next_seq=1)
    with pytest.raises(ValueError, match="seq"):
        fleet.trail_append(trail, entry(5), next_seq=6)
    assert fleet.trail_append(trail, entry(6), next_seq=6)[-1].seq == 6  # type: ignore[union-attr]


def test_E8_an_unreadable_trail_entry_out_of_range_does_not_stop_the_trail() -> None:
    """A trail entry unreadable because its seq is out of range (a counter past 1,000,000)
    fails closed on its own (E8): the next entry still gets a seq a trail entry can hold,
    so the run's workers can still be recorded."""
    bad = Unreadable(
        raw={
            "seq": 5_000_000,
            "at": 1.0,
            "worker_id": "w1",
            "generation": 1,
            "event": "beat",
            "status": "running",
            "detail": "",
        },
        key="5000000",
    )
    seq = fleet.next_trail_seq((bad,))
    entry = TrailEntry(
        seq=seq, at=2.0, worker_id="w1", generation=1, event="beat", status="running", detail=""
    )
    assert fleet.trail_append((bad,), entry, next_seq=seq)[-1] == entry


# ----------------------------------------------------------------------
# Hypothesis stateful test: random worker operations against a reference model (issue #17).
#
# The machine keeps a small run (three tasks, a capacity of min(jobs, maximum)) twice: as
# records driven through ``executions._fleet``, and as plain dicts driven by :class:`Model`,
# which restates the rules of the issue without calling the module. Each step draws an
# operation and a caller's belief (exact, or stale: another id, an older or newer generation,
# another status) and asserts both sides agree on whether it succeeded and, if not, on which
# error; then that the records match the model, and the invariants: at most one active worker
# per task and ``limit`` per run, generations never go down, nothing is stopped, fenced or
# blocked without its process confirmed dead, delivered and blocked are sinks.

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
PROC_fleet_model = ProcessIdentity(host="h", pid=7, group=7)
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
                wid,
                expected,
                lambda: fleet.mark_started(w, t, belief, PROC_fleet_model, now=self.tick()),
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
