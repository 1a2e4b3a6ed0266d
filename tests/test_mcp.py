"""The MCP tools as a chat client uses them, with the SDK's own client, against real
PostgreSQL: over streamable HTTP on a real uvicorn serving the API with ``/mcp``
mounted, and over stdio spawning ``python -m watchkeeper mcp``. No tool confirms; the
propose tool's input schema is the spec model's; a spec with three mistakes answers
all three at once; another tenant's agreements do not exist."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import anyio
import httpx2
import jsonschema
import pytest
from _api import Api, serving
from _helpers import confirmed, owner
from _served import served
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult

from watchkeeper.runtime import Settings
from watchkeeper.runtime.engine import AgentCatalog
from watchkeeper.runtime.engine._clock import FakeClock
from watchkeeper.runtime.store._db import Database
from watchkeeper.runtime.usecases import add_user, create_key, revoke_key, tick_once
from watchkeeper.sources import SourceRegistry
from watchkeeper.triggers import SpecV1

pytestmark = pytest.mark.anyio

TOOLS = {"propose_agreement", "preview_schedule", "list_agreements", "show_agreement",
         "task_history", "task_report", "condition_timeline"}
WEDNESDAY = {"version": 1, "title": "holdings",
             "trigger": {"type": "cron", "expr": "0 20 * * 3", "zone": "Europe/Paris"}}
THREE_MISTAKES = {"version": 1,
                  "trigger": {"type": "cron", "expr": "0 25 * * 3", "zone": "Europe/Pariss"},
                  "lateness": {"late_grace": -5}}
MODES = ["auto", "legacy"]  # the 2026 per-request protocol, and sessions after initialize


class World:
    """Tenants acme (alice, an agent key, alice's user token, an operator key) and globex
    (gus, an agent key) with gus's agreement 'g' confirmed."""

    def __init__(self, tokens: dict[str, str]) -> None:
        self.tokens = tokens

    @classmethod
    async def build(cls, db: Database, clock: FakeClock) -> World:
        tokens = {"alice": await add_user(db, clock, "acme", "alice")}
        gus = await owner(db, clock, "globex", "gus")
        for kind, tenant in (("agent", "acme"), ("operator", "acme"), ("agent", "globex")):
            tokens[f"{kind}@{tenant}"] = (await create_key(db, clock, kind, tenant_id=tenant,
                                                           name="k")).token
        await confirmed(db, clock, {**WEDNESDAY, "title": "gus's"}, definition_id="g",
                        principal=gus)
        return cls(tokens)


@pytest.fixture
async def world(db: Database, clock: FakeClock) -> World:
    """Two tenants with keys (see :class:`World`)."""
    return await World.build(db, clock)


@pytest.fixture
async def api(db: Database, clock: FakeClock, tmp_path: Path) -> AsyncIterator[Api]:
    """The API with the MCP tools at /mcp, over the test's database, on the fake clock."""
    async with serving(db, clock, tmp_path, mcp=True) as running:
        yield running


@contextlib.asynccontextmanager
async def over_http(api: Api, token: str, mode: str = "auto") -> AsyncIterator[Client]:
    """The SDK's client on ``/mcp`` with ``token`` as Bearer."""
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"},
                                  timeout=httpx2.Timeout(30)) as http, \
            Client(streamable_http_client(f"{api.url}/mcp", http_client=http),
                   mode=mode) as client:
        yield client


def structured(result: CallToolResult) -> dict[str, Any]:
    """A successful result's structured content (which the SDK client has validated
    against the tool's output schema)."""
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return result.structured_content


def refused(result: CallToolResult) -> dict[str, Any]:
    """An error result's problem details."""
    assert result.is_error
    assert result.structured_content is not None
    return result.structured_content


@pytest.mark.parametrize("mode", MODES)
async def test_the_tools_listed_over_http_include_none_that_confirms(
        api: Api, world: World, mode: str) -> None:
    """tools/list names the seven tools; none is named like confirm, approve, resume,
    trigger, cancel or pause; every tool publishes an output schema."""
    async with over_http(api, world.tokens["agent@acme"], mode) as client:
        tools = (await client.list_tools()).tools
    assert {t.name for t in tools} == TOOLS
    forbidden = re.compile(r"confirm|approve|resume|trigger|cancel|pause", re.I)
    assert [t.name for t in tools if forbidden.search(t.name)] == []
    assert all(t.output_schema and t.output_schema["type"] == "object" for t in tools)


async def test_the_spec_parameter_schema_is_the_spec_models(api: Api, world: World) -> None:
    """propose_agreement's and preview_schedule's ``spec`` is SpecV1's JSON Schema, its
    definitions in the input schema's own $defs: a valid, self-contained schema that
    accepts the Wednesday arguments and refuses a spec with an unknown trigger type."""
    model = SpecV1.model_json_schema()
    definitions = model.pop("$defs")
    async with over_http(api, world.tokens["agent@acme"]) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    for name in ("propose_agreement", "preview_schedule"):
        schema = tools[name].input_schema
        assert schema["properties"]["spec"] == model
        assert {k: schema["$defs"][k] for k in definitions} == definitions
        jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(tools["propose_agreement"].input_schema)
    validator.validate({"definition_id": "holdings", "spec": WEDNESDAY, "owner": "alice"})
    wrong = {**WEDNESDAY, "trigger": {"type": "sometimes"}}
    assert not validator.is_valid({"definition_id": "h", "spec": wrong, "owner": "alice"})


@pytest.mark.parametrize("mode", MODES)
async def test_propose_wednesday_paris_over_http_then_read_it_back(
        db: Database, clock: FakeClock, api: Api, world: World, mode: str) -> None:
    """Proposing Wednesday 20:00 Europe/Paris on 2026-10-20 answers revision 1, the
    stored spec_hash, a summary, the next five Wednesdays with the October DST change
    noted, and where alice confirms; show and list read it back as proposed."""
    clock.step_wall(datetime(2026, 10, 20, tzinfo=UTC) - clock.now())
    async with over_http(api, world.tokens["agent@acme"], mode) as client:
        made = structured(await client.call_tool("propose_agreement", {
            "definition_id": "holdings", "spec": WEDNESDAY, "owner": "alice"}))
        shown = structured(await client.call_tool("show_agreement",
                                                  {"definition_id": "holdings"}))
        listed = structured(await client.call_tool("list_agreements", {}))
    stored = await db.pool.fetchval("SELECT spec_hash FROM definition_revisions WHERE "
                                    "tenant_id = 'acme' AND definition_id = 'holdings'")
    assert (made["tenant_id"], made["revision"], made["spec_hash"]) == ("acme", 1, stored)
    assert made["needs_confirmation"] is True
    assert "20:00" in made["summary"] and "Wednesday" in made["summary"]
    assert [(n["scheduled_for"], n["local"]) for n in made["next"]] == [
        ("2026-10-21T18:00:00Z", "2026-10-21T20:00:00+02:00"),
        ("2026-10-28T19:00:00Z", "2026-10-28T20:00:00+01:00"),  # Sunday 25th: +02 -> +01
        ("2026-11-04T19:00:00Z", "2026-11-04T20:00:00+01:00"),
        ("2026-11-11T19:00:00Z", "2026-11-11T20:00:00+01:00"),
        ("2026-11-18T19:00:00Z", "2026-11-18T20:00:00+01:00")]
    assert [n["note"] is not None for n in made["next"]] == [False, True, False, False, False]
    assert "+02:00 -> +01:00" in made["next"][1]["note"]
    assert made["confirm"] == {
        "method": "POST", "path": "/v1/definitions/holdings/revisions/1/confirm",
        "body": {"spec_hash": stored},
        "cli": f"watchkeeper confirm holdings --revision 1 --spec-hash {stored} "
               "--token <owner's token>"}
    assert (shown["status"], shown["owner_user_id"], shown["effective_revision"]) == (
        "proposed", "alice", None)
    assert [(r["revision"], r["status"], r["spec_hash"]) for r in shown["revisions"]] == [
        (1, "proposed", stored)]
    assert [(i["definition_id"], i["status"], i["title"]) for i in listed["items"]] == [
        ("holdings", "proposed", "holdings")]


async def test_the_confirm_route_the_tool_names_confirms_the_proposal(
        db: Database, api: Api, world: World) -> None:
    """The route and body propose_agreement answers are the API's: alice's token there
    makes revision 1 effective, which show_agreement then reports with its summary."""
    async with over_http(api, world.tokens["agent@acme"]) as client:
        made = structured(await client.call_tool("propose_agreement", {
            "definition_id": "holdings", "spec": WEDNESDAY, "owner": "alice"}))
        hint = made["confirm"]
        done = await api.call(hint["method"], hint["path"], world.tokens["alice"],
                              body=hint["body"])
        assert done.status_code == 200, done.text
        shown = structured(await client.call_tool("show_agreement",
                                                  {"definition_id": "holdings"}))
    assert (shown["status"], shown["effective_revision"], shown["spec_hash"]) == (
        "active", 1, made["spec_hash"])
    assert shown["summary"] == made["summary"]
    assert shown["next"][0]["local"] == "2026-06-03T20:00:00+02:00"


@pytest.mark.parametrize("mode", MODES)
async def test_a_spec_with_three_mistakes_answers_all_three_at_once(
        db: Database, api: Api, world: World, mode: str) -> None:
    """A bad cron field, a misspelt zone and a negative grace: one error result with the
    three problems, each with its field and a fix, and nothing stored."""
    async with over_http(api, world.tokens["agent@acme"], mode) as client:
        result = await client.call_tool("propose_agreement", {
            "definition_id": "holdings", "spec": THREE_MISTAKES, "owner": "alice"})
        preview = await client.call_tool("preview_schedule", {"spec": THREE_MISTAKES})
    problem = refused(result)
    assert (problem["type"], problem["status"]) == ("urn:watchkeeper:problem:invalid-input", 422)
    fields = ["trigger.expr", "trigger.zone", "lateness.late_grace"]
    assert [e["field"] for e in problem["errors"]] == fields
    assert all(e["message"] and e["fix"] for e in problem["errors"])
    assert "did you mean 'Europe/Paris'?" in problem["errors"][1]["fix"]
    assert [e["field"] for e in refused(preview)["errors"]] == fields
    assert await db.pool.fetchval(
        "SELECT count(*) FROM definitions WHERE tenant_id = 'acme'") == 0


async def test_preview_schedule_is_stateless(db: Database, api: Api, world: World) -> None:
    """preview_schedule answers the summary and the requested occurrences after the given
    instant, and stores nothing."""
    async with over_http(api, world.tokens["agent@acme"]) as client:
        seen = structured(await client.call_tool("preview_schedule", {
            "spec": WEDNESDAY, "after": "2027-03-24T19:00:00Z", "count": 2}))
    assert [n["local"] for n in seen["next"]] == ["2027-03-31T20:00:00+02:00",  # after the
                                                  "2027-04-07T20:00:00+02:00"]  # 28 Mar change
    assert seen["next"][0]["note"] is not None and "Wednesday" in seen["summary"]
    assert await db.pool.fetchval("SELECT count(*) FROM definitions") == 1  # gus's only


async def test_another_tenants_agreement_does_not_exist(api: Api, world: World) -> None:
    """acme's agent cannot see globex's 'g': show, history and the timeline answer
    not-found (404), the list leaves it out; globex's agent sees it."""
    async with over_http(api, world.tokens["agent@acme"]) as client:
        listed = structured(await client.call_tool("list_agreements", {}))
        answers = [await client.call_tool("show_agreement", {"definition_id": "g"}),
                   await client.call_tool("task_history", {"definition_id": "g"}),
                   await client.call_tool("condition_timeline", {"definition_id": "g"})]
    assert listed["items"] == []
    for answer in answers:
        problem = refused(answer)
        assert (problem["type"], problem["status"]) == ("urn:watchkeeper:problem:not-found", 404)
        assert "gus" not in str(answer.content)
    async with over_http(api, world.tokens["agent@globex"]) as client:
        theirs = structured(await client.call_tool("show_agreement", {"definition_id": "g"}))
    assert (theirs["tenant_id"], theirs["owner_user_id"]) == ("globex", "gus")


async def test_history_and_report_of_a_completed_task(
        db: Database, clock: FakeClock, api: Api, world: World, tmp_path: Path) -> None:
    """After a tick runs alice's hourly agreement once, task_history lists the completed
    occurrence and task_report answers its committed markdown and receipt; a calendar
    agreement has an empty poll timeline; a task id of another tenant is not found."""
    alice = await owner(db, clock, "acme", "alice2")
    await confirmed(db, clock, {"trigger": {"type": "interval", "every": 3600,
                                            "anchor": "2026-06-01T00:00:00Z"}},
                    definition_id="hourly", principal=alice)
    clock.advance(1)
    done = await tick_once(db, clock, Settings(home=tmp_path), agents=AgentCatalog(),
                           sources=SourceRegistry())
    assert done["tasks"] == {"completed": 1}
    row = await db.pool.fetchrow("SELECT task_id, content_md, content_sha256 FROM reports")
    async with over_http(api, world.tokens["agent@acme"]) as client:
        page = structured(await client.call_tool("task_history", {"definition_id": "hourly"}))
        got = structured(await client.call_tool("task_report", {"task_id": row["task_id"]}))
        timeline = structured(await client.call_tool("condition_timeline",
                                                     {"definition_id": "hourly"}))
    async with over_http(api, world.tokens["agent@globex"]) as client:
        elsewhere = refused(await client.call_tool("task_report", {"task_id": row["task_id"]}))
    assert [(e["definition_id"], e["task_id"], e["task_status"], e["scheduled_for"])
            for e in page["items"]] == [("hourly", row["task_id"], "completed",
                                         "2026-06-01T00:00:00Z")]
    assert page["next_cursor"] is None
    assert got["task"]["task_id"] == row["task_id"]
    assert (got["report"]["markdown"], got["report"]["content_sha256"],
            got["report"]["verified"]) == (row["content_md"], row["content_sha256"], True)
    assert timeline == {"items": [], "next_cursor": None}
    assert elsewhere["status"] == 404


async def test_list_agreements_pages_with_an_opaque_cursor(
        db: Database, clock: FakeClock, api: Api, world: World) -> None:
    """Three proposals listed two at a time: a full first page with a cursor, then the
    last one and no cursor; a cursor that was not issued is an invalid-input field."""
    async with over_http(api, world.tokens["agent@acme"]) as client:
        for name in ("a", "b", "c"):
            structured(await client.call_tool("propose_agreement", {
                "definition_id": name, "spec": WEDNESDAY, "owner": "alice"}))
        first = structured(await client.call_tool("list_agreements", {"limit": 2}))
        second = structured(await client.call_tool("list_agreements", {
            "limit": 2, "cursor": first["next_cursor"]}))
        bad = refused(await client.call_tool("list_agreements", {"cursor": "nope"}))
    assert [i["definition_id"] for i in first["items"]] == ["a", "b"]
    assert ([i["definition_id"] for i in second["items"]], second["next_cursor"]) == (["c"], None)
    assert [e["field"] for e in bad["errors"]] == ["cursor"]


INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {},
    "clientInfo": {"name": "test", "version": "1"}}}
ACCEPT = {"Accept": "application/json, text/event-stream"}


async def test_http_refuses_every_credential_but_an_agent_key(
        db: Database, clock: FakeClock, api: Api, world: World) -> None:
    """/mcp without a credential, with an unknown or a revoked key is 401
    (WWW-Authenticate); a user token, an app key, an operator key or the tick secret is
    403; each as problem details, before any MCP session."""
    revoked = await create_key(db, clock, "agent", tenant_id="acme", name="old")
    await revoke_key(db, clock, revoked.key.key_id)
    app = await create_key(db, clock, "app", tenant_id="acme", name="app")
    tick = await create_key(db, clock, "tick", tenant_id=None, name="tick")
    cases = [(None, 401), ("wk_agent_000000000000_" + "x" * 43, 401), (revoked.token, 401),
             (world.tokens["alice"], 403), (app.token, 403), (tick.token, 403),
             (world.tokens["operator@acme"], 403)]
    for token, status in cases:
        answer = await api.call("POST", "/mcp", token, body=INITIALIZE, headers=ACCEPT)
        assert answer.status_code == status, (token, answer.text)
        assert answer.headers["content-type"] == "application/problem+json"
        assert answer.json()["status"] == status
        assert "mcp-session-id" not in answer.headers
        assert ("www-authenticate" in answer.headers) == (status == 401)
    assert "this is an operator credential" in answer.json()["detail"]


async def test_a_session_answers_only_the_key_that_opened_it(api: Api, world: World) -> None:
    """A session opened with acme's agent key is unknown (404) to globex's agent key
    presenting its id, and known to acme's."""
    opened = await api.call("POST", "/mcp", world.tokens["agent@acme"], body=INITIALIZE,
                            headers=ACCEPT)
    assert opened.status_code == 200, opened.text
    session = {**ACCEPT, "Mcp-Session-Id": opened.headers["mcp-session-id"],
               "Mcp-Protocol-Version": "2025-11-25"}
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    other = await api.call("POST", "/mcp", world.tokens["agent@globex"], body=note,
                           headers=session)
    same = await api.call("POST", "/mcp", world.tokens["agent@acme"], body=note, headers=session)
    assert (other.status_code, same.status_code) == (404, 202)


def stdio_server(db_dsn: str, home: Path, key: str) -> StdioServerParameters:
    """``python -m watchkeeper mcp`` on the test's database, as ``key``."""
    return StdioServerParameters(command=sys.executable, args=["-m", "watchkeeper", "mcp"],
                                 env={"DATABASE_URL": db_dsn, "WATCHKEEPER_HOME": str(home),
                                      "WATCHKEEPER_AGENT_KEY": key})


async def test_over_stdio_propose_wednesday_paris_and_read_it_back(
        db: Database, db_dsn: str, world: World, tmp_path: Path) -> None:
    """`watchkeeper mcp` as a subprocess: the same seven tools; the Wednesday 20:00 Paris
    proposal previews five Wednesdays at 20:00 Paris time a week apart, from the next
    one after now; show and list read it back; another tenant's 'g' is not found."""
    before = datetime.now(UTC)
    async with Client(stdio_server(db_dsn, tmp_path, world.tokens["agent@acme"])) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        made = structured(await client.call_tool("propose_agreement", {
            "definition_id": "holdings", "spec": WEDNESDAY, "owner": "alice"}))
        shown = structured(await client.call_tool("show_agreement",
                                                  {"definition_id": "holdings"}))
        listed = structured(await client.call_tool("list_agreements", {}))
        hidden = refused(await client.call_tool("show_agreement", {"definition_id": "g"}))
    assert names == TOOLS
    paris = ZoneInfo("Europe/Paris")
    local = [datetime.fromisoformat(n["scheduled_for"]).astimezone(paris) for n in made["next"]]
    assert [(t.isoweekday(), t.hour, t.minute) for t in local] == [(3, 20, 0)] * 5
    assert [(b - a).days for a, b in zip(local, local[1:], strict=False)] == [7] * 4
    assert before < local[0] <= before + timedelta(days=7)
    stored = await db.pool.fetchval("SELECT spec_hash FROM definition_revisions WHERE "
                                    "tenant_id = 'acme' AND definition_id = 'holdings'")
    assert (made["revision"], made["spec_hash"]) == (1, stored)
    assert made["confirm"]["path"] == "/v1/definitions/holdings/revisions/1/confirm"
    assert (shown["status"], shown["revisions"][0]["proposed_by"]) == (
        "proposed", f"agent:acme/{world.tokens['agent@acme'].split('_')[2]}")
    assert [i["definition_id"] for i in listed["items"]] == ["holdings"]
    assert hidden["status"] == 404


async def run_mcp(db_dsn: str, home: Path, key: str | None) -> tuple[int, str, str]:
    """``watchkeeper mcp`` with stdin closed, as ``key``: exit code, stdout, stderr."""
    env = {k: v for k, v in os.environ.items() if k != "WATCHKEEPER_AGENT_KEY"}
    env |= {"DATABASE_URL": db_dsn, "WATCHKEEPER_HOME": str(home)}
    if key is not None:
        env["WATCHKEEPER_AGENT_KEY"] = key
    with anyio.fail_after(60):
        done = await anyio.run_process([sys.executable, "-m", "watchkeeper", "mcp"], env=env,
                                       input=b"", check=False)
    return done.returncode, done.stdout.decode(), done.stderr.decode()


async def test_stdio_refuses_to_start_without_an_agent_key(
        db_dsn: str, world: World, tmp_path: Path) -> None:
    """`watchkeeper mcp` with no key exits 2 naming WATCHKEEPER_AGENT_KEY, with a user
    token exits 4 saying an agent key is needed; stdout stays empty (it is the wire);
    with an agent key and stdin closed it exits 0."""
    unset = await run_mcp(db_dsn, tmp_path, None)
    user = await run_mcp(db_dsn, tmp_path, world.tokens["alice"])
    fine = await run_mcp(db_dsn, tmp_path, world.tokens["agent@acme"])
    assert unset[:2] == (2, "")
    assert "WATCHKEEPER_AGENT_KEY" in unset[2] and "keys create agent" in unset[2]
    assert user[:2] == (4, "")
    assert "agent key" in user[2] and "user credential" in user[2]
    assert fine == (0, "", "")


async def test_serve_answers_mcp_and_stops_on_sigterm_with_a_session_open(
        db_dsn: str, world: World, tmp_path: Path) -> None:
    """`watchkeeper serve` runs the MCP session manager: a session-mode client lists the
    tools at /mcp, and SIGTERM with its event stream still open stops the process
    cleanly (exit 0, "stopped") within seconds."""
    env = {**os.environ, "DATABASE_URL": db_dsn, "WATCHKEEPER_HOME": str(tmp_path)}
    async with served(env, "--no-supervisor") as server:
        assert "MCP at /mcp" in server.seen.decode()
        async with httpx2.AsyncClient(headers={
                "Authorization": f"Bearer {world.tokens['agent@acme']}"}) as http, \
                Client(streamable_http_client(f"{server.url}/mcp", http_client=http),
                       mode="legacy") as client:
            assert {t.name for t in (await client.list_tools()).tools} == TOOLS
            server.process.send_signal(signal.SIGTERM)
            with anyio.fail_after(10):
                code = await server.process.wait()
        rest = await server.rest_of_stderr()
    assert code == 0 and "stopped" in rest and "Traceback" not in rest, rest


async def test_an_edit_must_be_based_on_the_latest_revision(api: Api, world: World) -> None:
    """A second proposal of 'holdings' without based_on, or based on a stale revision, is
    a conflict (409) naming the revision to base on; based on revision 1 it is
    revision 2."""
    async with over_http(api, world.tokens["agent@acme"]) as client:
        args = {"definition_id": "holdings", "spec": WEDNESDAY, "owner": "alice"}
        structured(await client.call_tool("propose_agreement", args))
        later = {**WEDNESDAY, "trigger": {**WEDNESDAY["trigger"], "expr": "0 21 * * 3"}}
        unbased = refused(await client.call_tool("propose_agreement", {**args, "spec": later}))
        second = structured(await client.call_tool("propose_agreement", {
            **args, "spec": later, "based_on": 1}))
        stale = refused(await client.call_tool("propose_agreement", {
            **args, "spec": WEDNESDAY, "based_on": 1}))
    assert (unbased["type"], unbased["status"]) == ("urn:watchkeeper:problem:conflict", 409)
    assert second["revision"] == 2 and second["confirm"]["path"].endswith("/revisions/2/confirm")
    assert stale["status"] == 409 and "2" in stale["detail"]


async def test_tool_arguments_that_do_not_fit_answer_problem_details(
        api: Api, world: World) -> None:
    """task_history(since="yesterday") and preview_schedule(count=100000) answer the
    problem details of a refused spec (each field, what is wrong, what fits), not
    pydantic's text with its link; several bad arguments are listed at once."""
    async with over_http(api, world.tokens["agent@acme"]) as client:
        since = refused(await client.call_tool("task_history", {"since": "yesterday"}))
        count = refused(await client.call_tool("preview_schedule",
                                               {"spec": WEDNESDAY, "count": 100000}))
        both = refused(await client.call_tool("task_history", {"since": 5, "limit": "many"}))
    for problem in (since, count, both):
        assert (problem["type"], problem["status"]) == (
            "urn:watchkeeper:problem:invalid-input", 422)
        assert "pydantic" not in str(problem)
    assert since["errors"] == [{
        "field": "since",
        "message": "'yesterday' is not an RFC 3339 date-time with an offset (a number of "
                   "seconds is not one).",
        "fix": "write RFC 3339 with an offset, such as 2026-03-29T01:00:00Z or "
               "2026-03-29T03:00:00+02:00."}]
    assert count["errors"] == [{"field": "count",
                                "message": "100000 is more than the maximum 100.",
                                "fix": "write an integer from 1 to 100, such as 5."}]
    assert [e["field"] for e in both["errors"]] == ["since", "limit"]
    assert both["errors"][1]["fix"] == "write an integer from 1 to 200, such as 20."
