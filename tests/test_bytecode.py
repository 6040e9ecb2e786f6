"""Where the run keeps its bytecode (tests/_bytecode.py)."""

from __future__ import annotations

import sys


def test_the_cache_is_chosen_before_an_installed_plugin_is_imported() -> None:
    """pytest rewrites the asserts of Hypothesis's modules as it loads its plugin, before
    any conftest: the cache directory must be chosen by then, or (with
    ``PYTHONDONTWRITEBYTECODE``, as on CI) every process of the run rewrites and compiles
    them again, about 1.5 s of CPU each. ``sys.modules`` keeps the order of imports."""
    order = list(sys.modules)
    assert order.index("tests._bytecode") < order.index("hypothesis")
    assert order.index("tests._bytecode") < order.index("pytest_trio")
    assert not sys.dont_write_bytecode
