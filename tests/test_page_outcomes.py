"""The page tells what happened (issue 19, item 6): the definitions' list shows each
one's last outcome (a badge and the occurrence's time) beside its next due time, so a
failed one stands out among completed ones; a task's page shows its report's headline
and every tool call with its status, the refused one included. httpx against a real
uvicorn over real PostgreSQL, after real ticks on a fake clock."""

from __future__ import annotations

import contextlib
import html as html_text
import re
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from _api import Api, serving
from _helpers import utc

from watchkeeper.runtime import AgentCatalog, AgentError, AgentResult, Settings
from watchkeeper.runtime.engine import ToolRefused
from watchkeeper.runtime.engine._clock import FakeClock
from watchkeeper.runtime.store._db import Database
from watchkeeper.runtime.usecases import add_user, authenticate, confirm, propose_spec, tick_once
from watchkeeper.sources import CallableSource, SourceRegistry

pytestmark = pytest.mark.anyio

FIRST = "2026-10-24T09:00:00Z"
"""The one occurrence of every definition here (hourly from FIRST, ends after one)."""
OUT_OF_SCOPE = "source 'secret' is outside this definition's scope (sources = ['prices'])"


class Broken:
    """An agent whose answer is of the wrong shape: a permanent failure."""

    async def run(self, ctx: Any) -> AgentResult:
        raise AgentError("the answer was not a report", retryable=False)


class Reader:
    """Reads AAPL from 'prices' (in scope), then tries 'secret' (refused)."""

    async def run(self, ctx: Any) -> AgentResult:
        price = await ctx.sources.read("prices", "AAPL")
        with contextlib.suppress(ToolRefused):
            await ctx.sources.read("secret", "AAPL")
        return AgentResult(f"# AAPL\n\nAt {price.value} USD.",
                           headline=f"AAPL at {price.value} USD")


def spec(title: str, agent: str, **extra: Any) -> dict[str, Any]:
    """Hourly from FIRST, once."""
    return {"version": 1, "title": title, "agent": {"name": agent},
            "trigger": {"type": "interval", "every": 3600, "anchor": FIRST},
            "ends": {"after": 1}, "delivery": [{"channel": "log"}], **extra}


@pytest.fixture
async def api(db: Database, clock: FakeClock, tmp_path: Path) -> AsyncIterator[Api]:
    """The API and the page on the fake clock."""
    async with serving(db, clock, tmp_path) as running:
        yield running


async def ran(db: Database, clock: FakeClock, home: Path) -> str:
    """alice's three definitions confirmed an hour before FIRST, then one tick just
    after it runs all three; returns alice's token."""
    clock.set_wall(utc(FIRST) - timedelta(hours=1))
    token = await add_user(db, clock, "acme", "alice")
    alice = await authenticate(db, token)
    for definition_id, body in (("good", spec("Good one", "digest")),
                                ("bad", spec("Bad one", "broken")),
                                ("reader", spec("Reader", "reader", sources=["prices"]))):
        view = await propose_spec(db, clock, alice, definition_id=definition_id, spec=body,
                                  min_interval=timedelta(seconds=60))
        await confirm(db, clock, alice, definition_id=definition_id, revision=1,
                      spec_hash=view.proposal.spec_hash)
    catalog = AgentCatalog()
    catalog.add("broken", Broken())
    catalog.add("reader", Reader())
    sources = SourceRegistry([CallableSource("prices", "1", lambda subject, at: 9,
                                             unit="USD/share", currency="USD", now=clock.now)])
    clock.set_wall(utc(FIRST) + timedelta(seconds=1))
    await tick_once(db, clock, Settings(home=home, min_interval=60), agents=catalog,
                    sources=sources)
    return token


async def signed_in(api: Api, token: str) -> None:
    """Sign in as the holder of ``token``."""
    answer = await api.client.post("/sign-in", data={"token": token},
                                   headers={"Origin": api.url})
    assert answer.status_code == 303


def card(html: str, definition_id: str) -> str:
    """The list's section of ``definition_id``."""
    sections = re.findall(r'<section class="definition">.*?</section>', html, re.S)
    return next(s for s in sections if f"<code>{definition_id}</code>" in s)


async def test_the_list_shows_each_definitions_last_outcome_and_when(
        db: Database, clock: FakeClock, api: Api, tmp_path: Path) -> None:
    """After the tick, 'good' shows the badge completed and 'bad' failed (each its task's
    status in the database), both for the occurrence at 2026-10-24 09:00:00Z."""
    token = await ran(db, clock, tmp_path)
    statuses = {r["definition_id"]: r["status"] for r in await db.pool.fetch(
        "SELECT definition_id, status FROM tasks WHERE tenant_id = 'acme'")}
    assert statuses == {"good": "completed", "bad": "failed", "reader": "completed"}
    await signed_in(api, token)
    html = (await api.client.get("/")).text
    for definition_id, status in statuses.items():
        shown = card(html, definition_id)
        last = re.search(r'<span class="last">last <span class="badge s-([a-z_-]+)">([^<]+)'
                         r'</span>\s*<span class="when">([^<]+)</span>', shown)
        assert last is not None, shown
        assert last.group(2) == status and last.group(1) == status
        assert last.group(3) == "2026-10-24 09:00:00Z"


async def test_a_tasks_page_shows_the_headline_and_every_tool_call(
        db: Database, clock: FakeClock, api: Api, tmp_path: Path) -> None:
    """The reader's task page shows 'AAPL at 9 USD' and two tool calls: prices/AAPL ok
    with 9 USD/share, and secret/AAPL refused with the scope reason."""
    token = await ran(db, clock, tmp_path)
    task_id = await db.pool.fetchval("SELECT task_id FROM tasks WHERE tenant_id = 'acme' "
                                     "AND definition_id = 'reader'")
    await signed_in(api, token)
    html = (await api.client.get(f"/tasks/{task_id}")).text
    assert '<p class="headline">AAPL at 9 USD</p>' in html
    table = re.search(r'<table class="tool-calls">.*?</table>', html, re.S)
    assert table is not None, html
    rows = re.findall(r"<tr>\s*(.*?)</tr>", table.group(0).split("<tbody>")[1], re.S)
    cells = [[re.sub(r"<[^>]+>", " ", c).split() for c in re.findall(r"<td[^>]*>(.*?)</td>",
                                                                   row, re.S)] for row in rows]
    assert [(c[2], c[3], c[4], c[5]) for c in cells] == [
        (["read_observation"], ["prices"], ["AAPL"], ["ok"]),
        (["read_observation"], ["secret"], ["AAPL"], ["refused"])]
    assert cells[0][6][:2] == ["9", "USD/share"]
    assert html_text.unescape(" ".join(cells[1][6])) == OUT_OF_SCOPE
