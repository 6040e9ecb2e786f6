"""The actor lifecycle table, without an event loop (STYLE.md, habit 11)."""

from __future__ import annotations

import itertools

import pytest

from mainspring import IllegalTransition
from mainspring.actors._lifecycle import ActorState, check_transition

LEGAL = {
    (ActorState.STARTING, ActorState.RUNNING),
    (ActorState.STARTING, ActorState.STOPPING),
    (ActorState.RUNNING, ActorState.STOPPING),
    (ActorState.STOPPING, ActorState.STOPPED),
    (ActorState.STOPPING, ActorState.RESTARTING),
    (ActorState.RESTARTING, ActorState.STARTING),
    (ActorState.RESTARTING, ActorState.STOPPED),
}


@pytest.mark.parametrize(("current", "new"), list(itertools.product(ActorState, ActorState)))
def test_only_the_table_s_transitions_are_allowed(current: ActorState, new: ActorState) -> None:
    if (current, new) in LEGAL:
        assert check_transition(current, new) is new
    else:
        with pytest.raises(IllegalTransition):
            check_transition(current, new)


def test_the_kernel_raises_the_class_the_execution_tables_raise() -> None:
    # One IllegalTransition for every lifecycle (tests/executions/rules/test_lifecycle.py
    # holds the execution, step, task and worker tables to the same class).
    with pytest.raises(IllegalTransition) as caught:
        check_transition(ActorState.STOPPED, ActorState.RUNNING, "/a/b")
    assert (caught.value.kind, caught.value.name) == ("actor", "/a/b")
    assert (caught.value.old, caught.value.new) == ("stopped", "running")
