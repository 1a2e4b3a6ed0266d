"""A proposal can be read back (issue 19, item 4): the revision awaiting its owner's
confirmation shows, at every door, what its proposal showed — the summary, the next
occurrences with their DST notes, the spec and its spec_hash — through one use case
(``usecases.read_definition``): ``GET /v1/definitions/{id}``, MCP ``show_agreement``
and the history page, each on a real uvicorn over real PostgreSQL, on a fake clock."""

from __future__ import annotations

import contextlib
import html
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx2
import pytest
from _api import Api, serving
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client

from watchkeeper.runtime.engine._clock import FakeClock
from watchkeeper.runtime.store._db import Database
from watchkeeper.runtime.usecases import add_user, create_key

pytestmark = pytest.mark.anyio

WEDNESDAY = {"version": 1, "title": "holdings",
             "trigger": {"type": "cron", "expr": "0 20 * * 3", "zone": "Europe/Paris"}}
NEXT_FROM_20_OCTOBER = [
    # Europe/Paris leaves summer time on Sunday 2026-10-25 at 01:00 UTC (+02:00 -> +01:00)
    ("2026-10-21T18:00:00Z", "2026-10-21T20:00:00+02:00"),
    ("2026-10-28T19:00:00Z", "2026-10-28T20:00:00+01:00"),
    ("2026-11-04T19:00:00Z", "2026-11-04T20:00:00+01:00"),
    ("2026-11-11T19:00:00Z", "2026-11-11T20:00:00+01:00"),
    ("2026-11-18T19:00:00Z", "2026-11-18T20:00:00+01:00")]


@pytest.fixture
async def api(db: Database, clock: FakeClock, tmp_path: Path) -> AsyncIterator[Api]:
    """The API with the MCP tools and the page, on the fake clock at 2026-10-20 00:00 UTC."""
    clock.step_wall(datetime(2026, 10, 20, tzinfo=UTC) - clock.now())
    async with serving(db, clock, tmp_path, mcp=True) as running:
        yield running


@contextlib.asynccontextmanager
async def mcp_client(api: Api, token: str) -> AsyncIterator[Client]:
    """The MCP SDK's client on ``/mcp`` with ``token`` as Bearer."""
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"},
                                  timeout=httpx2.Timeout(30)) as http, \
            Client(streamable_http_client(f"{api.url}/mcp", http_client=http)) as client:
        yield client


async def show_agreement(api: Api, token: str, definition_id: str) -> dict[str, Any]:
    """MCP ``show_agreement``'s structured answer (validated by the SDK's client)."""
    async with mcp_client(api, token) as client:
        result = await client.call_tool("show_agreement", {"definition_id": definition_id})
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return result.structured_content


async def page(api: Api, token: str, path: str) -> str:
    """The page at ``path`` as the holder of ``token`` sees it, as text."""
    signed = await api.client.post("/sign-in", data={"token": token, "next": path},
                                   headers={"Origin": api.url})
    assert signed.status_code == 303, signed.text
    answer = await api.client.get(path)
    assert answer.status_code == 200, answer.text
    return html.unescape(answer.text)


async def test_a_proposal_reads_back_as_it_was_proposed_at_every_door(
        db: Database, clock: FakeClock, api: Api) -> None:
    """An agent proposes Wednesday 20:00 Europe/Paris for alice on 2026-10-20: the API's
    show, MCP show_agreement and the page all answer the stored spec and spec_hash, the
    proposal's summary and the next five Wednesdays with the DST change noted; once
    revision 1 is confirmed and revision 2 (21:00) proposed, they show revision 1 as
    effective and revision 2 as the proposal awaiting confirmation."""
    alice = await add_user(db, clock, "acme", "alice")
    agent = (await create_key(db, clock, "agent", tenant_id="acme", name="chat")).token
    made = await api.call("POST", "/v1/definitions/holdings/revisions", agent,
                          body={"spec": WEDNESDAY, "owner": "alice"})
    assert made.status_code == 201, made.text
    proposed = made.json()
    stored = await db.pool.fetchrow(
        "SELECT spec, spec_hash FROM definition_revisions WHERE tenant_id = 'acme' AND "
        "definition_id = 'holdings' AND revision = 1")
    shown = (await api.call("GET", "/v1/definitions/holdings", agent)).json()
    by_mcp = await show_agreement(api, agent, "holdings")
    for answer in (shown, by_mcp):
        assert (answer["status"], answer["effective_revision"]) == ("proposed", None)
        assert (answer["spec_hash"], answer["spec"]) == (stored["spec_hash"], stored["spec"])
        assert answer["shows_revision"] == 1
        assert answer["summary"] == proposed["summary"]
        assert "20:00" in answer["summary"] and "Europe/Paris" in answer["summary"]
        assert [(n["scheduled_for"], n["local"]) for n in answer["next"]] == \
            NEXT_FROM_20_OCTOBER
        assert [n["note"] is not None for n in answer["next"]] == [False, True, False,
                                                                   False, False]
        assert "+02:00 -> +01:00" in answer["next"][1]["note"]
        awaiting = answer["proposal"]
        assert (awaiting["revision"], awaiting["spec_hash"], awaiting["spec"]) == (
            1, stored["spec_hash"], stored["spec"])
        assert awaiting["summary"] == proposed["summary"]
        assert awaiting["next"] == answer["next"] == proposed["next"]
        assert awaiting["proposed_by"].startswith("agent:")
        assert awaiting["confirm"] == proposed["confirm"]
    text = await page(api, alice, "/definitions/holdings")
    assert "Revision 1 awaits the owner's confirmation" in text
    assert stored["spec_hash"] in text and proposed["summary"] in text
    assert "UTC offset +02:00 -> +01:00" in text and "Wed 2026-10-21 20:00 (UTC+02:00)" in text
    assert '"expr": "0 20 * * 3"' in text
    listed = await page(api, alice, "/")
    assert proposed["summary"] in listed and "Revision 1 awaits" in listed

    done = await api.call("POST", "/v1/definitions/holdings/revisions/1/confirm", alice,
                          body={"spec_hash": stored["spec_hash"]})
    assert done.status_code == 200, done.text
    later = {**WEDNESDAY, "trigger": {**WEDNESDAY["trigger"], "expr": "0 21 * * 3"}}
    edit = await api.call("POST", "/v1/definitions/holdings/revisions", agent,
                          body={"spec": later, "owner": "alice", "based_on": 1})
    assert edit.status_code == 201, edit.text
    second = await db.pool.fetchval(
        "SELECT spec_hash FROM definition_revisions WHERE tenant_id = 'acme' AND "
        "definition_id = 'holdings' AND revision = 2")
    shown = (await api.call("GET", "/v1/definitions/holdings", alice)).json()
    by_mcp = await show_agreement(api, agent, "holdings")
    for answer in (shown, by_mcp):
        assert (answer["status"], answer["effective_revision"]) == ("active", 1)
        assert (answer["spec_hash"], answer["shows_revision"]) == (stored["spec_hash"], 1)
        assert answer["summary"] == proposed["summary"]
        assert answer["next"][0]["scheduled_for"] == "2026-10-21T18:00:00Z"
        awaiting = answer["proposal"]
        assert (awaiting["revision"], awaiting["spec_hash"]) == (2, second)
        assert "21:00" in awaiting["summary"] and awaiting["summary"] == edit.json()["summary"]
        assert [(n["scheduled_for"], n["local"]) for n in awaiting["next"][:2]] == [
            ("2026-10-21T19:00:00Z", "2026-10-21T21:00:00+02:00"),
            ("2026-10-28T20:00:00Z", "2026-10-28T21:00:00+01:00")]
    text = await page(api, alice, "/definitions/holdings")
    assert "Revision 2 awaits the owner's confirmation" in text and second in text
    assert edit.json()["summary"] in text and proposed["summary"] in text
