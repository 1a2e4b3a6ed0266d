"""The history page over HTTP (httpx against a real uvicorn, real PostgreSQL, a fake
clock): signing in and out, which credentials the page refuses, the Origin check on its
forms, what each viewer may see (another tenant's and another user's ids are 404), an
agent-written report shown escaped, keyset paging, and a condition's poll timeline."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from _api import Api, serving
from _page import ETF, ETF_TITLE, SECRET, SECRET_TITLE, WEEKLY, demo_run

from watchkeeper.runtime import AgentCatalog, Settings
from watchkeeper.runtime.engine._clock import FakeClock
from watchkeeper.runtime.store._db import Database
from watchkeeper.runtime.usecases import (
    add_user,
    authenticate,
    confirm,
    propose_spec,
    revoke_key,
    tick_once,
    trigger_now,
)
from watchkeeper.sources import CallableSource, SourceRegistry

pytestmark = pytest.mark.anyio


@pytest.fixture
async def api(db: Database, clock: FakeClock, tmp_path: Path) -> AsyncIterator[Api]:
    """The API (and so the page) over the test's database, on the fake clock."""
    async with serving(db, clock, tmp_path) as running:
        yield running


async def sign_in(api: Api, token: str, **extra: str) -> httpx.Response:
    """POST the sign-in form as a browser on the page's own origin would."""
    return await api.client.post("/sign-in", data={"token": token, **extra},
                                 headers={"Origin": api.url})


def entries(html: str) -> list[str]:
    """The slots of the history entries on a page, in order."""
    return re.findall(r'<span class="slot">([^<]*)</span>', html)


async def test_sign_in_sets_a_strict_httponly_cookie_and_sign_out_clears_it(
        db: Database, clock: FakeClock, api: Api, tmp_path: Path) -> None:
    """A user token signs in (303 to ``next``, an HttpOnly SameSite=Strict cookie with a
    session id for 12 h, not Secure over http); the page then shows alice's definitions; signing out
    clears the cookie and the page asks to sign in again."""
    demo = await demo_run(db, clock, tmp_path)
    assert (await api.client.get("/")).headers["location"] == "/sign-in"
    done = await sign_in(api, demo.tokens["alice"], next=f"/definitions/{ETF}")
    assert done.status_code == 303 and done.headers["location"] == f"/definitions/{ETF}"
    cookie = done.headers["set-cookie"]
    assert re.match(r"watchkeeper_session=wkpage_[A-Za-z0-9_-]{43};", cookie)
    attributes = {part.strip().lower() for part in cookie.split(";")[1:]}
    assert attributes == {"httponly", "max-age=43200", "path=/", "samesite=strict"}
    home = await api.client.get("/")
    assert home.status_code == 200 and home.headers["cache-control"] == "no-store"
    assert "script-src" not in home.headers["content-security-policy"]
    assert "default-src 'none'" in home.headers["content-security-policy"]
    assert ETF_TITLE in home.text and "Weekly rank check" in home.text
    out = await api.client.post("/sign-out", headers={"Origin": api.url})
    assert out.status_code == 303 and out.headers["location"] == "/sign-in"
    assert 'watchkeeper_session=""' in out.headers["set-cookie"]
    assert "max-age=0" in out.headers["set-cookie"].lower()
    assert (await api.client.get("/")).status_code == 303


@pytest.mark.parametrize(("who", "status", "says"), [
    ("agent@acme", 403, "An agent key reads through the API"),
    ("tick", 403, "The tick secret drives ticks"),
    ("app@acme", 401, "An app key acts for users"),
    ("wk_not-a-token", 401, "That credential was not accepted"),
    ("", 401, "That credential was not accepted (no credential"),
])
async def test_only_a_user_token_or_an_operator_key_signs_in(
        db: Database, clock: FakeClock, api: Api, tmp_path: Path, who: str, status: int,
        says: str) -> None:
    """An agent key and the tick secret are refused (403), an app key, an unknown token
    and an empty field are not accepted (401); none sets a cookie, and the page stays
    closed."""
    demo = await demo_run(db, clock, tmp_path)
    answer = await sign_in(api, demo.tokens.get(who, who))
    assert answer.status_code == status
    assert says in answer.text
    assert "set-cookie" not in answer.headers
    assert (await api.client.get("/")).status_code == 303


async def test_the_forms_refuse_another_origin(db: Database, clock: FakeClock, api: Api,
                                               tmp_path: Path) -> None:
    """Sign-in from another origin, with Origin: null, or with neither Origin nor
    Referer is 403 and sets no cookie; a same-origin Referer without Origin is accepted;
    sign-out from another origin is refused and leaves the session alone."""
    demo = await demo_run(db, clock, tmp_path)
    form = {"token": demo.tokens["alice"]}
    for headers in ({"Origin": "https://evil.example"}, {"Origin": "null"}, {},
                    {"Referer": "https://evil.example/page"}):
        refused = await api.client.post("/sign-in", data=form, headers=headers)
        assert refused.status_code == 403, headers
        assert "sent from another site" in refused.text and "set-cookie" not in refused.headers
    accepted = await api.client.post("/sign-in", data=form,
                                     headers={"Referer": f"{api.url}/sign-in"})
    assert accepted.status_code == 303
    kept = await api.client.post("/sign-out", headers={"Origin": "https://evil.example"})
    assert kept.status_code == 403 and "set-cookie" not in kept.headers
    assert (await api.client.get("/")).status_code == 200


async def test_each_viewer_sees_only_their_own(db: Database, clock: FakeClock, api: Api,
                                               tmp_path: Path) -> None:
    """alice sees her definitions and tasks, not globex's (404 for its definition, its
    task and its polls); bob, another user of acme, gets 404 for alice's; acme's
    operator sees alice's too, but not globex's; a malformed task id is 404."""
    demo = await demo_run(db, clock, tmp_path)
    bob = await add_user(db, clock, "acme", "bob")
    alice_task, globex_task = demo.acme_tasks[0], demo.globex_tasks[0]
    visible = {"alice": (200, 404), "bob": (404, 404), "operator@acme": (200, 404)}
    for who, (own, other) in visible.items():
        api.client.cookies.clear()
        assert (await sign_in(api, bob if who == "bob" else demo.tokens[who])).status_code == 303
        home = (await api.client.get("/")).text
        assert (ETF_TITLE in home) is (own == 200), who
        assert SECRET not in home and SECRET_TITLE not in home
        for path, status in ((f"/definitions/{ETF}", own), (f"/tasks/{alice_task}", own),
                             (f"/definitions/{SECRET}", other), (f"/tasks/{globex_task}", other),
                             (f"/definitions/{SECRET}/polls", other),
                             ("/tasks/not-a-number", 404), ("/tasks/0", 404)):
            answer = await api.client.get(path)
            assert answer.status_code == status, (who, path)
            assert SECRET_TITLE not in answer.text
            if status == 404:
                assert "There is no such" in answer.text
                assert answer.headers["content-type"].startswith("text/html")


async def test_an_agent_written_report_is_shown_escaped(db: Database, clock: FakeClock,
                                                        api: Api, tmp_path: Path) -> None:
    """A report with a script tag, an inline handler and a javascript: link is rendered
    as markdown with every tag shown as text: no <script>, no <img>, no javascript:
    href; its bold is bold; a title with a tag is escaped on the list too."""
    demo = await demo_run(db, clock, tmp_path, hostile_task=True)
    await sign_in(api, demo.tokens["alice"])
    task_id = await db.pool.fetchval("SELECT task_id FROM tasks WHERE definition_id = 'hostile'")
    page = await api.client.get(f"/tasks/{task_id}")
    assert page.status_code == 200
    report = re.search(r'<article class="report">(.*?)</article>', page.text, re.S)
    assert report is not None
    shown = report.group(1)
    assert "<h1>Holdings &lt;script&gt;document.title='pwned'&lt;/script&gt;</h1>" in shown
    assert "&lt;img src=x onerror=&quot;document.title='pwned'&quot;&gt;" in shown
    assert "<strong>bold</strong>" in shown
    assert "<script" not in page.text.lower() and "<img" not in page.text.lower()
    assert 'href="javascript:' not in page.text.lower()
    assert "&lt;script&gt;" in page.text.split('<pre class="markdown">')[1]
    home = (await api.client.get("/")).text
    assert "&lt;b&gt;bold&lt;/b&gt; title" in home and "<b>bold</b>" not in home


async def test_a_revoked_key_signs_the_operator_out(db: Database, clock: FakeClock, api: Api,
                                                    tmp_path: Path) -> None:
    """After its key is revoked, the operator's next click goes to the sign-in form
    with the reason, and the cookie is cleared."""
    demo = await demo_run(db, clock, tmp_path)
    await sign_in(api, demo.tokens["operator@acme"])
    assert (await api.client.get("/")).status_code == 200
    key_id = demo.tokens["operator@acme"].split("_")[2]
    await revoke_key(db, clock, key_id)
    answer = await api.client.get(f"/definitions/{ETF}")
    assert answer.status_code == 303
    assert answer.headers["location"] == f"/sign-in?next=%2Fdefinitions%2F{ETF}&why=expired"
    assert "max-age=0" in answer.headers["set-cookie"].lower()
    form = await api.client.get(answer.headers["location"])
    assert "Your sign-in no longer holds" in form.text
    assert f'name="next" value="/definitions/{ETF}"' in form.text


async def test_history_and_definitions_page_with_opaque_cursors(
        db: Database, clock: FakeClock, api: Api, tmp_path: Path) -> None:
    """25 manual occurrences of the weekly definition page as 20 + 5, newest first,
    none repeated, by following the 'Older' link; her 2 definitions and 21 more
    proposals list as 20 + 3; a forged cursor is a 400 page naming 'cursor'."""
    demo = await demo_run(db, clock, tmp_path)
    me = await authenticate(db, demo.tokens["alice"])
    for _ in range(25):
        clock.advance(1)
        await trigger_now(db, clock, me, "acme", WEEKLY)
    await sign_in(api, demo.tokens["alice"])
    seen, sizes, link = [], [], f"/definitions/{WEEKLY}"
    while link:
        page = await api.client.get(link.replace("&amp;", "&"))
        assert page.status_code == 200
        sizes.append(len(entries(page.text)))
        seen += entries(page.text)
        found = re.search(r'<a rel="next" href="([^"]+)">Older', page.text)
        link = found.group(1) if found else ""
    assert sizes == [20, 5] and len(set(seen)) == 25 and seen == sorted(seen, reverse=True)
    for n in range(21):
        await propose_spec(db, clock, me, definition_id=f"p{n:02d}", spec={
            "version": 1, "trigger": {"type": "interval", "every": 3600}})
    first = await api.client.get("/")
    assert first.text.count('<section class="definition">') == 20
    more = re.search(r'<a rel="next" href="(/\?cursor=[^"]+)"', first.text)
    assert more is not None
    second = await api.client.get(more.group(1))
    assert second.text.count('<section class="definition">') == 3
    assert "More definitions" not in second.text
    forged = await api.client.get(f"/definitions/{WEEKLY}", params={"cursor": "bm90LWEtY3Vyc29y"})
    assert forged.status_code == 400 and "cursor: is not a cursor of this list." in forged.text


async def test_a_conditions_poll_timeline(db: Database, clock: FakeClock, api: Api,
                                          tmp_path: Path) -> None:
    """Hourly polls reading 11, 9, nothing, 9, 9 USD/share against '<= 10' show false,
    true (fired, with its task), unknown, true (no edge: the unknown did not re-arm),
    true, oldest first; the changes view leaves out the last (same verdict, no
    action); 'from the start' reads forwards."""
    token = await add_user(db, clock, "acme", "carol")
    me = await authenticate(db, token)
    start = clock.now()
    readings = {start + timedelta(hours=h + 1): v for h, v in enumerate([11, 9, None, 9, 9])}
    sources = SourceRegistry([CallableSource(
        "prices", "1", lambda subject, at: readings.get(at), unit="USD/share", currency="USD",
        now=clock.now)])
    spec: dict[str, Any] = {"version": 1, "title": "AAPL at or below 10", "delivery": [],
                            "trigger": {"type": "condition", "mode": "every_edge",
                                        "source": {"name": "prices", "version": "1"},
                                        "poll_every": "PT1H", "predicate": {
                                            "subject": "AAPL", "op": "<=",
                                            "threshold": "10 USD/share"}}}
    view = await propose_spec(db, clock, me, definition_id="aapl", spec=spec)
    await confirm(db, clock, me, definition_id="aapl", revision=1,
                  spec_hash=view.proposal.spec_hash)
    settings = Settings(home=tmp_path, min_interval=60)
    for _ in readings:
        clock.advance(3600)
        await tick_once(db, clock, settings, agents=AgentCatalog(), sources=sources)
    task_id = await db.pool.fetchval("SELECT task_id FROM tasks WHERE definition_id = 'aapl'")
    await sign_in(api, token)
    assert "/definitions/aapl/polls" in (await api.client.get("/definitions/aapl")).text
    page = (await api.client.get("/definitions/aapl/polls")).text
    rows = [r.strip() for r in re.findall(r"<tr>\s*<td>([^<]+)", page)]
    assert rows == [f"{start + timedelta(hours=h):%Y-%m-%d %H:%M:%S}Z" for h in (1, 2, 3, 4, 5)]
    verdicts = re.findall(r'<td class="verdict">(?:\w+ → )?<span class="badge s-(\w+)">', page)
    assert verdicts == ["false", "true", "unknown", "true", "true"]
    assert page.count(f'<a href="/tasks/{task_id}">task {task_id}</a>') == 1
    assert "AAPL = 11 USD/share USD" in page
    changes = (await api.client.get("/definitions/aapl/polls", params={"changes": "true"})).text
    assert len(re.findall(r"<tr>\s*<td>", changes)) == 4
    start_view = (await api.client.get("/definitions/aapl/polls",
                                       params={"start": "true"})).text
    assert "From the first poll." in start_view and len(re.findall(r"<tr>\s*<td>", start_view)) == 5



@pytest.mark.parametrize(("asked", "goes_to"), [
    ("/tasks/3?x=1", "/tasks/3?x=1"), ("//evil.example/x", "/"), ("/\\evil.example", "/"),
    ("https://evil.example/", "/"), ("tasks/3", "/"), ("", "/"),
])
async def test_sign_in_only_ever_goes_on_to_this_site(db: Database, clock: FakeClock, api: Api,
                                                      tmp_path: Path, asked: str,
                                                      goes_to: str) -> None:
    """``next`` is followed only when it is a path of this site; anything else (another
    host, a scheme-relative or backslash URL, a relative path) goes to ``/``, in the
    form's hidden field and in the redirect after signing in."""
    token = await add_user(db, clock, "acme", "alice")
    form = await api.client.get("/sign-in", params={"next": asked})
    assert f'name="next" value="{goes_to}"' in form.text.replace("&amp;", "&")
    done = await sign_in(api, token, next=asked)
    assert done.status_code == 303 and done.headers["location"] == goes_to


async def test_the_cookie_holds_a_server_side_session_that_ends_for_good(
        db: Database, clock: FakeClock, api: Api, tmp_path: Path) -> None:
    """The cookie is a random session id stored only as its SHA-256, never the token,
    and no Bearer credential of the API (401). A copy of it (a stolen cookie) stops
    working when the owner signs out; a session ends 12 h after sign-in (open at
    12 h - 1 s); replacing the user's token and revoking the operator's key end their
    sessions, each recorded with why (issue 18, item 11)."""
    import hashlib

    demo = await demo_run(db, clock, tmp_path)
    token = demo.tokens["alice"]

    async def session_of(who: str) -> str:
        done = await sign_in(api, demo.tokens[who])
        assert done.status_code == 303, done.text
        return str(api.client.cookies["watchkeeper_session"])

    async def opens(session: str) -> bool:
        async with httpx.AsyncClient(base_url=api.url,
                                     cookies={"watchkeeper_session": session}) as other:
            answer = await other.get("/")
        assert answer.status_code in (200, 303), answer.status_code
        return answer.status_code == 200

    async def why(session: str) -> str | None:
        return await db.pool.fetchval("SELECT revoked_why FROM page_sessions "
                                      "WHERE session_sha256 = $1",
                                      hashlib.sha256(session.encode()).digest())

    session = await session_of("alice")
    assert re.fullmatch(r"wkpage_[A-Za-z0-9_-]{43}", session) and token not in session
    stored = [str(tuple(r)) for r in await db.pool.fetch("SELECT * FROM page_sessions")]
    assert len(stored) == 1 and session not in stored[0] and token not in stored[0]
    row = await db.pool.fetchrow("SELECT kind, user_id, expires_at - created_at AS lasts "
                                 "FROM page_sessions WHERE session_sha256 = $1",
                                 hashlib.sha256(session.encode()).digest())
    assert (row["kind"], row["user_id"], row["lasts"]) == ("user", "alice", timedelta(hours=12))
    assert (await api.call("GET", "/v1/definitions", session)).status_code == 401
    assert await opens(session)  # a copy of the cookie opens the page, until ...
    out = await api.client.post("/sign-out", headers={"Origin": api.url})
    assert out.status_code == 303
    assert not await opens(session) and await why(session) == "signed out"

    session = await session_of("alice")
    clock.advance(12 * 3600 - 1)
    assert await opens(session)
    clock.advance(1)
    assert not await opens(session)

    session = await session_of("alice")
    rotated = await api.call("POST", "/v1/users/alice/token", demo.tokens["operator@acme"])
    assert rotated.status_code == 200, rotated.text
    assert not await opens(session) and await why(session) == "token replaced"

    session = await session_of("operator@acme")
    assert await opens(session)
    await revoke_key(db, clock, demo.tokens["operator@acme"].split("_")[2])
    assert not await opens(session) and await why(session) == "key revoked"
