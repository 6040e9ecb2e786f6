"""The view in a real headless browser (Chromium, driven by selenium), served on asyncio and
on trio: the list shows the runs and filters them, and an answer given while nothing runs
the run is shown waiting for a runtime; a run's graph has the right colours
after a pause; an answer typed into the page reaches a waiting run, which goes on; a live
update arrives without a reload."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import mainspring as ms
from tests.executions._kit import FAST, Gate, plan_of, tool
from tests.ui._browser import driver_path, open_browser, portal_of, view, wait_for
from tests.ui._kit import APP, fill, reaches

#: The graph's palette (app.css), as the browser computes a rect's fill.
GREEN = "rgb(26, 127, 55)"
GREY = "rgb(140, 149, 159)"
RED = "rgb(207, 34, 46)"
LIGHT = "rgb(196, 202, 208)"

#: One Chromium per worker (the module-scoped ``browser``, ~2.5 s to start): under
#: ``--dist loadgroup`` every test here runs on the same worker, so one starts in all.
pytestmark = pytest.mark.xdist_group("browser")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    driver_path()
    opened = open_browser()
    try:
        yield opened
    finally:
        opened.quit()


@pytest.fixture(params=["asyncio", "trio"])
def portal(request: pytest.FixtureRequest) -> Iterator[Any]:
    with portal_of(request.param) as running:
        yield running


@pytest.fixture
def store(tmp_path: Path, portal: Any) -> str:
    path = str(tmp_path / "store.sqlite3")
    portal.call(fill, path)
    return path


def _css(browser: Any, selector: str) -> Any:
    from selenium.webdriver.common.by import By

    return browser.find_elements(By.CSS_SELECTOR, selector)


def _fills(browser: Any) -> dict[str, tuple[str, str]]:
    """Each graph node: its state and its box's colour as the browser computes it (read in
    one script: the page may redraw between two reads)."""
    found = browser.execute_script(
        "return [...document.querySelectorAll('#graph g.step')].map(g => [g.dataset.step,"
        " g.dataset.status, getComputedStyle(g.querySelector('rect')).fill])"
    )
    return {step: (status, fill) for step, status, fill in found}


def _rows(browser: Any) -> list[list[str]]:
    """The runs table: each row's run id, then its cells' text (one script, as above)."""
    rows: list[list[str]] = browser.execute_script(
        "return [...document.querySelectorAll('#runs tbody tr')].map(tr =>"
        " [tr.dataset.run, ...[...tr.cells].map(td => td.textContent)])"
    )
    return rows


def _kinds(browser: Any) -> list[str]:
    kinds: list[str] = browser.execute_script(
        "return [...document.querySelectorAll('#timeline li')].map(li => li.dataset.kind)"
    )
    return kinds


def _text(browser: Any, selector: str) -> str:
    text: str = browser.execute_script(
        "const e = document.querySelector(arguments[0]); return e ? e.textContent : null",
        selector,
    )
    return text


def test_the_list_filters_the_runs_and_an_answer_with_nothing_running_waits(
    browser: Any, portal: Any, store: str
) -> None:
    from selenium.webdriver.support.ui import Select

    with view(portal, store, browser) as ui:
        browser.get(ui.url)
        assert browser.current_url == ui.base + "/"  # the token left the address bar
        rows = wait_for(browser, lambda b: len(_rows(b)) == 3 and _rows(b))
        assert [r[0] for r in rows] == ["ex-ask", "ex-ok", "ex-fail"]
        (failed,) = [r for r in rows if r[0] == "ex-fail"]
        assert failed[1:5] == ["ex-fail", "failed", "count and fail", "2/4 (1 failed, 1 skipped)"]
        Select(_css(browser, "#filter-status")[0]).select_by_value("completed")
        wait_for(browser, lambda b: [r[0] for r in _rows(b)] == ["ex-ok"])
        Select(_css(browser, "#filter-status")[0]).select_by_value("")
        _css(browser, "#filter-text")[0].send_keys("the way")
        wait_for(browser, lambda b: [r[0] for r in _rows(b)] == ["ex-ask"])
        browser.execute_script("document.querySelector('#runs tr[data-run=\"ex-ask\"] a').click()")
        wait_for(browser, lambda b: b.current_url == ui.base + "/runs/ex-ask")
        wait_for(browser, lambda b: _text(b, "#status") == "waiting_for_clarification")
        # R9/P5: answered while nothing runs the run, the page says the answer waits for a
        # runtime and offers no second answer (which would be refused as busy).
        wait_for(browser, lambda b: _css(b, "#answer-form")[0].is_displayed())
        _css(browser, "#answer-text")[0].send_keys("left")
        _css(browser, "#answer-send")[0].click()
        stored = wait_for(
            browser, lambda b: (e := _css(b, "#answer-stored")[0]).is_displayed() and e
        )
        assert "waits for a runtime" in stored.text
        assert not _css(browser, "#answer-form")[0].is_displayed()
        assert _text(browser, "#status") == "waiting_for_clarification"


def test_a_failed_run_shows_its_graph_error_and_traceback(
    browser: Any, portal: Any, store: str
) -> None:
    with view(portal, store, browser) as ui:
        browser.get(ui.url)
        browser.get(ui.base + "/runs/ex-fail")
        wait_for(browser, lambda b: len(_css(b, "#graph g.step")) == 4)
        assert _fills(browser) == {
            "a": ("succeeded", GREEN),
            "b": ("succeeded", GREEN),
            "c": ("failed", RED),
            "d": ("skipped", LIGHT),
        }
        assert len(_css(browser, "#graph path.edge")) == 4
        legend = [key.text for key in _css(browser, "#legend .key")]
        assert legend == [
            "pending",
            "running",
            "succeeded",
            "failed",
            "skipped",
            "cancelled",
            "stopped",
        ]
        error = _css(browser, '#steps tr[data-step="c"] td.error')[0]
        assert "this tool always fails ([redacted github-token])" in error.text
        summary = error.find_element("css selector", "details summary")
        summary.click()
        shown = error.find_element("css selector", "details pre").text
        assert "Traceback (most recent call last)" in shown
        assert "ghp_" not in browser.page_source  # E5


def test_the_graph_has_the_right_colours_after_a_pause(
    browser: Any, portal: Any, tmp_path: Path
) -> None:
    """A run a live runtime is running, paused from the page: done steps stay green, the
    interrupted one and the rest are pending (grey), the run says paused; live, without a
    reload."""
    path = str(tmp_path / "live.sqlite3")
    gate = Gate()
    tools = {"inc": APP["tools"]["inc"], "gate": gate}
    plan = plan_of(tool("a"), tool("g", "gate", "a"), tool("b", "inc", "g"))
    with portal.wrap_async_context_manager(
        ms.open_runtime(store=path, tools=tools, **FAST)
    ) as server:
        handle = portal.call(lambda: server.start("gated", plan, execution_id="ex-g"))
        portal.call(gate.entered.wait)
        with view(portal, path, browser) as ui:
            browser.get(ui.url)
            browser.get(ui.base + "/runs/ex-g")
            wait_for(browser, lambda b: _text(b, "#status") == "running")
            wait_for(browser, lambda b: _fills(b).get("a") == ("succeeded", GREEN))
            browser.execute_script("window.__same_page = true")
            _css(browser, "#reason")[0].send_keys("lunch")
            _css(browser, "#btn-pause")[0].click()
            wait_for(browser, lambda b: _text(b, "#status") == "paused")
            wait_for(
                browser,
                lambda b: (
                    _fills(b)
                    == {
                        "a": ("succeeded", GREEN),
                        "g": ("pending", GREY),
                        "b": ("pending", GREY),
                    }
                ),
            )
            assert portal.call(handle.wait).status == "paused"
            assert browser.execute_script("return window.__same_page") is True
            assert "pause by" in _css(browser, "#audit")[0].text
            assert "lunch" in _css(browser, "#audit")[0].text
            assert _css(browser, "#btn-pause")[0].get_attribute("disabled") is not None


def test_an_answer_typed_into_the_page_reaches_the_waiting_run(
    browser: Any, portal: Any, store: str
) -> None:
    with (
        portal.wrap_async_context_manager(ms.open_runtime(store=store, **APP)) as server,
        view(portal, store, browser) as ui,
    ):
        browser.get(ui.url)
        browser.get(ui.base + "/runs/ex-ask")
        wait_for(browser, lambda b: _css(b, "#question-box")[0].is_displayed())
        assert _css(browser, "#question-text")[0].text.startswith("which way?")
        task = _css(browser, "#tasks .task")[0]
        assert "look" in task.text
        browser.execute_script("window.__same_page = true")
        _css(browser, "#answer-text")[0].send_keys("left <b>bold</b>")
        _css(browser, "#answer-send")[0].click()
        portal.call(reaches, server, "ex-ask", "completed")
        wait_for(browser, lambda b: _text(b, "#status") == "completed")
        wait_for(browser, lambda b: not _css(b, "#question-box")[0].is_displayed())
        inner = [li.get_attribute("data-inner") for li in _css(browser, "#tasks .task .inner li")]
        assert inner[0] == "look"  # before the question
        assert inner[-1] == "go"  # after the answer: the run went on
        assert browser.execute_script("return window.__same_page") is True


def test_a_live_update_arrives_without_a_reload(browser: Any, portal: Any, tmp_path: Path) -> None:
    path = str(tmp_path / "live.sqlite3")
    gate = Gate()
    tools = {"inc": APP["tools"]["inc"], "gate": gate}
    plan = plan_of(tool("g", "gate"), tool("b", "inc", "g"))
    with portal.wrap_async_context_manager(
        ms.open_runtime(store=path, tools=tools, **FAST)
    ) as server:
        handle = portal.call(lambda: server.start("gated", plan, execution_id="ex-live"))
        portal.call(gate.entered.wait)
        with view(portal, path, browser) as ui:
            browser.get(ui.url)
            browser.get(ui.base + "/runs/ex-live")
            wait_for(browser, lambda b: _text(b, "#live") == "live")
            before = len(wait_for(browser, lambda b: len(_kinds(b)) >= 3 and _kinds(b)))
            browser.execute_script("window.__same_page = true")
            portal.call(gate.opened.set)
            assert portal.call(handle.wait).status == "completed"
            wait_for(browser, lambda b: _text(b, "#status") == "completed")
            wait_for(
                browser,
                lambda b: _fills(b) == {"g": ("succeeded", GREEN), "b": ("succeeded", GREEN)},
            )
            kinds = wait_for(
                browser, lambda b: (k := _kinds(b))[-1] == "status" and len(k) > before and k
            )
            assert kinds[-1] == "status"  # the run's last entry: completed
            seqs = [
                int(s)
                for s in browser.execute_script(
                    "return [...document.querySelectorAll('#timeline li')]"
                    ".map(li => li.dataset.seq)"
                )
            ]
            assert seqs == sorted(set(seqs))  # V2: in order, none twice
            assert browser.execute_script("return window.__same_page") is True
