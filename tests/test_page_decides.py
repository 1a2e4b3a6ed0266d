"""The owner decides on the page (issue 19, item 5): a signed-in user confirms (the
form presents the spec_hash shown) or rejects a proposal, and pauses, resumes, runs now
and cancels an active definition, in Debian's chromium against a real uvicorn over real
PostgreSQL on a fake clock; each action goes through the API's use cases and is recorded
as ``user:acme/alice via page``. The forms need the session's CSRF token and the page's
own Origin; an operator session reads but never acts for a user."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from _api import Api, serving

from watchkeeper.runtime.engine._clock import FakeClock
from watchkeeper.runtime.store._db import Database
from watchkeeper.runtime.usecases import (
    add_user,
    authenticate,
    authenticate_bearer,
    confirm,
    create_key,
    propose_spec,
)

pytestmark = pytest.mark.anyio

START = datetime(2026, 10, 20, tzinfo=UTC)
"""A Tuesday; the next Wednesday 20:00 Europe/Paris is 2026-10-21T18:00:00Z (+02:00)."""
WEDNESDAY = {"version": 1, "title": "holdings",
             "trigger": {"type": "cron", "expr": "0 20 * * 3", "zone": "Europe/Paris"}}
LATER = {**WEDNESDAY, "trigger": {**WEDNESDAY["trigger"], "expr": "0 21 * * 3"}}
BY_PAGE = "user:acme/alice via page"


@pytest.fixture
async def api(db: Database, clock: FakeClock, tmp_path: Path) -> AsyncIterator[Api]:
    """The API and the page on the fake clock at :data:`START`."""
    clock.step_wall(START - clock.now())
    async with serving(db, clock, tmp_path) as running:
        yield running


async def world(db: Database, clock: FakeClock) -> dict[str, Any]:
    """acme: alice (token), an agent key that proposed 'holdings' (revision 1) for her,
    an operator key, and alice's confirmed 'weekly'."""
    tokens = {"alice": await add_user(db, clock, "acme", "alice")}
    for kind in ("agent", "operator"):
        tokens[kind] = (await create_key(db, clock, kind, tenant_id="acme", name="k")).token
    agent = await authenticate_bearer(db, clock, tokens["agent"])
    await propose_spec(db, clock, agent, definition_id="holdings", spec=WEDNESDAY,
                       owner_user_id="alice")
    alice = await authenticate(db, tokens["alice"])
    weekly = await propose_spec(db, clock, alice, definition_id="weekly", spec=WEDNESDAY)
    await confirm(db, clock, alice, definition_id="weekly", revision=1,
                  spec_hash=weekly.proposal.spec_hash)
    return {"tokens": tokens, "agent": agent}


async def definition(db: Database, definition_id: str = "holdings") -> Any:
    """The definition's row."""
    return await db.pool.fetchrow("SELECT status, status_by, effective_revision, fence, "
                                  "next_due_at FROM definitions WHERE tenant_id = 'acme' "
                                  "AND definition_id = $1", definition_id)


async def revision(db: Database, number: int) -> Any:
    """Revision ``number`` of 'holdings'."""
    return await db.pool.fetchrow(
        "SELECT status, spec_hash, confirmed_by, rejected_by FROM definition_revisions "
        "WHERE tenant_id = 'acme' AND definition_id = 'holdings' AND revision = $1", number)


async def click(page: Any, api: Api, button: str, done: str) -> None:
    """Click the button named ``button`` and wait for the definition's page to say
    ``done``."""
    await page.click(f"button[name='{button}']")
    await page.wait_for_url(f"{api.url}/definitions/holdings?done={done}")


async def test_the_owner_confirms_rejects_pauses_resumes_runs_and_cancels_in_chromium(
        db: Database, clock: FakeClock, api: Api, browser: Any) -> None:
    """alice confirms revision 1 (the hash the page showed is the stored one; next due
    2026-10-21T18:00Z), rejects revision 2, pauses, resumes, runs it now (one manual task)
    and cancels; each is recorded as 'user:acme/alice via page'."""
    w = await world(db, clock)
    page = await browser.new_page()
    await page.goto(api.url + "/sign-in")
    await page.fill("#token", w["tokens"]["alice"])
    await page.click("form[action='/sign-in'] button")
    await page.wait_for_url(api.url + "/")
    await page.goto(f"{api.url}/definitions/holdings")
    first = await revision(db, 1)
    assert await page.inner_text("code.spec-hash") == first["spec_hash"]
    assert await page.locator("button[name='pause']").count() == 0
    await click(page, api, "confirm", "confirm")
    assert "Confirmed" in await page.inner_text("p.done")
    assert dict(await revision(db, 1)) == {**dict(first), "status": "confirmed",
                                           "confirmed_by": BY_PAGE}
    row = await definition(db)
    assert (row["status"], row["effective_revision"], row["next_due_at"]) == (
        "active", 1, datetime(2026, 10, 21, 18, tzinfo=UTC))

    await propose_spec(db, clock, w["agent"], definition_id="holdings", spec=LATER,
                       owner_user_id="alice", based_on=1)
    await page.goto(f"{api.url}/definitions/holdings")
    assert "Revision 2 awaits" in await page.inner_text("section.proposal")
    fence = (await definition(db))["fence"]
    await click(page, api, "reject", "reject")
    assert (await revision(db, 2))["status"] == "rejected"
    assert (await revision(db, 2))["rejected_by"] == BY_PAGE
    row = await definition(db)
    assert (row["status"], row["effective_revision"], row["fence"]) == ("active", 1, fence)
    assert await page.locator("section.proposal").count() == 0

    await click(page, api, "pause", "pause")
    assert tuple(await definition(db))[:2] == ("paused", BY_PAGE)
    clock.step_wall(timedelta(hours=1))
    await click(page, api, "resume", "resume")
    assert tuple(await definition(db))[:2] == ("active", BY_PAGE)
    await click(page, api, "run", "run")
    manual = await db.pool.fetch(
        "SELECT o.kind, o.decided_by, t.status FROM occurrences o JOIN tasks t USING "
        "(tenant_id, definition_id, binding_id, slot) WHERE o.tenant_id = 'acme' AND "
        "o.definition_id = 'holdings'")
    assert [(m["kind"], m["decided_by"]) for m in manual] == [("manual", BY_PAGE)]
    await click(page, api, "cancel", "cancel")
    assert tuple(await definition(db))[:2] == ("cancelled", BY_PAGE)
    assert await page.locator("div.actions button").count() == 0
    await page.close()


async def test_an_operator_session_reads_but_cannot_act_for_a_user(
        db: Database, clock: FakeClock, api: Api, browser: Any) -> None:
    """Signed in with the operator key, alice's definitions show no button, and a form
    posted with the operator's own session token is 403 and changes nothing."""
    w = await world(db, clock)
    page = await browser.new_page()
    await page.goto(api.url + "/sign-in")
    await page.fill("#token", w["tokens"]["operator"])
    await page.click("form[action='/sign-in'] button")
    await page.wait_for_url(api.url + "/")
    for definition_id in ("holdings", "weekly"):
        await page.goto(f"{api.url}/definitions/{definition_id}")
        assert await page.locator("main form[method='post']").count() == 0
        assert "Only the owner" in await page.inner_text("main")
    cookie = next(c for c in await page.context.cookies()
                  if c["name"] == "watchkeeper_session")
    from watchkeeper.runtime.doors.page._session import csrf_token
    api.client.cookies.set("watchkeeper_session", cookie["value"])
    before = dict(await definition(db, "weekly"))
    answer = await api.client.post("/definitions/weekly/pause",
                                   data={"csrf": csrf_token(cookie["value"])},
                                   headers={"Origin": api.url})
    assert answer.status_code == 403, answer.text
    assert "An operator session cannot act for a user here" in answer.text
    assert dict(await definition(db, "weekly")) == before
    await page.close()


@pytest.mark.parametrize(("form", "headers"), [
    ({"revision": "1"}, {"Origin": "SELF"}),                 # no token
    ({"csrf": "0" * 64}, {"Origin": "SELF"}),                # another session's token
    ({"csrf": "GOOD"}, {"Origin": "https://evil.example"}),  # another site
    ({"csrf": "GOOD"}, {}),                                  # neither Origin nor Referer
])
async def test_an_action_needs_the_sessions_token_and_the_pages_origin(
        db: Database, clock: FakeClock, api: Api, form: dict[str, str],
        headers: dict[str, str]) -> None:
    """Pausing alice's 'weekly' without her session's CSRF token, or from another
    origin, is 403 and changes nothing; with both it pauses."""
    from watchkeeper.runtime.doors.page._session import csrf_token
    w = await world(db, clock)
    signed = await api.client.post("/sign-in", data={"token": w["tokens"]["alice"]},
                                   headers={"Origin": api.url})
    assert signed.status_code == 303
    good = csrf_token(api.client.cookies["watchkeeper_session"])
    before = dict(await definition(db, "weekly"))
    sent = {k: good if v == "GOOD" else v for k, v in form.items()}
    refused = await api.client.post("/definitions/weekly/pause", data=sent, headers={
        k: api.url if v == "SELF" else v for k, v in headers.items()})
    assert refused.status_code == 403 and "sent from another site" in refused.text
    assert dict(await definition(db, "weekly")) == before
    done = await api.client.post("/definitions/weekly/pause", data={"csrf": good},
                                 headers={"Origin": api.url})
    assert done.status_code == 303
    assert tuple(await definition(db, "weekly"))[:2] == ("paused", BY_PAGE)
