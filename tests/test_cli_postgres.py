"""The command on a PostgreSQL store: ``--store postgresql://...`` and ``MAINSPRING_STORE``
name it like a path does; a read never creates the schema; a password never reaches the
screen."""

from __future__ import annotations

import json

import anyio
import pytest

import mainspring as ms

from ._cli_kit import inc, run_cli
from ._postgres import drop_schema, fresh_schema, postgres_url, require_server, with_schema

__all__ = ["postgres_url"]  # a fixture


def _make_runs(url: str) -> None:
    async def main() -> None:
        async with ms.open_runtime(store=url, tools={"inc": inc}) as rt:
            plan = ms.Plan(id="p", goal="g", steps=(ms.PlanStep(id="a", tool="inc"),))
            await (await rt.start("done", plan, execution_id="ex-done")).wait()
            waiting = ms.Plan(
                id="q",
                goal="g",
                steps=(ms.PlanStep(id="b", tool="inc", requires_approval=True),),
            )
            await (await rt.start("waits", waiting, execution_id="ex-waits")).wait()

    anyio.run(main)


def test_the_command_reads_and_steers_a_postgresql_store(postgres_url: str) -> None:
    _make_runs(postgres_url)
    code, out = run_cli("ls", "--json", "--store", postgres_url)
    assert code == 0
    assert {row["id"]: row["status"] for row in json.loads(out)} == {
        "ex-done": "completed",
        "ex-waits": "waiting_for_approval",
    }
    code, out = run_cli("events", "ex-done", "--json", "--store", postgres_url)
    assert code == 0
    kinds = [json.loads(line)["kind"] for line in out.splitlines()]
    assert kinds[0] == "created"
    code, out = run_cli("cancel", "ex-waits", "--store", postgres_url)
    assert code == 0
    code, out = run_cli("show", "ex-waits", "--json", "--store", postgres_url)
    assert json.loads(out)["status"] == "cancelled"


def test_MAINSPRING_STORE_names_the_store(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _make_runs(postgres_url)
    monkeypatch.setenv("MAINSPRING_STORE", postgres_url)
    code, out = run_cli("ls", "--json")
    assert code == 0
    assert sorted(row["id"] for row in json.loads(out)) == ["ex-done", "ex-waits"]
    # open_runtime takes it too when no store is given.
    store, close = ms.storage.open_store(None)
    try:
        assert isinstance(store, ms.storage.PostgresStore)
        assert store.get("ex-done") is not None
    finally:
        close()


def test_a_read_of_a_schema_without_a_store_creates_nothing(
    capsys: pytest.CaptureFixture[str],
) -> None:
    url = require_server()
    schema = fresh_schema()
    try:
        code, _ = run_cli("ls", "--store", with_schema(url, schema))
        assert code == 5  # no usable store
        assert "no mainspring store" in capsys.readouterr().err
        import psycopg

        with psycopg.connect(url) as conn:
            found = conn.execute(
                "SELECT count(*) FROM information_schema.schemata WHERE schema_name = %s",
                (schema,),
            ).fetchone()
        assert found == (0,)
    finally:
        drop_schema(schema)


def test_a_password_in_the_store_url_is_never_shown(capsys: pytest.CaptureFixture[str]) -> None:
    code, _ = run_cli(
        "ls", "--store", "postgresql://someone:hunter2secret@127.0.0.1:1/nowhere?connect_timeout=1"
    )
    assert code == 5
    err = capsys.readouterr().err
    assert "hunter2secret" not in err
    assert "someone:***@" in err


def test_E7_a_row_that_does_not_parse_is_unreadable_to_every_read(
    postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    import psycopg

    from ._postgres import server_url

    _make_runs(postgres_url)
    schema = postgres_url.rsplit("schema=", 1)[1]
    with psycopg.connect(server_url(), autocommit=True) as conn:
        conn.execute(
            f'INSERT INTO "{schema}".executions (id, seq, stamp, status, updated_at, head, '
            "checkpoints) VALUES ('cut', 1, 1, 'planned', 0, %s, '[]')",
            (b'{"v": 1, "id": ',),
        )
    capsys.readouterr()
    code, _ = run_cli("ls", "--store", postgres_url)
    assert code == 0
    assert "unreadable execution cut" in capsys.readouterr().err
    code, out = run_cli("doctor", "--json", "--store", postgres_url)
    assert code == 1
    assert {"id": "cut", "problem": "unreadable"}.items() <= json.loads(out)["findings"][0].items()
    for command in ("show", "tasks", "events"):
        code, _ = run_cli(command, "cut", "--store", postgres_url)
        assert code == 1, command  # as doctor says: unreadable, not unknown (3)
        assert "execution cut cannot be read" in capsys.readouterr().err, command
