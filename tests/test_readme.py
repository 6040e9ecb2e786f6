"""The README's examples run, on both backends, and print what their comments say; the README
stays a front door (short, linking into docs/), and the supervision example that moved to
docs/explanation/actors.md runs there."""

from __future__ import annotations

import pathlib
import re

import anyio
import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
ACTORS = ROOT / "docs" / "explanation" / "actors.md"


def _blocks(page: pathlib.Path) -> list[str]:
    return [str(b) for b in re.findall(r"```python\n(.*?)```", page.read_text(), re.DOTALL)]


def _example(index: int = 0, page: pathlib.Path = README) -> str:
    blocks = _blocks(page)
    assert len(blocks) > index, f"{page.name} lost an example"
    return blocks[index]


@pytest.mark.parametrize("page", [README, ACTORS], ids=["readme", "docs"])
@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_readme_example_runs(
    backend: str, page: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = _example(0, page).replace("anyio.run(main)", "pass")
    namespace: dict[str, object] = {"__name__": "readme_example"}
    exec(compile(source, str(README), "exec"), namespace)
    anyio.run(namespace["main"], backend=backend)  # type: ignore[arg-type]
    out = capsys.readouterr().out.splitlines()
    assert out == [
        "0.01",
        "/counter interrupted: it was paused: user pressed pause",
        "/counter stopped: it was paused: user pressed pause",
        "it was paused: user pressed pause",
    ]


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_readme_supervision_example_runs(
    backend: str, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    (source,) = [block for block in _blocks(ACTORS) if "spawn_supervisor" in block]
    source = source.replace("anyio.run(main)", "pass")
    namespace: dict[str, object] = {"__name__": "readme_example"}
    exec(compile(source, str(ACTORS), "exec"), namespace)
    anyio.run(namespace["main"], backend=backend)  # type: ignore[arg-type]
    assert capsys.readouterr().out.splitlines() == [
        "/crawler/fetcher (re)started",
        "failed: unparseable page",
        "/crawler/fetcher (re)started",
        "fetched ok",
        "[('fetcher', 'running', 1)]",
    ]
    assert "actor /crawler/fetcher crashed" in caplog.text  # no failure passes silently


def test_readme_quick_start_is_two_commands() -> None:
    text = README.read_text()
    section = text.split("## Quick start", 1)[1].split("##", 1)[0]
    commands = re.findall(r"```sh\n(.*?)```", section, flags=re.DOTALL)[0].strip().splitlines()
    assert len(commands) == 2
    assert "mainspring demo" in commands[0]
    assert "pytest" in commands[1]


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_readme_durable_example_runs(
    backend: str, capsys: pytest.CaptureFixture[str], tmp_path: pathlib.Path
) -> None:
    source = _example(1)
    expected = [line[2:] for line in source.splitlines() if line.startswith("# ")]
    source = source.replace('anyio.run(main, "/tmp/mainspring-readme.sqlite3")', "pass")
    namespace: dict[str, object] = {"__name__": "readme_example"}
    exec(compile(source, str(README), "exec"), namespace)
    anyio.run(namespace["main"], tmp_path / "s.sqlite3", backend=backend)  # type: ignore[arg-type]
    assert capsys.readouterr().out.splitlines() == expected


def test_readme_is_a_front_door_linking_into_the_docs() -> None:
    text = README.read_text()
    assert len(text.splitlines()) <= 250
    for heading in ("## Install", "## Quick start", "## An actor", "## A durable run"):
        assert heading in text
    assert "pip install mainspring" in text
    targets = re.findall(r"\]\((docs/[^)#]+)(?:#[^)]*)?\)", text)
    assert len(targets) >= 20, targets
    for target in targets:
        assert (ROOT / target).is_file(), f"README links to {target}, which is not there"
    # Invariant ids appear in user text only as links to the legend (docs/explanation).
    prose = re.sub(r"```.*?```", "", text, flags=re.DOTALL)
    assert not re.search(r"\((?:[EPRSLVXBOU]\d{1,2})\)", prose)
