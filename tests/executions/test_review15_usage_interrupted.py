"""Review of B3: a skill whose model call returned while its run was being paused has spent
what it reports; that usage is accounting and must not be dropped with the step's result."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import anyio
import pytest

import mainspring as ms
from mainspring.executions import WithUsage
from mainspring.storage import Usage
from tests.executions._kit import plan_of, runtime, skill, stored

pytestmark = pytest.mark.anyio

SPENT = Usage(input_tokens=10, output_tokens=5, cost=Decimal("0.5"))


@pytest.mark.parametrize("control", ["pause", "cancel"])
async def test_B3_a_skill_that_finishes_its_call_during_a_pause_or_cancel_is_charged(
    tmp_path: Path, control: str
) -> None:
    """Its result arrives while the run stops, too late to be handled: the step runs again
    on resume (its call count is the resume's), but what the finished call spent is kept."""
    entered = anyio.Event()

    async def chat(**_: Any) -> WithUsage:
        # The model call is shielded (a skill that will not waste a started call): it
        # finishes once the pause has reached it, and returns what it spent.
        with anyio.CancelScope(shield=True):
            entered.set()
            while ms.cancel_reason() is None:
                await anyio.lowlevel.checkpoint()
        return WithUsage("said", usage=SPENT)

    async with runtime(tmp_path, skills={"chat": chat}) as rt:
        handle = await rt.start("g", plan_of(skill("a", "chat")))
        with anyio.fail_after(30):
            await entered.wait()
            await getattr(rt, control)(handle.execution_id)
            result = await handle.wait()
        record = stored(rt, handle.execution_id)
    assert result.status == {"pause": "paused", "cancel": "cancelled"}[control]
    assert result.usage == SPENT
    assert record.usage == SPENT  # the call was made and returned its usage (B3, E9)
