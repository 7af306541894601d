"""Debian's headless chromium driven by selenium, for the tests of the proxy's web pages.

``scripts/system-deps.sh`` (``make test``) installs chromium and chromium-driver: a missing
browser fails the tests instead of skipping them.
"""

from __future__ import annotations

from pathlib import Path

from selenium import webdriver
from selenium.webdriver.chrome.service import Service

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


def start_chromium(profile: Path, size: tuple[int, int] | None = None) -> webdriver.Chrome:
    """Headless chromium with the fresh profile directory ``profile``, no background network
    traffic, and a viewport of ``size`` = (width, height) CSS pixels when given. Quit it when done."""
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
                 f"--user-data-dir={profile}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_script_timeout(300)
    if size is not None:  # the window's frame is added, so that the page itself gets ``size``
        frame = driver.execute_script("return [outerWidth - innerWidth, outerHeight - innerHeight]")
        driver.set_window_size(size[0] + frame[0], size[1] + frame[1])
    return driver
