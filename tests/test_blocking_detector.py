"""The conftest's guard fails an async test that blocks the event loop, on both backends."""

from __future__ import annotations

import pathlib

import pytest

pytest_plugins = ["pytester"]

CONFTEST = pathlib.Path(__file__).with_name("conftest.py").read_text()


def test_a_test_that_blocks_the_loop_fails(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(
        test_inner="""
import time
import anyio
import pytest

pytestmark = pytest.mark.anyio

async def test_blocks() -> None:
    time.sleep(0.4)  # blocking work on the event loop
    await anyio.sleep(0)

async def test_behaves() -> None:
    await anyio.sleep(0.01)
"""
    )
    result = pytester.runpytest("-p", "anyio", "-q", "-p", "no:cacheprovider")
    # The blocking test passes its call and errors in teardown, on each backend.
    result.assert_outcomes(passed=4, errors=2)
    result.stdout.fnmatch_lines(["*test_blocks?asyncio?*", "*test_blocks?trio?*"])
    result.stdout.fnmatch_lines(["*the event loop was blocked*"])
