"""Debian's headless chromium driven by selenium through /usr/bin/chromedriver (no browser or
driver download), for the tests that run a page in a real browser (tests/env/). Skipped where
chromium or chromium-driver is absent, a failure in CI, which installs both (.ci/run)."""

from __future__ import annotations

import contextlib
import shutil
import tempfile

import pytest

from helpers.gateway_harness import require_tool

webdriver = pytest.importorskip("selenium.webdriver")
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--window-size=900,420")


def require_browser() -> None:
    require_tool(CHROMIUM, "chromium")
    require_tool(CHROMEDRIVER, "chromium-driver")


@contextlib.contextmanager
def chromium(*extra_flags: str):
    """Headless Debian chromium with a fresh profile, quit (and the profile removed) at exit."""
    profile = tempfile.mkdtemp(prefix="murgw-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (*FLAGS, *extra_flags, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def wait(driver, predicate, timeout: float = 30.0):
    return WebDriverWait(driver, timeout, poll_frequency=0.05).until(lambda d: predicate())
