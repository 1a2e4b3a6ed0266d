"""The headless chromium the page's browser tests drive: Debian's package through
Playwright's executable path (no browser download)."""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator
from typing import Any

import pytest

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.fixture
async def browser() -> AsyncIterator[Any]:
    """A headless chromium (Debian's package), or a failure saying how to install it."""
    if shutil.which(CHROMIUM) is None:
        pytest.fail(f"the browser test needs Debian's chromium at {CHROMIUM}, which is "
                    "missing. Fix: apt-get update && apt-get install -y chromium (.ci/run "
                    "does this), or set CHROMIUM to its path.", pytrace=False)
    try:
        from playwright.async_api import async_playwright
    except ImportError:
        pytest.fail("the browser test needs Playwright. Fix: .venv/bin/pip install -e "
                    "'.[test]' (never 'playwright install': it drives the system chromium).",
                    pytrace=False)
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            yield launched
        finally:
            await launched.close()
