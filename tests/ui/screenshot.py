"""The docs' picture of a run (docs/img/ui-run.png), taken in the headless browser:

    python -m tests.ui.screenshot docs/img/ui-run.png

A run with a research-shaped plan: a step that failed (its dependent skipped), an agent
that asked a question and waits for its answer, steps done before it.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

import mainspring as ms
from tests.ui._browser import open_browser, portal_of, view, wait_for


async def fetch(url: str = "") -> dict[str, Any]:
    return {"pages": 12}


async def lint(**_: Any) -> None:
    raise RuntimeError("lint: 3 errors in src/report.py")


async def count(**_: Any) -> int:
    return 12


async def reviewer(ctx: ms.AgentContext, input: Any) -> str:
    await ctx.step("read", lambda: {"read": 12})
    await ctx.step("outline", lambda: {"sections": 4})
    answer = await ctx.ask("Keep the summary under 200 words?")
    await ctx.step("write", lambda: len(answer))
    return "reviewed"


PLAN = ms.Plan(
    id="research",
    goal="summarise the quarter's incident reports",
    steps=(
        ms.PlanStep(id="fetch", tool="fetch", input={"url": "reports/"}),
        ms.PlanStep(id="count", tool="count", depends_on=("fetch",)),
        ms.PlanStep(id="lint", tool="lint", depends_on=("fetch",)),
        ms.PlanStep(id="review", agent="reviewer", depends_on=("count",)),
        ms.PlanStep(id="publish", tool="count", depends_on=("lint", "review")),
    ),
)


async def make_run(store: str) -> None:
    tools = {"fetch": fetch, "lint": lint, "count": count}
    async with ms.open_runtime(store=store, tools=tools, agents={"reviewer": reviewer}) as rt:
        await (await rt.start(PLAN.goal, PLAN, execution_id="ex-research")).wait()


def take(target: Path) -> None:
    with tempfile.TemporaryDirectory() as home, portal_of("asyncio") as portal:
        store = str(Path(home) / "store.sqlite3")
        portal.call(make_run, store)
        with view(portal, store) as ui:
            browser = open_browser(1280, 1100)
            try:
                browser.get(ui.url)
                browser.get(ui.base + "/runs/ex-research")
                wait_for(
                    browser, lambda b: len(b.find_elements("css selector", "#graph g.step")) == 5
                )
                wait_for(
                    browser,
                    lambda b: (
                        b.execute_script("return document.querySelectorAll('#timeline li').length")
                        > 5
                    ),
                )
                time.sleep(0.3)  # the last redraw settles (a picture, not a test)
                browser.save_screenshot(str(target))
            finally:
                browser.quit()


if __name__ == "__main__":
    anyio  # noqa: B018 (imported for the portal's backends)
    take(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/img/ui-run.png"))
