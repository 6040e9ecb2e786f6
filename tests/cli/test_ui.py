"""``mainspring ui`` as a user runs it: a process of its own that prints the URL with its
token, serves the view until Ctrl-C, and refuses an address other machines reach."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import anyio
import anyio.to_thread
import httpx
import pytest

from tests._cli_kit import run_cli
from tests.ui._kit import fill

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]


async def test_the_command_prints_a_url_with_its_token_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    store = str(tmp_path / "store.sqlite3")
    await fill(store)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1"}
    command = [sys.executable, "-m", "mainspring.cli", "--store", store, "ui", "--port", "0"]
    process = await anyio.open_process(command, env=env, cwd=tmp_path)
    try:
        assert process.stdout is not None
        seen = b""
        with anyio.fail_after(60):
            while b"?token=" not in seen or not seen.endswith(b"\n"):
                seen += await process.stdout.receive()
        (url,) = [line.strip() for line in seen.decode().splitlines() if "?token=" in line]
        assert url.startswith("http://127.0.0.1:")
        base, _, token = url.partition("/?token=")
        assert len(token) >= 40
        async with httpx.AsyncClient(base_url=base) as http:
            assert (await http.get("/api/runs")).status_code == 403
            runs = await http.get("/api/runs", headers={"x-mainspring-token": token})
            assert [r["id"] for r in runs.json()["runs"]] == ["ex-ask", "ex-ok", "ex-fail"]
        process.send_signal(signal.SIGINT)
        with anyio.fail_after(30):
            assert await process.wait() == 0
    finally:
        if process.returncode is None:
            process.kill()
        await process.aclose()


def test_an_address_other_machines_reach_is_refused_without_allow_remote(tmp_path: Path) -> None:
    store = tmp_path / "store.sqlite3"
    anyio.run(fill, str(store))
    code, out = run_cli("--store", str(store), "ui", "--host", "0.0.0.0")
    assert code == 2
    assert out == ""
    code, _ = run_cli("--store", str(store), "ui", "--port", "70000")
    assert code == 2


def test_no_store_is_nothing_to_show(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MAINSPRING_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("MAINSPRING_STORE", raising=False)
    code, _ = run_cli("ui")
    assert code == 5
    assert not (tmp_path / "home").exists()  # nothing created
