"""The history page in a real headless browser: Debian's ``chromium`` driven by
Playwright through its executable path (no browser download), against a real uvicorn
over real PostgreSQL, after a demo-like run on a fake clock (tests/_page.py).

Without chromium at ``CHROMIUM`` (default ``/usr/bin/chromium``) the test fails with
the fix (it never skips): ``apt-get install -y chromium`` (``.ci/run`` does it). With
``WATCHKEEPER_SCREENSHOT=docs/history-page.png`` it also writes the README's
screenshot.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from _api import serving
from _page import ETF, ETF_TITLE, SECRET, SECRET_TITLE, WEEKLY, demo_run

from watchkeeper.runtime.engine._clock import FakeClock
from watchkeeper.runtime.store._db import Database

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parent.parent
SKIPPED_REASON = "1m00s past expires_at 2026-10-24T12:10:00Z (skip_expired)"
"""The fourth slot (12:00 UTC, grace 10 min) was ticked at 12:11: 60 s past its expiry."""


async def test_the_page_after_a_demo_like_run(db: Database, clock: FakeClock, tmp_path: Path,
                                             browser: Any) -> None:
    """Signed in as alice: the list shows her definitions with a DST note and nothing of
    globex; the ETF definition's timeline shows three completed reports (three distinct
    report texts, each with its task, run, receipt and two delivered notices) and the
    fourth slot skipped_expired with its reason and next step; the cookie is out of the
    page's reach; globex's task and definition are 404; signing out closes the page."""
    demo = await demo_run(db, clock, tmp_path)
    async with serving(db, clock, tmp_path) as api:
        page = await browser.new_page(viewport={"width": 1100, "height": 900})
        await page.goto(api.url + "/")
        assert page.url == api.url + "/sign-in"
        await page.fill("#token", demo.tokens["alice"])
        await page.click("form[action='/sign-in'] button")
        await page.wait_for_url(api.url + "/")
        listed = await page.inner_text("main")
        assert ETF_TITLE in listed and "Weekly rank check" in listed
        assert "UTC offset +01:00 -> +00:00 since the previous occurrence" in listed
        assert SECRET not in listed and SECRET_TITLE not in listed
        assert await page.evaluate("document.cookie") == ""  # HttpOnly

        await page.click(f"a[href='/definitions/{ETF}']")
        await page.wait_for_url(f"{api.url}/definitions/{ETF}")
        cards = page.locator("article.entry")
        assert await cards.count() == 4
        texts = [await cards.nth(i).inner_text() for i in range(4)]
        skipped, completed = texts[0], texts[1:]
        assert "skipped_expired" in skipped and SKIPPED_REASON in skipped
        assert "no task admitted" in skipped
        assert f"Next step: nothing ran; to run it now anyway: watchkeeper trigger {ETF}" in skipped
        for text, hour in zip(completed, (11, 10, 9), strict=True):
            assert text.startswith(f"2026-10-24 {hour:02d}:00:00Z")
            assert "completed" in text and "succeeded" in text and "verified" in text
            assert text.count("delivered") == 2
        assert SECRET_TITLE not in await page.inner_text("body")
        shot = tmp_path / "history-page.png"
        await page.screenshot(path=str(shot), full_page=True)
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        if target := os.environ.get("WATCHKEEPER_SCREENSHOT"):
            shutil.copyfile(shot, ROOT / target)

        reports = []
        for task_id in demo.acme_tasks:
            await page.goto(f"{api.url}/tasks/{task_id}")
            report = await page.inner_text("article.report")
            assert report.startswith(ETF_TITLE) and f"acme/{ETF} revision 1" in report
            reports.append(report)
        assert len(set(reports)) == 3
        assert "none: this is the first report" in reports[0]

        for path in (f"/tasks/{demo.globex_tasks[0]}", f"/definitions/{SECRET}"):
            answer = await page.goto(api.url + path)
            assert answer is not None and answer.status == 404, path
            body = await page.inner_text("body")
            assert "There is no such definition or task for you." in body
            assert SECRET_TITLE not in body

        await page.goto(f"{api.url}/definitions/{WEEKLY}")
        assert "UTC offset +01:00 -> +00:00" in await page.inner_text(".upcoming")
        await page.click("form.sign-out button")
        await page.wait_for_url(api.url + "/sign-in")
        await page.goto(api.url + "/")
        assert page.url == api.url + "/sign-in"
        await page.close()
