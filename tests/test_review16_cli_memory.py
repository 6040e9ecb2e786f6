"""Review of ``mainspring memory`` (issue #16): what the command prints of a fact's text."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

import mainspring as ms
from mainspring.cli import EXIT_OK

from ._cli_kit import run_cli

#: What a fact's text may hold that a terminal would act on: a screen clear and colours
#: (CSI), a carriage return over the line, a bell, a backspace, DEL, a C1 CSI, a bidi
#: override and a zero-width space.
NASTY = "evil \x1b[2J\x1b[31mred\x1b[0m \rOVER\x07 \x08\x7f \x9b31m \u202eright \u200bzw"


def _remember(store: str, text: str) -> str:
    async def main() -> str:
        async with ms.open_runtime(store=store) as rt:
            return (await rt.memory.remember(text, domain="ops")).id

    return anyio.run(main)


@pytest.fixture(params=["sqlite", "files"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return str(tmp_path / ("s.sqlite3" if request.param == "sqlite" else "files"))


@pytest.mark.parametrize("argv", [["ls"], ["ls", "--all"], ["search", "evil"]])
def test_control_characters_in_a_fact_never_reach_the_terminal_raw(
    store: str, argv: list[str]
) -> None:
    fact_id = _remember(store, NASTY)
    code, out = run_cli("memory", *argv, "--store", store)
    assert code == EXIT_OK
    assert fact_id in out
    for line in out.splitlines():
        assert line.isprintable(), repr(line)
    assert "\\x1b[2J" in out  # shown as what it is, not dropped
    code, out = run_cli("memory", *argv, "--json", "--store", store)
    assert out.isascii()  # JSON escapes them, and keeps the text whole
    found = json.loads(out)
    facts = found if isinstance(found, list) else [hit["fact"] for hit in found["hits"]]
    assert [fact["text"] for fact in facts] == [NASTY]
