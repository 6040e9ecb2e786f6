"""Options and reporting for the runtime suites.

``--trials N`` sets how many crash-and-resume trials run per store backend (the environment
variable ``MAINSPRING_RUNTIME_CRASH_TRIALS`` does the same). pytest reads options only from
conftest files it loads before parsing the command line, so ``--trials`` works when this
directory (or a file in it) is named on the command line, e.g.
``pytest tests/executions -m slow --trials 2000``; from the repository root use the variable.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from ._memory_kit import STORE_KINDS, StoreSpec, store_spec

#: Where the crash trials leave their numbers for the terminal summary.
CRASH_STATS = pytest.StashKey[list[dict[str, object]]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--trials",
        type=int,
        default=None,
        help="crash-and-resume trials per store backend (tests/executions/facade/test_recovery.py)",
    )


@pytest.fixture(params=STORE_KINDS)
def memory_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreSpec]:
    """A fresh store of each kind the memory tests run on (``_memory_kit.STORE_KINDS``)."""
    yield from store_spec(request.param, tmp_path)


@pytest.fixture(scope="session")
def crash_stats(request: pytest.FixtureRequest) -> list[dict[str, object]]:
    return request.config.stash.setdefault(CRASH_STATS, [])


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    stats = terminalreporter.config.stash.get(CRASH_STATS, [])
    if not stats:
        return
    terminalreporter.section("crash and resume")
    for backend in sorted({str(s["backend"]) for s in stats}):
        mine = [s for s in stats if s["backend"] == backend]
        reruns = [int(str(s["reruns"])) for s in mine]
        terminalreporter.write_line(
            f"{backend}: {len(mine)} trials, killed mid-run in "
            f"{sum(1 for s in mine if s['killed_mid_run'])}, "
            f"{sum(int(str(s['durable_at_kill'])) for s in mine)} durable side effects at kill "
            f"(none re-ran), {sum(reruns)} in-flight side effects re-ran "
            f"(max {max(reruns)} per trial, in {sum(1 for r in reruns if r)} trials), "
            f"{sum(int(str(s['resumes'])) for s in mine)} resume processes"
        )
        at_kill = Counter(str(s["status_at_kill"]) for s in mine)
        terminalreporter.write_line(
            f"{backend}: status at the kill: "
            + ", ".join(f"{status} {n}" for status, n in sorted(at_kill.items()))
        )
