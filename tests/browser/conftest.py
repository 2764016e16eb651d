"""A real browser for the console's tests: Debian's chromium, headless, driven by
Selenium through Debian's chromedriver (``scripts/browser.sh`` installs both; CI runs it).
One browser per module: starting one costs about a second.

Without the browser the tests skip on a laptop, and fail where services are required
(CI sets ``CAIRN_TEST_REQUIRE_SERVICES``)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
# Set to a folder to save each page's screenshot there (docs/images/console is the docs').
SCREENSHOTS = os.environ.get("CAIRN_CONSOLE_SCREENSHOTS")


def _missing() -> str | None:
    for path in (CHROMIUM, CHROMEDRIVER):
        if not path.exists() and shutil.which(path.name) is None:
            return f"{path} is not installed: bash scripts/browser.sh"
    return None


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    missing = _missing()
    if missing is not None:
        if os.environ.get("CAIRN_TEST_REQUIRE_SERVICES"):
            pytest.fail(missing)
        pytest.skip(missing)
    from selenium import webdriver  # noqa: PLC0415 - only where a browser is
    from selenium.webdriver.chrome.service import Service  # noqa: PLC0415

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for argument in (
        "--headless=new",
        "--no-sandbox",  # root, in a container
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1280,1100",
        "--lang=en-US",
    ):
        options.add_argument(argument)
    driver = webdriver.Chrome(options=options, service=Service(str(CHROMEDRIVER)))
    driver.implicitly_wait(0)
    try:
        yield driver
    finally:
        driver.quit()


def screenshot(driver: object, name: str) -> None:
    """Save the page as ``<name>.png`` in ``CAIRN_CONSOLE_SCREENSHOTS``, if set."""
    if not SCREENSHOTS:
        return
    Path(SCREENSHOTS).mkdir(parents=True, exist_ok=True)
    page: Any = driver
    size = page.get_window_size()
    height = page.execute_script("return document.documentElement.scrollHeight")
    page.set_window_size(size["width"], min(max(int(height), 600), 2400))  # the whole page
    try:
        page.save_screenshot(str(Path(SCREENSHOTS) / f"{name}.png"))
    finally:
        page.set_window_size(size["width"], size["height"])
