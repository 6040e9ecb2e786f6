"""Cancel reasons are frozen values that read as sentences."""

from __future__ import annotations

import pickle

import attrs
import pytest
from hypothesis import given

import mainspring as ms

from ..strategies import reasons


def test_reasons_are_frozen_keyword_values() -> None:
    reason = ms.Pause(detail="lunch")
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        reason.detail = "other"  # type: ignore[misc]
    with pytest.raises(TypeError):
        ms.Pause("lunch")  # type: ignore[misc]
    assert isinstance(reason.at, float)
    # Equality ignores the timestamp: the same reason made twice compares equal.
    assert ms.Cancel(detail="x") == ms.Cancel(detail="x")


def test_positional_payloads_and_kinds() -> None:
    crash = ms.Crash("ValueError: boom")
    lost = ms.LeaseLost("host-b:7:ff")
    parent = ms.ParentCancel(crash, source="/a")
    assert (crash.error, lost.owner, parent.cause) == ("ValueError: boom", "host-b:7:ff", crash)
    kinds = {
        cls.kind
        for cls in (
            *(ms.Stop, ms.Pause, ms.Cancel, ms.ParentCancel, ms.Shutdown, ms.Crash),
            *(ms.Timeout, ms.LeaseLost, ms.BudgetExhausted),
        )
    }
    assert len(kinds) == 9


@pytest.mark.parametrize(
    ("reason", "sentence"),
    [
        (ms.Pause(detail="user request"), "it was paused: user request"),
        (ms.Cancel(), "it was cancelled"),
        (ms.Cancel(detail="x", source="cli"), "it was cancelled: x (by cli)"),
        (ms.Shutdown(), "the system is shutting down"),
        (ms.Timeout(detail="30 s"), "its time ran out: 30 s"),
        (ms.BudgetExhausted(), "its budget is exhausted"),
        (ms.Crash("KeyError: 'a'"), "it crashed with KeyError: 'a'"),
        (ms.LeaseLost("h:1:a"), "it lost its lease to h:1:a"),
        (ms.LeaseLost(""), "it lost its lease to an unknown owner"),
        (ms.Stop(), "it was asked to stop"),
        (
            ms.ParentCancel(ms.ParentCancel(ms.Pause(detail="lunch"), source="/a"), source="/a/b"),
            "its parent /a/b stopped because its parent /a stopped because it was paused (lunch)",
        ),
    ],
)
def test_reasons_render_as_sentences(reason: ms.CancelReason, sentence: str) -> None:
    assert str(reason) == sentence


def test_crash_from_exception_holds_no_live_exception() -> None:
    crash = ms.Crash.from_exception(ValueError("bad input"), source="/x")
    assert crash.error == "ValueError: bad input"
    assert ms.Crash.from_exception(KeyboardInterrupt()).error == "KeyboardInterrupt"
    # The type is a field of its own: code matches on it without parsing the text.
    assert (crash.error_type, crash.module) == ("ValueError", "builtins")

    class Odd(Exception):
        pass

    odd = ms.Crash.from_exception(Odd("a: b"))
    assert odd.error_type.endswith("Odd")
    assert odd.module == __name__
    assert odd.error == f"{odd.error_type}: a: b"
    assert all(isinstance(value, str | float) for value in attrs.astuple(crash))


@given(reasons)
def test_root_walks_the_whole_chain_and_reasons_round_trip(reason: ms.CancelReason) -> None:
    link = reason
    while isinstance(link, ms.ParentCancel):
        link = link.cause
    assert reason.root is link
    assert not isinstance(reason.root, ms.ParentCancel)
    assert pickle.loads(pickle.dumps(reason)) == reason
    assert hash(reason) == hash(pickle.loads(pickle.dumps(reason)))
    assert str(reason)  # always renders
