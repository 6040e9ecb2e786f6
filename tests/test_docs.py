"""The docs' getting-started pages run as written, on asyncio and trio, and print what their
comments say; the manual's other examples run too (moved here with their pages from the
README's tests)."""

from __future__ import annotations

import functools
import gc
import importlib
import pathlib
import re
import textwrap
import warnings
from typing import Any

import anyio
import pytest

import mainspring as ms

DOCS = pathlib.Path(__file__).resolve().parent.parent / "docs"
GETTING_STARTED = sorted((DOCS / "getting-started").glob("*.md"))
BACKENDS = ["asyncio", "trio"]


def python_blocks(page: pathlib.Path) -> list[str]:
    return [str(b) for b in re.findall(r"```python\n(.*?)```", page.read_text(), re.DOTALL)]


def printed(block: str) -> list[str]:
    """What a block says it prints: the ``# `` lines after its last ``anyio.run(...)``."""
    lines = block.splitlines()
    runs = [i for i, line in enumerate(lines) if line.startswith("anyio.run(")]
    if not runs:
        return []
    return [line[2:] for line in lines[runs[-1] + 1 :] if line.startswith("# ")]


def test_there_are_getting_started_pages_with_code() -> None:
    names = {page.name for page in GETTING_STARTED}
    assert {"index.md", "fastapi-tool.md", "skill-usage.md", "ask-a-human.md"} <= names
    for page in GETTING_STARTED:
        assert python_blocks(page), f"{page.name} lost its examples"


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("page", GETTING_STARTED, ids=lambda p: p.stem)
def test_every_getting_started_block_runs_and_prints_what_it_says(
    page: pathlib.Path,
    backend: str,
    tmp_path: pathlib.Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    blocks = python_blocks(page)
    if any("fastapi" in block for block in blocks):
        pytest.importorskip("fastapi")
        pytest.importorskip("httpx")
    monkeypatch.chdir(tmp_path)  # relative store paths land here
    monkeypatch.setenv("MAINSPRING_HOME", str(tmp_path / "home"))  # so does the default store
    namespace: dict[str, object] = {"__name__": f"docs_{page.stem.replace('-', '_')}"}
    run = functools.partial(anyio.run, backend=backend)
    for number, block in enumerate(blocks):
        source = re.sub(r"^anyio\.run\(", "__run__(", block, flags=re.MULTILINE)
        namespace["__run__"] = run
        exec(compile(source, f"{page.name}, block {number + 1}", "exec"), namespace)
        out = capsys.readouterr().out.splitlines()
        assert out == printed(block), f"{page.name}, block {number + 1}"


# -- the manual's other examples (moved with their sections from the README) ----------------


def _section_blocks(page: pathlib.Path) -> list[str]:
    blocks = python_blocks(page)
    assert blocks, f"{page.name} lost its example"
    return blocks


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_memory_agent_runs_and_finds_what_it_remembered(
    backend: str, tmp_path: pathlib.Path
) -> None:
    page = DOCS / "how-to" / "memory.md"
    namespace: dict[str, object] = {"__name__": "docs_memory"}
    exec(compile(_section_blocks(page)[0], str(page), "exec"), namespace)
    agent = namespace["onboarding"]

    async def main() -> object:
        async with ms.open_runtime(store=tmp_path / "s.sqlite3", agents={"a": agent}) as rt:
            step = ms.PlanStep(id="s", agent="a", input={})
            result = await (await rt.start("g", ms.Plan(id="p", goal="g", steps=(step,)))).wait()
            assert result.status == "completed", result
            return result.outputs["s"]

    assert anyio.run(main, backend=backend) == ["deploys use canary releases"]


@pytest.mark.anyio
async def test_the_programs_example_runs_as_a_tool_and_an_agent(tmp_path: pathlib.Path) -> None:
    page = DOCS / "how-to" / "programs.md"
    namespace: dict[str, Any] = {"__name__": "docs_programs"}
    exec(compile(_section_blocks(page)[0], str(page), "exec"), namespace)
    here = tmp_path / "here"
    here.mkdir()
    (here / "a file").write_text("")
    plan = ms.Plan(
        id="p",
        goal="g",
        steps=(
            ms.PlanStep(id="t", tool="sh", input={"argv": ["ls", "-a"], "cwd": str(here)}),
            ms.PlanStep(id="a", agent="lister", input={"dir": str(here)}),
        ),
    )
    async with ms.open_runtime(
        store=tmp_path / "s.sqlite3",
        tools=namespace["tools"],
        agents={"lister": namespace["lister"]},
    ) as rt:
        result = await (await rt.start("g", plan)).wait()
    assert result.status == "completed"
    assert sorted(result.outputs["t"]["stdout"].splitlines()) == [".", "..", "a file"]
    assert result.outputs["a"]["ok"] is True
    assert sorted(result.outputs["a"]["names"]) == [".", "..", "a", "file"]


def _docstring_example(doc: str) -> str:
    """The first indented code block of a docstring, dedented."""
    block = re.search(r"\n\n((?:    .*\n|\n)+)", doc)
    assert block, "the docstring lost its example"
    return textwrap.dedent(block.group(1))


@pytest.mark.anyio
async def test_the_events_namespace_example_matches_a_real_run_and_closes_its_stream(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``help(mainspring.events)`` and its reference page show how to match on the live
    stream: run as written, on asyncio and trio, against a real run, it prints each step as
    it ends, stops at the run's end and closes its subscription then (a stream left to the
    garbage collector after ``break`` is a ResourceWarning on trio: the manual's servers
    guide says to close it)."""
    example = _docstring_example(ms.events.__doc__ or "")
    assert "rt.events()" in example
    assert "break" in example
    namespace: dict[str, Any] = {}
    body = textwrap.indent(example, "    ")
    exec(compile(f"async def watch(rt):\n{body}", "mainspring.events", "exec"), namespace)
    release = anyio.Event()

    async def tool(x: int) -> int:
        await release.wait()  # the watcher subscribes before the step can end
        return x

    plan = ms.Plan(id="p", goal="g", steps=(ms.PlanStep(id="a", tool="t", input={"x": 1}),))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        async with ms.open_runtime(store=tmp_path / "s.sqlite3", tools={"t": tool}) as rt:
            run = await rt.start("g", plan)
            async with anyio.create_task_group() as tg:
                tg.start_soon(namespace["watch"], rt)
                await anyio.wait_all_tasks_blocked()  # the watcher waits for its first event
                release.set()
            assert (await run.wait()).status == "completed"
        gc.collect()
    assert capsys.readouterr().out.splitlines() == ["a succeeded"]
    leaked = [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]
    assert leaked == []


# -- invariant ids in user text -------------------------------------------------------------

LEGEND = DOCS / "explanation" / "invariants.md"


def test_every_invariant_id_in_the_docs_links_to_its_legend_entry() -> None:
    legend = set(re.findall(r"\{ #([A-Z]\d{1,2}) \}", LEGEND.read_text()))
    assert {"E1", "E10", "R11", "L4", "V2", "B3", "X2"} <= legend
    for page in DOCS.rglob("*.md"):
        if page == LEGEND:
            continue
        text = re.sub(r"```.*?```", "", page.read_text(), flags=re.DOTALL)  # not in code
        text = re.sub(r"`[^`]*`", "", text)
        links = re.findall(r"\[([A-Z]\d{1,2})\]\(([^)]*)\)", text)
        for code, target in links:
            assert target.endswith(f"invariants.md#{code}"), (page.name, code, target)
            assert code in legend, (page.name, code)
        bare = re.sub(r"\[[A-Z]\d{1,2}\]\([^)]*\)", "", text)
        letters = "".join(sorted({code[0] for code in legend}))
        assert not re.search(rf"(?<![\w./-])[{letters}]\d{{1,2}}(?![\w/-])", bare), page.name


# -- names the manual uses exist ------------------------------------------------------------

NAMESPACES = ("actors", "supervision", "storage", "executions", "events", "testing")


def _named(text: str) -> set[str]:
    """Dotted public names a page writes: ``ms.storage.Usage``, ``mainspring.executions.X``."""
    found = set()
    for prefix, path in re.findall(r"(?<![\w.$/-])(ms|mainspring)((?:\.[A-Za-z_]\w*)+)", text):
        first = path.split(".")[1]
        if prefix == "ms" or first in NAMESPACES or first[0].isupper() or first in ms.__all__:
            found.add(path.lstrip("."))
    return found


def test_every_public_name_the_manual_writes_exists() -> None:
    pages = [*DOCS.rglob("*.md"), DOCS.parent / "README.md"]
    names = set().union(*(_named(page.read_text()) for page in pages))
    assert "storage.Usage" in names  # the check sees what it is meant to see
    missing = []
    for name in sorted(names):
        value: object = ms
        for part in name.split("."):
            if isinstance(value, type(ms)) and part in NAMESPACES:
                value = importlib.import_module(f"{value.__name__}.{part}")
            elif hasattr(value, part):
                value = getattr(value, part)
            else:
                missing.append(name)
                break
    assert not missing, f"the docs name what mainspring no longer has: {missing}"


def test_the_manual_sends_readers_to_Store_for_the_backend_contract() -> None:
    """The backend contract is the docstring of ``mainspring.storage.Store`` (the package
    docstring only summarises it): a page that sends a store author to the package docstring
    sends them to a summary."""
    assert "The contract in full is the docstring of" in (ms.storage.__doc__ or "")
    stale = [
        page.relative_to(DOCS).as_posix()
        for page in DOCS.rglob("*.md")
        if re.search(r"contract \(the `mainspring\.storage` docstring\)", page.read_text())
    ]
    assert not stale, f"pages that say the contract is the package docstring: {stale}"


def test_the_reference_describes_every_public_name() -> None:
    """The API reference is what griffe reads, with the docs' extension: each public name
    must reach it with a description. A function made at import time (``open_system``) and
    a type alias (``RunEvent``) are not classes or defs griffe reads a docstring from."""
    import sys

    griffe = pytest.importorskip("griffe")
    sys.path.insert(0, str(DOCS / "_ext"))
    try:
        from griffe_mainspring import MainspringDocs
    finally:
        sys.path.remove(str(DOCS / "_ext"))
    package = griffe.load(
        "mainspring",
        extensions=griffe.Extensions(MainspringDocs()),
        search_paths=[str(DOCS.parent)],
    )
    bare = []
    for namespace in ("mainspring", *(f"mainspring.{n}" for n in NAMESPACES)):
        module = importlib.import_module(namespace)
        documented = package if namespace == "mainspring" else package[namespace[11:]]
        for name in module.__all__:
            docstring = documented[name].docstring
            if docstring is None or not docstring.value.strip():
                bare.append(f"{namespace}.{name}")
    assert bare == []
