"""A real headless browser for the view's tests: the OS's Chromium driven by selenium, and
the view served from a thread of its own (on asyncio or trio) while the test drives it.

Without ``chromedriver`` the browser tests skip and say why; under CI
(``MAINSPRING_REQUIRE_BROWSER=1``, set by ``.ci/run``) that is a failure instead.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal

from mainspring.ui import UiServer, serve

HOW = "install Chromium and its driver (Debian: apt-get install chromium chromium-driver)"


def driver_path() -> str:
    """The chromedriver to use; skips (or, under CI, fails) the test without one."""
    found = shutil.which("chromedriver")
    if found is None:
        message = f"no chromedriver on PATH: {HOW}"
        if os.environ.get("MAINSPRING_REQUIRE_BROWSER") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return found


def open_browser(width: int = 1280, height: int = 900) -> Any:
    """A headless Chromium (``--no-sandbox``: tests may run as root in a container)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--no-first-run",
        f"--window-size={width},{height}",
    ):
        options.add_argument(arg)
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    if binary is not None:
        options.binary_location = binary
    return webdriver.Chrome(service=Service(driver_path()), options=options)


@contextmanager
def portal_of(backend: str) -> Iterator[BlockingPortal]:
    """An event loop (``backend``) in a thread, for the view and the runs."""
    with start_blocking_portal(backend) as portal:
        yield portal


@contextmanager
def view(
    portal: BlockingPortal, store: Any, browser: Any = None, **options: Any
) -> Iterator[UiServer]:
    """The view of ``store``, served on the portal's loop, for ``browser``.

    The page stays open while the view stops, its live event stream with it, as when a
    person stops the command with the tab still open: the stop must not wait out its
    grace for that stream's connection (V4)."""
    with portal.wrap_async_context_manager(serve(store, **options)) as ui:
        yield ui


def wait_for(browser: Any, what: Callable[[Any], Any], timeout: float = 20) -> Any:
    """Wait until ``what(browser)`` is truthy; its value."""
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(browser, timeout, poll_frequency=0.05).until(what)
