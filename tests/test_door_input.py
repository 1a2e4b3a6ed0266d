"""What the doors accept, against a real uvicorn and real PostgreSQL (issue 18): a NUL
anywhere is a 422 naming the field, identifiers follow the identifier rule, instants
outside 1970-2200 are a 422 naming the field (never an OverflowError's 500), instants
are RFC 3339 text only (as the schema says), redelivery finds its notice by id however
many are newer, a body over the limit is 413 before it is parsed, free text has limits
stated in the schema, and every answer says nosniff (a non-HTML one with a CSP)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from _api import Api, serving
from _helpers import confirmed
from test_mcp import over_http, refused, structured

from watchkeeper.outbox import Dispatcher, LogChannel
from watchkeeper.runtime import Settings
from watchkeeper.runtime.engine._agents import AgentCatalog
from watchkeeper.runtime.engine._clock import FakeClock
from watchkeeper.runtime.engine._delivery_store import PgDeliveryStore
from watchkeeper.runtime.engine._worker import Worker
from watchkeeper.runtime.store._db import Database
from watchkeeper.runtime.usecases import add_user, authenticate, create_key, trigger_now

pytestmark = pytest.mark.anyio

WEDNESDAY = {"version": 1, "trigger": {"type": "cron", "expr": "0 20 * * 3",
                                       "zone": "Europe/Paris"}}
TOO_LATE = "9999-12-31T23:59:59-14:00"  # 10000-01-01T13:59:59Z: past Python's last date
TOO_EARLY = "0001-01-01T00:00:00+14:00"  # 0000-12-31T10:00:00Z: before its first


@dataclass
class Keys:
    alice: str
    agent: str
    app: str
    operator: str


@pytest.fixture
async def keys(db: Database, clock: FakeClock) -> Keys:
    """acme: alice (who owns the confirmed definition 'h'), an agent, app and operator key."""
    alice = await add_user(db, clock, "acme", "alice")
    await confirmed(db, clock, WEDNESDAY, definition_id="h",
                    principal=await authenticate(db, alice))
    made = {kind: (await create_key(db, clock, kind, tenant_id="acme", name=kind)).token
            for kind in ("agent", "app", "operator")}
    return Keys(alice, made["agent"], made["app"], made["operator"])


@pytest.fixture
async def api(db: Database, clock: FakeClock, tmp_path: Path) -> AsyncIterator[Api]:
    """The API with the MCP tools, over the test's database, on the fake clock."""
    async with serving(db, clock, tmp_path, mcp=True) as running:
        yield running


def fields(response: Any, status: int = 422) -> list[str]:
    """The fields a problem answer names (asserting its status and media type)."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    return [e["field"] for e in response.json()["errors"]]


async def test_a_nul_anywhere_a_door_reads_is_422_naming_the_field(api: Api, keys: Keys) -> None:
    """A NUL in a query, path or body string, over HTTP and MCP, is refused 422 naming
    the field (it used to reach SQL and answer 500); identifiers follow the identifier
    rule in the MCP tools too."""
    op = keys.operator
    assert fields(await api.call("GET", "/v1/history", op, definition="x\x00")) == ["definition"]
    assert fields(await api.call("GET", "/v1/history", op, user="x\x00")) == ["user"]
    assert fields(await api.call("GET", "/v1/history", op, status="x\x00")) == ["status"]
    assert fields(await api.call("GET", "/v1/definitions/h/polls", op, cursor="x\x00")) == [
        "cursor"]
    assert fields(await api.call("GET", "/v1/definitions/x%00", op)) == ["definition_id"]
    assert fields(await api.call("POST", "/v1/definitions/h/reviews", keys.alice,
                                 body={"slot": "x\x00", "decision": "skip"})) == ["slot"]
    assert fields(await api.call("POST", "/v1/webhooks", op, body={
        "name": "ops", "url": "https://example.com/\x00"})) == ["url"]
    assert fields(await api.call("GET", "/v1/history", op, definition="a b")) == ["definition"]
    async with over_http(api, keys.agent) as client:
        for tool, args, field in (
                ("show_agreement", {"definition_id": "x\x00"}, "definition_id"),
                ("show_agreement", {"definition_id": "a b"}, "definition_id"),
                ("task_history", {"definition_id": "x\x00"}, "definition_id"),
                ("task_history", {"user": "x\x00"}, "user"),
                ("task_history", {"user": "a/b"}, "user"),
                ("task_history", {"status": "x\x00"}, "status"),
                ("condition_timeline", {"definition_id": "h", "cursor": "x\x00"}, "cursor"),
                ("propose_agreement", {"definition_id": "n", "owner": "al\x00ice",
                                       "spec": WEDNESDAY}, "owner")):
            problem = refused(await client.call_tool(tool, args))
            assert (problem["status"], [e["field"] for e in problem["errors"]]) == (
                422, [field]), (tool, args, problem)
        assert structured(await client.call_tool("task_history", {"definition_id": "h"}))


async def test_an_instant_outside_the_range_is_422_naming_it(api: Api, keys: Keys) -> None:
    """An instant Python cannot convert to UTC (or past 2200) is refused 422 naming the
    field, over HTTP and MCP (it used to be a plain-text 500, OverflowError); an instant
    in range with an unusual offset is fine; a preview whose next slots pass year 9999
    lists those before it."""
    op = keys.operator
    assert fields(await api.call("POST", "/v1/previews", keys.agent, body={
        "spec": WEDNESDAY, "after": "9999-12-31T23:59:59Z"})) == ["after"]
    assert fields(await api.call("GET", "/v1/history", op, since=TOO_LATE)) == ["since"]
    assert fields(await api.call("GET", "/v1/history", op, until=TOO_EARLY)) == ["until"]
    assert fields(await api.call("GET", "/v1/history", op, since="2300-01-01T00:00:00Z")) == [
        "since"]
    for value in (TOO_LATE, TOO_EARLY):
        assert fields(await api.call("GET", "/v1/definitions/h/polls", op, since=value)) == [
            "since"]
    fine = await api.call("GET", "/v1/history", op, since="2026-01-01T00:00:00-14:00")
    assert fine.status_code == 200, fine.text
    decade = {"version": 1, "trigger": {"type": "interval", "every": "P3660D"}}
    slots = await api.call("POST", "/v1/previews", keys.agent, body={
        "spec": decade, "after": "1970-01-01T00:00:00Z", "count": 1000})
    assert slots.status_code == 200, slots.text
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    fitting = (datetime.max.replace(tzinfo=UTC) - epoch) // timedelta(days=3660)  # 801
    last = epoch + fitting * timedelta(days=3660)
    assert [len(slots.json()["next"]), slots.json()["next"][-1]["scheduled_for"]] == [
        fitting, last.isoformat().replace("+00:00", "Z")]
    async with over_http(api, keys.agent) as client:
        for tool, args, field in (
                ("preview_schedule", {"spec": WEDNESDAY, "after": "9999-12-31T23:59:59Z"},
                 "after"),
                ("task_history", {"since": TOO_LATE}, "since"),
                ("task_history", {"until": TOO_EARLY}, "until"),
                ("condition_timeline", {"definition_id": "h", "since": TOO_LATE}, "since")):
            problem = refused(await client.call_tool(tool, args))
            assert (problem["status"], [e["field"] for e in problem["errors"]]) == (
                422, [field]), (tool, args, problem)


async def test_instants_are_date_time_text_as_the_schema_says(api: Api, keys: Keys) -> None:
    """since, until and after are RFC 3339 date-time text, as the document declares: a
    number (read as Unix seconds until now) and a time without an offset are refused 422
    naming the field, in a spec too (``anchor``, ``until``); a boolean is no number of
    hours; a duration is an ISO 8601 string or seconds, and the document says both, so
    ``cooldown: 0`` is valid by the schema and accepted."""
    op = keys.operator
    for value in ("0.5", "1700000000", "2026-03-29T01:00:00"):
        assert fields(await api.call("GET", "/v1/history", op, since=value)) == ["since"]
        assert fields(await api.call("GET", "/v1/history", op, until=value)) == ["until"]
        assert fields(await api.call("GET", "/v1/definitions/h/polls", op, since=value)) == [
            "since"]
    assert fields(await api.call("POST", "/v1/previews", keys.agent, body={
        "spec": WEDNESDAY, "after": 0.5})) == ["after"]
    hourly = {"version": 1, "trigger": {"type": "interval", "every": 3600, "anchor": 0},
              "ends": {"until": "1.5"}}
    assert fields(await api.call("POST", "/v1/previews", keys.agent, body={
        "spec": hourly})) == ["trigger.anchor", "ends.until"]
    await api.call("POST", "/v1/webhooks", op, body={"name": "ops", "url": "https://e.com/"})
    assert fields(await api.call("POST", "/v1/webhooks/ops/rotate", op, body={
        "overlap_hours": False})) == ["overlap_hours"]
    document = (await api.call("GET", "/openapi.json")).json()
    history = {p["name"]: p["schema"] for p in document["paths"]["/v1/history"]["get"][
        "parameters"]}
    assert history["since"]["anyOf"][0] == {"type": "string", "format": "date-time"}
    schemas = document["components"]["schemas"]
    assert schemas["ConditionTrigger"]["properties"]["cooldown"]["anyOf"][1] == {
        "type": "number", "minimum": 0, "description": "seconds"}
    condition = {"version": 1, "trigger": {
        "type": "condition", "mode": "every_edge", "poll_every": 86400, "cooldown": 0,
        "source": {"name": "prices", "version": "1"},
        "predicate": {"subject": "x", "op": "<=", "threshold": "5 USD"}}}
    previewed = await api.call("POST", "/v1/previews", keys.agent, body={"spec": condition})
    assert previewed.status_code == 200, previewed.text
    async with over_http(api, keys.agent) as client:
        assert (await client.call_tool("task_history", {"since": 0.5})).is_error


async def test_redeliver_finds_its_notice_behind_a_thousand_newer_ones(
        db: Database, clock: FakeClock, api: Api, keys: Keys, tmp_path: Path) -> None:
    """A delivered notice with 1,000 newer ones in its tenant is redelivered and answered
    by its id (it used to be re-queued, then answered 500 from a lookup among the newest
    1,000, and a retry 409)."""
    await trigger_now(db, clock, await authenticate(db, keys.alice), "acme", "h")
    assert await Worker(db, clock, AgentCatalog(), worker_id="w",
                        artifact_root=tmp_path).run_once()
    dispatcher = Dispatcher(PgDeliveryStore(db, clock), {"log": LogChannel()}, now=clock.now,
                            owner="d")
    await dispatcher.dispatch_once()
    old = await db.pool.fetchrow("SELECT delivery_id, task_id, status FROM deliveries")
    assert old["status"] == "delivered"
    await db.pool.execute(  # 1,000 newer notices of the same report, to other destinations
        "INSERT INTO deliveries (tenant_id, delivery_id, task_id, channel, destination, "
        "status, next_attempt_at, queued_at, created_at) SELECT 'acme', gen_random_uuid(), "
        "$1, 'file', 'n' || i || '.jsonl', 'delivered', $2::timestamptz, $2::timestamptz, "
        "$2::timestamptz + i * interval '1 ms' FROM generate_series(1, 1000) AS i",
        old["task_id"], clock.now() + timedelta(hours=1))
    answer = await api.call("POST", f"/v1/deliveries/{old['delivery_id']}/redeliver",
                            keys.operator)
    assert answer.status_code == 200, answer.text
    assert {k: answer.json()[k] for k in ("delivery_id", "status", "redeliveries", "channel")} \
        == {"delivery_id": str(old["delivery_id"]), "status": "pending", "redeliveries": 1,
            "channel": "log"}


async def test_a_body_over_the_limit_is_413_before_it_is_parsed(
        db: Database, clock: FakeClock, api: Api, keys: Keys, tmp_path: Path) -> None:
    """By default 1 MiB: a 2 MiB proposal (an agent stored 10 MB instructions before) is
    413 with problem details naming ``body``, declared or chunked, and not JSON at all
    (never parsed); nothing is stored. WATCHKEEPER_MAX_BODY_BYTES sets the limit. Free
    text has limits the schema states: 20,001 characters of instructions are a 422."""
    assert Settings().max_body_bytes == 1024 * 1024
    huge = {"owner": "alice", "spec": {**WEDNESDAY, "instructions": "x" * (2 << 20)}}
    assert fields(await api.call("POST", "/v1/definitions/big/revisions", keys.agent,
                                 body=huge), 413) == ["body"]

    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(40):
            yield b"x" * 65536

    chunked = await api.client.post("/v1/definitions/big/revisions", content=chunks(),
                                     headers={"Authorization": f"Bearer {keys.agent}"})
    assert "content-length" not in chunked.request.headers
    assert fields(chunked, 413) == ["body"]
    document = (await api.call("GET", "/openapi.json")).json()
    spec = document["components"]["schemas"]["Spec"]["properties"]
    assert [spec[f]["maxLength"] for f in ("title", "notes", "instructions")] == [
        200, 4000, 20000]
    long = {"owner": "alice", "spec": {**WEDNESDAY, "instructions": "x" * 20_001}}
    assert fields(await api.call("POST", "/v1/definitions/big/revisions", keys.agent,
                                 body=long)) == ["instructions"]
    assert await db.pool.fetchval("SELECT count(*) FROM definitions") == 1  # 'h' alone
    small = Settings(home=tmp_path, min_interval=60, max_body_bytes=2048)
    async with serving(db, clock, tmp_path, settings=small) as limited:
        refused_ = await limited.client.post(
            "/v1/previews", content=b"{" + b" " * 3000, headers={
                "Authorization": f"Bearer {keys.agent}", "content-type": "application/json"})
        assert fields(refused_, 413) == ["body"]
        assert "2048 bytes" in refused_.json()["errors"][0]["message"]
        fine = await limited.call("POST", "/v1/previews", keys.agent, body={"spec": WEDNESDAY})
        assert fine.status_code == 200, fine.text


async def test_every_answer_says_nosniff_and_a_non_html_one_has_a_csp(
        db: Database, clock: FakeClock, api: Api, keys: Keys, tmp_path: Path) -> None:
    """JSON, problem details, markdown, the metrics text, a 413 and the OpenAPI document
    carry ``X-Content-Type-Options: nosniff`` and ``default-src 'none'``; the page keeps
    its own policy (style sheet allowed), with nosniff too."""
    await trigger_now(db, clock, await authenticate(db, keys.alice), "acme", "h")
    assert await Worker(db, clock, AgentCatalog(), worker_id="w",
                        artifact_root=tmp_path).run_once()
    task = await db.pool.fetchval("SELECT task_id FROM tasks")
    answers = {
        "json": await api.call("GET", "/v1/definitions", keys.operator),
        "problem": await api.call("GET", "/v1/definitions", "nope"),
        "markdown": await api.call("GET", f"/v1/tasks/{task}/report", keys.alice,
                                   headers={"Accept": "text/markdown"}),
        "metrics": await api.call("GET", "/metrics"),
        "openapi": await api.call("GET", "/openapi.json"),
        "too large": await api.client.post("/v1/previews", content=b"x" * (2 << 20)),
    }
    assert answers["markdown"].headers["content-type"].startswith("text/markdown")
    assert {name: (r.headers.get("x-content-type-options"),
                   r.headers.get("content-security-policy")) for name, r in answers.items()} \
        == dict.fromkeys(answers, ("nosniff", "default-src 'none'; frame-ancestors 'none'"))
    page = await api.call("GET", "/sign-in")
    assert page.headers["content-type"].startswith("text/html")
    assert page.headers["x-content-type-options"] == "nosniff"
    assert "style-src 'self'" in page.headers["content-security-policy"]
