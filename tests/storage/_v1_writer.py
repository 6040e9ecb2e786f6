"""Make mainspring 0.1 stores with the 0.1 code: ``python _v1_writer.py OUT_DIR``, run with
``PYTHONPATH`` naming a checkout of 0.1 (commit 0168b12; ``MAINSPRING_V1_ROOT`` says where,
and the script refuses to run on other code).

Writes ``OUT_DIR/v1.sqlite3`` (a SqliteStore) and ``OUT_DIR/v1-files`` (a FileStore), each
holding a completed run, a paused one (its third step in flight when paused) and one waiting
for clarification (an agent asked), and ``OUT_DIR/v1-<kind>-view.json``: every execution as
the 0.1 code reads it back (``_codec.unstructure``), keyed by id.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

import anyio
import orjson

import mainspring as ms
from mainspring.storage import _codec


def _load_app() -> Any:
    path = Path(__file__).with_name("_v1_app.py")
    spec = importlib.util.spec_from_file_location("_v1_app", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def _fill(store: Any, app: Any) -> None:
    async with ms.open_runtime(store=store, tools=app.TOOLS, agents=app.AGENTS) as rt:
        done = await (
            await rt.start("a finished run", app.done_plan(), execution_id="ex-done")
        ).wait()
        assert done.status == "completed", done
        entered, opened = anyio.Event(), anyio.Event()
        app.GATES["hold"] = (entered, opened)
        handle = await rt.start("a paused run", app.paused_plan(), execution_id="ex-paused")
        await entered.wait()
        paused = await rt.pause(handle.execution_id, reason="migration test")
        assert paused.status == "paused", paused
        app.GATES.clear()
        waiting = await (
            await rt.start("a waiting run", app.waiting_plan(), execution_id="ex-waiting")
        ).wait()
        assert waiting.status == "waiting_for_clarification", waiting


def main() -> None:
    root = os.environ["MAINSPRING_V1_ROOT"]
    if not Path(ms.__file__).resolve().is_relative_to(Path(root).resolve()):
        raise SystemExit(f"not the 0.1 code: mainspring is {ms.__file__}")
    out = Path(sys.argv[1])
    app = _load_app()
    for kind, path in (("sqlite", out / "v1.sqlite3"), ("files", out / "v1-files")):
        store: Any = (
            ms.storage.SqliteStore(path) if kind == "sqlite" else ms.storage.FileStore(path)
        )
        anyio.run(_fill, store, app)
        listing = store.list()
        assert not listing.problems, listing.problems
        view = {ex.id: _codec.unstructure(ex) for ex in listing.executions}
        if kind == "sqlite":
            store.close()
        (out / f"v1-{kind}-view.json").write_bytes(
            orjson.dumps(view, option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2)
        )


if __name__ == "__main__":
    main()
