"""What ``mainspring show`` says about replay (E10): outputs stored redacted and inner steps
that ran again because of it are listed; ``--json`` prints values in the typed encoding."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import anyio

import mainspring as ms

from ._cli_kit import run_cli


def _make_store(path: Path) -> None:
    async def creds() -> dict[str, Any]:
        return {"api_key": "k-live-123456", "when": dt.datetime(2024, 1, 2), "ids": {1, 2}}

    async def worker(ctx: ms.AgentContext, input: Any) -> str:
        await ctx.step("login", lambda: {"token": "live-token-1"})
        return await ctx.ask("go on?")

    async def build() -> None:
        options: dict[str, Any] = {"tools": {"creds": creds}, "agents": {"worker": worker}}
        async with ms.open_runtime(store=path, **options) as rt:
            plan = ms.Plan(id="p", goal="g", steps=(
                ms.PlanStep(id="creds", tool="creds"),
                ms.PlanStep(id="a", agent="worker", depends_on=("creds",)),
            ))  # fmt: skip
            first = await (await rt.start("g", plan, execution_id="ex-1")).wait()
            assert first.status == "waiting_for_clarification"
        # Another runtime has only the mask of login's result: login runs again there.
        async with ms.open_runtime(store=path, **options) as rt:
            await (await rt.resume("ex-1", answer="yes")).wait()

    anyio.run(build)


def test_show_lists_redacted_outputs_and_steps_that_ran_again(tmp_path: Path) -> None:
    store = tmp_path / "s.sqlite3"
    _make_store(store)
    code, out = run_cli("show", "ex-1", "--store", str(store))
    assert code == 0
    notes = out.split("\nnotes\n")[1].split("\n\n")[0].splitlines()
    assert notes == [
        "  step creds: its stored output is redacted, not what it returned",
        "  task ex-1:t1: inner step login ran again on resume: its stored result had been redacted",
    ]
    assert "live" not in out
    code, out = run_cli("show", "ex-1", "--store", str(store), "--json")
    (creds,) = [o for o in json.loads(out)["observations"] if o["step_id"] == "creds"]
    assert creds["redacted"] is True
    assert creds["output"] == {
        "api_key": "[redacted secret]",
        "ids": {"$ms": "set", "v": [1, 2]},
        "when": {"$ms": "datetime", "v": "2024-01-02T00:00:00"},
    }
