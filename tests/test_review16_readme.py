"""Review of the README's memory section (issue #16): its snippet runs as written."""

from __future__ import annotations

import pathlib
import re

import anyio
import pytest

import mainspring as ms

README = pathlib.Path(__file__).resolve().parent.parent / "README.md"


def _memory_snippet() -> str:
    text = README.read_text()
    section = text.split("\n## Memory\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)
    assert blocks, "the README's memory section lost its example"
    return str(blocks[0])


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_the_readme_memory_agent_runs_and_finds_what_it_remembered(
    backend: str, tmp_path: pathlib.Path
) -> None:
    namespace: dict[str, object] = {"__name__": "readme_memory"}
    exec(compile(_memory_snippet(), str(README), "exec"), namespace)
    agent = namespace["onboarding"]

    async def main() -> object:
        async with ms.open_runtime(store=tmp_path / "s.sqlite3", agents={"a": agent}) as rt:
            step = ms.PlanStep(id="s", agent="a", input={})
            result = await (await rt.start("g", ms.Plan(id="p", goal="g", steps=(step,)))).wait()
            assert result.status == "completed", result
            return result.outputs["s"]

    assert anyio.run(main, backend=backend) == ["deploys use canary releases"]
