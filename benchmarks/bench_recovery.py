"""How long a run whose process was killed (``kill -9``) waits before it goes on elsewhere,
beside the physical limit and DBOS in the same run.

Run ``python benchmarks/bench_recovery.py [--samples N]`` (default 5 kills per row). For DBOS,
make a separate virtual environment first (DBOS must not go into the project's own):
``python -m venv .venv-peers && .venv-peers/bin/pip install dbos``; the script uses
``.venv-peers/bin/python`` at the repository's root, or ``--peers-python PATH``; without it the
DBOS rows are left out and say so. For each store (SQLite in a temp dir; PostgreSQL at
``$MAINSPRING_TEST_POSTGRES``, default the local server) and each case:

- **same host**: a process (the "old server") starts a run parked in a tool and is killed
  with SIGKILL; a new process is started at once (the restart under systemd, Kubernetes or
  ``--reload``) and opens a runtime, calling nothing else. Its lease (15 s) is still live,
  but its owner is a process of this host that is gone: the new runtime takes it over.
- **another host**: the same, but the killed process's lease owner names another host (its
  owner id is given, as a process on another machine would have written it); the new
  runtime must wait for the lease to lapse (5 s ttl, renewed every third of it).
- **DBOS, same host**: DBOS 3.x with its system database on the same store (a SQLite file;
  a database of its own on the same PostgreSQL server): a workflow whose step blocks, the
  process killed with SIGKILL, a new process that registers the same workflow and calls
  ``DBOS.launch()``, which recovers this executor's pending workflows; timed until the
  step runs again.

And the physical limits, measured the same way between the same rows:

- **kill -9 + exec**: a sleeping Python process killed with SIGKILL, then
  ``python -c pass`` started and exited: what any restart costs.
- **open floor**: the same kill, then a fresh process that imports mainspring and opens a
  runtime on the same store with ``recover=False`` (nothing can recover a run faster than
  that); and for DBOS, a fresh process that imports dbos and launches on its database.

Each row gives the time from the kill to the run's tool being called in the new process
(both read the same clock), from the new process opening its runtime (``open_runtime``
called; ``DBOS()`` constructed) and from that having returned (``DBOS.launch()`` returned);
the first includes starting Python and importing the library. A first open of each store
(which creates its tables) is done before the trials and not counted; it also compiles the
libraries' bytecode into a cache in the temp dir that every later process reads, as a
deployed server's would (even where ``PYTHONDONTWRITEBYTECODE`` is set). Prints the median
and worst of ``--samples`` kills per row and the medians' ratio to the store's open floor; the load
average at the start and the end.
"""

from __future__ import annotations

import argparse
import os
import select
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DSN = os.environ.get("MAINSPRING_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
SCHEMA = "mainspring_bench_recovery"
DBOS_DB = "mainspring_bench_recovery_dbos"
#: An owner id of the form mainspring writes, of a host that is not this one.
FOREIGN = "another-host:4242:0123abcd:1.abc.1"
TTL = {"same host": 15.0, "another host": 5.0}
_MODE = "worker"


async def park() -> str:
    """Parks in the killed process; in the new one, says when it was called and returns."""
    import anyio

    if _MODE == "worker":
        print("ready", flush=True)
        await anyio.sleep_forever()
    print(f"resumed {time.time():.6f}", flush=True)
    return "done"


def _plan() -> Any:
    import mainspring as ms

    return ms.Plan(id="p", goal="g", steps=(ms.PlanStep(id="park", tool="park"),))


def worker(store: str, execution_id: str, owner: str, ttl: float) -> None:
    import anyio

    import mainspring as ms

    async def main() -> None:
        async with ms.open_runtime(
            store=store,
            tools={"park": park},
            lease_ttl=ttl,
            owner=None if owner == "-" else owner,
        ) as rt:
            await rt.start("g", _plan(), execution_id=execution_id)
            await anyio.sleep_forever()

    anyio.run(main)


def restart(store: str, execution_id: str, ttl: float) -> None:
    global _MODE
    _MODE = "restart"
    import anyio

    import mainspring as ms

    async def main() -> None:
        print(f"open {time.time():.6f}", flush=True)
        async with ms.open_runtime(store=store, tools={"park": park}, lease_ttl=ttl) as rt:
            print(f"entered {time.time():.6f}", flush=True)
            with anyio.fail_after(120):
                while True:  # until the run is done here (the bench's own loop, not a test)
                    stored = await rt.get(execution_id)
                    if stored is not None and stored.terminal:
                        break
                    await anyio.sleep(0.05)

    anyio.run(main)


def floor(store: str) -> None:
    """The open floor: import mainspring, open a runtime on ``store`` that recovers nothing."""
    import anyio

    import mainspring as ms

    async def main() -> None:
        print(f"open {time.time():.6f}", flush=True)
        async with ms.open_runtime(store=store, tools={"park": park}, recover=False):
            print(f"entered {time.time():.6f}", flush=True)

    anyio.run(main)


# -- DBOS, run by the peers' interpreter (this file imports nothing else at its top) ---------


def _dbos_app(database: str, mode: str) -> Any:
    """Register the parked workflow (the same names and source in every process, so that a
    restarted process's application version matches the killed one's) and configure DBOS."""
    from dbos import DBOS

    @DBOS.step(name="mainspring_bench_park")
    def park_step() -> str:
        if mode == "worker":
            print("ready", flush=True)
            time.sleep(3600)
        print(f"resumed {time.time():.6f}", flush=True)
        return "done"

    @DBOS.workflow(name="mainspring_bench_parked")
    def parked() -> str:
        return park_step()

    print(f"open {time.time():.6f}", flush=True)
    DBOS(
        config={
            "name": "mainspring-bench-recovery",
            "system_database_url": database,
            "log_level": "WARNING",
        }
    )
    return parked


def dbos_process(mode: str, database: str, workflow_id: str) -> None:
    """``worker``: start the workflow and block; ``restart``: launch (which recovers it) and
    wait for its result; ``floor``: launch and return."""
    from dbos import DBOS, SetWorkflowID

    parked = _dbos_app(database, mode)
    DBOS.launch()
    print(f"entered {time.time():.6f}", flush=True)
    try:
        if mode == "worker":
            with SetWorkflowID(workflow_id):
                DBOS.start_workflow(parked)
            time.sleep(3600)
        elif mode == "restart":
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:  # the bench's own wait, not a test
                status = DBOS.get_workflow_status(workflow_id)
                if status is not None and status.status not in ("PENDING", "ENQUEUED"):
                    break
                time.sleep(0.05)
    finally:
        DBOS.destroy()


# -- the parent ------------------------------------------------------------------------------


#: Where the measured processes keep their compiled bytecode (set in ``main``): a deployed
#: server imports from .pyc files, so the processes write and reuse them even where the
#: environment says not to (PYTHONDONTWRITEBYTECODE); the uncounted first opens fill it.
_PYCACHE: dict[str, str] = {}


def _spawn(python: str, *args: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), **_PYCACHE}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return subprocess.Popen([python, __file__, *args], stdout=subprocess.PIPE, env=env)


def _line(child: subprocess.Popen[bytes], prefix: str, timeout: float = 120.0) -> str:
    assert child.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        readable, _, _ = select.select([child.stdout], [], [], deadline - time.monotonic())
        if not readable:
            break
        line = child.stdout.readline().decode().strip()
        if not line:
            break
        if line.startswith(prefix):
            return line
    child.kill()
    raise RuntimeError(f"no {prefix!r} line from {child.args!r}")


def _kill(old: subprocess.Popen[bytes]) -> float:
    _line(old, "ready")
    old.send_signal(signal.SIGKILL)
    killed = time.time()
    old.wait()
    return killed


def _after(new: subprocess.Popen[bytes], killed: float, last: str) -> tuple[float, ...]:
    """kill -> ``last`` line, ``open`` -> it, ``entered`` -> it (seconds)."""
    opened = float(_line(new, "open").split()[1])
    entered = float(_line(new, "entered").split()[1])
    at = entered if last == "entered" else float(_line(new, last).split()[1])
    new.wait(timeout=120)
    return at - killed, at - opened, max(0.0, at - entered)


def _sleeper() -> subprocess.Popen[bytes]:
    code = "import time; print('ready', flush=True); time.sleep(3600)"
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)


def exec_floor() -> tuple[float, ...]:
    """kill -9 of a sleeping Python process, then ``python -c pass`` started and exited."""
    killed = _kill(_sleeper())
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    return (time.time() - killed,)


def open_floor(store: str) -> tuple[float, ...]:
    killed = _kill(_sleeper())
    return _after(_spawn(sys.executable, "floor", store), killed, "entered")


def dbos_floor(python: str, database: str) -> tuple[float, ...]:
    killed = _kill(_sleeper())
    return _after(_spawn(python, "dbos", "floor", database, "-"), killed, "entered")


def one(store: str, case: str, n: int) -> tuple[float, ...]:
    """One kill and restart, seconds: kill -> the run goes on, ``open_runtime`` called ->
    it goes on, ``open_runtime`` returned -> it goes on."""
    execution_id = f"ex-{case.replace(' ', '-')}-{n}"
    owner = "-" if case == "same host" else FOREIGN
    ttl = TTL[case]
    killed = _kill(_spawn(sys.executable, "worker", store, execution_id, owner, str(ttl)))
    return _after(
        _spawn(sys.executable, "restart", store, execution_id, str(ttl)), killed, "resumed"
    )


def dbos_one(python: str, database: str, n: int) -> tuple[float, ...]:
    workflow_id = f"wf-{n}"
    killed = _kill(_spawn(python, "dbos", "worker", database, workflow_id))
    return _after(_spawn(python, "dbos", "restart", database, workflow_id), killed, "resumed")


def _admin(sql: str) -> None:
    import psycopg

    with psycopg.connect(DSN, autocommit=True, connect_timeout=5) as conn:
        conn.execute(sql)


def _with_database(dsn: str, name: str) -> str:
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(dsn)
    return urlunsplit(parts._replace(path=f"/{name}"))


def _stores(tmp: Path) -> list[tuple[str, str, str, Any]]:
    """(name, mainspring store, DBOS database URL, cleanup) for each store."""
    stores: list[tuple[str, str, str, Any]] = [
        ("SQLite", str(tmp / "bench.sqlite3"), f"sqlite:///{tmp / 'dbos.sqlite'}", None)
    ]
    try:
        _admin(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
        _admin(f"DROP DATABASE IF EXISTS {DBOS_DB} WITH (FORCE)")
        _admin(f"CREATE DATABASE {DBOS_DB}")
    except Exception as exc:
        print(f"(PostgreSQL skipped: {type(exc).__name__})", file=sys.stderr)
        return stores

    def drop() -> None:
        _admin(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
        _admin(f"DROP DATABASE IF EXISTS {DBOS_DB} WITH (FORCE)")

    url = f"{DSN}{'&' if '?' in DSN else '?'}schema={SCHEMA}"
    stores.append(("PostgreSQL", url, _with_database(DSN, DBOS_DB), drop))
    return stores


def _cell(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} ({max(values):.2f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=5)
    parser.add_argument("--peers-python", default=None, help="an interpreter that has dbos")
    args = parser.parse_args()
    began = time.monotonic()
    load_before = os.getloadavg()
    from _harness import peers_python  # imported here: this file's top imports nothing of ours

    peers = peers_python(args.peers_python)
    if peers is None:
        print("(DBOS rows skipped: no interpreter with dbos; see the top of this file)",
              file=sys.stderr)  # fmt: skip
    n = args.samples
    limits: list[tuple[str, str, list[tuple[float, ...]]]] = []
    rows: list[tuple[str, str, str, str, list[tuple[float, ...]], float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        _PYCACHE["PYTHONPYCACHEPREFIX"] = str(Path(tmp) / "pycache")
        limits.append(("-", "kill -9 + exec `python -c pass`", [exec_floor() for _ in range(n)]))
        for name, store, database, drop in _stores(Path(tmp)):
            try:
                # a first open creates the store's tables (and DBOS's): not counted
                open_floor(store)
                if peers is not None:
                    dbos_floor(peers, database)
                # interleaved, so that the machine's drift hits the limit and the rows alike
                opens: list[tuple[float, ...]] = []
                dbos_opens: list[tuple[float, ...]] = []
                cases: dict[str, list[tuple[float, ...]]] = {c: [] for c in TTL}
                dbos: list[tuple[float, ...]] = []
                for i in range(n):
                    opens.append(open_floor(store))
                    for case in TTL:
                        cases[case].append(one(store, case, i))
                    if peers is not None:
                        dbos_opens.append(dbos_floor(peers, database))
                        dbos.append(dbos_one(peers, database, i))
                limits.append(
                    (name, "kill -9 + import mainspring + `open_runtime` (recover=False)", opens)
                )
                for case, runs in cases.items():
                    rows.append((name, "mainspring", case, f"{TTL[case]:g} s", runs, 0.0))
                if peers is not None:
                    limits.append((name, "kill -9 + import dbos + `DBOS.launch()`", dbos_opens))
                    rows.append((name, "DBOS", "same host", "-", dbos, 0.0))
            finally:
                if drop is not None:
                    drop()
    load_after = os.getloadavg()
    print(
        f"{n} kills per row, interleaved, {time.monotonic() - began:.0f} s in all; load average "
        f"(1 min) {load_before[0]:.1f} at the start, {load_after[0]:.1f} at the end, "
        f"{os.cpu_count()} cores\n"
    )
    print("Physical limits (seconds from the kill until the new process is ready):\n")
    print("| store | limit | from the kill (s) | from open called (s) |")
    print("|---|---|---:|---:|")
    floors = {}
    for name, what, runs in limits:
        opened = _cell([r[1] for r in runs]) if len(runs[0]) > 1 else "-"
        print(f"| {name} | {what} | {_cell([r[0] for r in runs])} | {opened} |")
        if "mainspring" in what:
            floors[name] = statistics.median(r[0] for r in runs)
    print("\nRecovery (seconds until the killed run's step is called again in the new process):\n")
    print("| store | system | owner | lease ttl | from the kill (s) | / open floor "
          "| from open called (s) | from open returned (s) |")  # fmt: skip
    print("|---|---|---|---:|---:|---:|---:|---:|")
    for name, system, case, ttl, runs, _ in rows:
        kill, opened, entered = (list(c) for c in zip(*runs, strict=True))
        ratio = statistics.median(kill) / floors[name]
        print(f"| {name} | {system} | {case} | {ttl} | {_cell(kill)} | {ratio:.2f}x "
              f"| {_cell(opened)} | {_cell(entered)} |")  # fmt: skip
    print("\nEach cell: median (worst). / open floor: the median from the kill over the median "
          "of the store's mainspring open floor.")  # fmt: skip


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        worker(sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5]))
    elif len(sys.argv) > 1 and sys.argv[1] == "restart":
        restart(sys.argv[2], sys.argv[3], float(sys.argv[4]))
    elif len(sys.argv) > 1 and sys.argv[1] == "floor":
        floor(sys.argv[2])
    elif len(sys.argv) > 1 and sys.argv[1] == "dbos":
        dbos_process(sys.argv[2], sys.argv[3], sys.argv[4])
    else:
        main()
