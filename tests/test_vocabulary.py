"""One vocabulary at every door (issue 19, item 10), and one definition of the history
and report answers (item 12): the admission lateness of history and the start lateness
of a report have two names; a manual occurrence shows its local time in the
definition's zone; costs print as plain decimals; the CLI's history table reads in 100
columns; ``propose --json`` and ``history --json`` answer what the HTTP API answers.
Real PostgreSQL, a real worker and outbox, the API on uvicorn, the MCP tools over HTTP,
the page, and the CLI as a subprocess; time from a fake clock."""

from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from zoneinfo import ZoneInfo

import anyio
import pytest
from _api import Api, serving
from _helpers import confirmed, utc
from _scripted import Scripted
from test_mcp import over_http, structured

from watchkeeper.outbox import Dispatcher, LogChannel
from watchkeeper.runtime import usecases as uc
from watchkeeper.runtime.doors.api import _models as api_models
from watchkeeper.runtime.doors.mcp import _models as mcp_models
from watchkeeper.runtime.engine._agents import AgentCatalog, AgentContext, AgentResult
from watchkeeper.runtime.engine._clock import FakeClock
from watchkeeper.runtime.engine._delivery_store import PgDeliveryStore
from watchkeeper.runtime.engine._model_agent import request_cost
from watchkeeper.runtime.engine._scheduler import tick
from watchkeeper.runtime.engine._worker import Worker
from watchkeeper.runtime.store._db import Database
from watchkeeper.triggers import ModelAgentParams, parse_spec

pytestmark = pytest.mark.anyio

CONFIRMED_AT = utc("2026-12-02T10:00:00Z")
"""A Wednesday morning; Europe/Paris is at +01:00 (winter time) all December."""
MANUAL_AT = utc("2026-12-02T10:31:12.345678Z")
"""When alice presses trigger-now: 11:31:12.345678 in Paris."""
SLOT_AT = utc("2026-12-02T19:00:00Z")
"""The scheduled slot, Wednesday 20:00 Paris (no jitter: not_before is this instant)."""
TICK_AT = SLOT_AT + timedelta(seconds=30)
"""The tick that admits it, 30 s after not_before (within the 10 min grace)."""
START_AT = TICK_AT + timedelta(seconds=0.6)
"""The worker starts its run 0.6 s after that admission."""
EXPIRED_AT = utc("2026-12-09T19:20:00Z")
"""A tick 20 min after the next Wednesday's slot: past its grace, skipped_expired."""
WEDNESDAY = {"trigger": {"type": "cron", "expr": "0 20 * * 3", "zone": "Europe/Paris"},
             "lateness": {"policy": "skip_expired", "late_grace": 600},
             "delivery": [{"channel": "log"}]}
PRICES = ModelAgentParams(model="m", input_usd_per_1k=Decimal("0.0025"),
                          output_usd_per_1k=Decimal("0.0016"))
"""The capped agent's prices per 1,000 tokens: 1,552 input tokens and 1 output token
cost (1552 x 0.0025 + 1 x 0.0016) / 1000 = 0.0038816 USD."""
SPENT = "0.0038816"
CAP = "0.003"


@dataclass
class Paris:
    """alice's two Wednesday 20:00 Paris definitions after the run: ``holdings`` (digest:
    a manual run at :data:`MANUAL_AT`, the slot admitted at :data:`TICK_AT` and run at
    :data:`START_AT`, the next slot skipped_expired) and ``capped`` (its run asks for a
    request of 0.0038816 USD under a 0.003 USD cap and is stopped)."""

    alice: str
    agent: str
    operator: str
    manual_task: int
    scheduled_task: int
    capped_task: int


async def _capped_run(ctx: AgentContext) -> AgentResult:
    """A model-like run: it reserves its request at the definition's prices, as the
    model agent does (request_cost, rounded to 18 places), before making it."""
    await ctx.budget.reserve(model_requests=1, cost_usd=request_cost(PRICES, 1552, 1))
    return AgentResult("# never\n")


async def paris(db: Database, clock: FakeClock, home: Path) -> Paris:
    """Build :class:`Paris` through the use cases, the tick, a worker and the outbox."""
    clock.set_wall(CONFIRMED_AT)
    token = await uc.add_user(db, clock, "acme", "alice", zone="Europe/Paris")
    alice = await uc.authenticate(db, token)
    agent = (await uc.create_key(db, clock, "agent", tenant_id="acme", name="chat")).token
    operator = (await uc.create_key(db, clock, "operator", tenant_id="acme", name="ops")).token
    await confirmed(db, clock, {**WEDNESDAY, "title": "Holdings"}, definition_id="holdings",
                    principal=alice)
    await confirmed(db, clock, {**WEDNESDAY, "title": "Capped", "agent": {"name": "py"},
                                "limits": {"max_cost_usd": CAP}},
                    definition_id="capped", principal=alice)
    agents = AgentCatalog()
    agents.add("py", Scripted(_capped_run))
    worker = Worker(db, clock, agents, worker_id="w", artifact_root=home)
    clock.set_wall(MANUAL_AT)
    await uc.trigger_now(db, clock, alice, "acme", "holdings")
    clock.advance(0.7)
    manual = await worker.run_once()
    clock.set_wall(TICK_AT)
    assert (await tick(db, clock)).admitted == 2
    clock.set_wall(START_AT)
    first, second = await worker.run_once(), await worker.run_once()
    assert manual and first and second
    outcomes = {o.status: o.task_id for o in (first, second)}
    assert set(outcomes) == {"completed", "failed"}, outcomes
    await Dispatcher(PgDeliveryStore(db, clock), {"log": LogChannel()}, now=clock.now,
                     owner="d").dispatch_once()
    clock.set_wall(EXPIRED_AT)
    await tick(db, clock)
    return Paris(token, agent, operator, manual.task_id, outcomes["completed"],
                 outcomes["failed"])


async def cli(dsn: str, home: Path, *args: str, columns: int = 200) -> str:
    """``watchkeeper ARGS`` in a terminal ``columns`` wide; its stdout (exit 0)."""
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env.update(WATCHKEEPER_HOME=str(home), COLUMNS=str(columns), DATABASE_URL=dsn)
    result = await anyio.run_process([sys.executable, "-m", "watchkeeper", *args], env=env,
                                     check=False)
    assert result.returncode == 0, result.stderr.decode()
    return result.stdout.decode()


async def page(api: Api, token: str, path: str) -> str:
    """``path`` of the page, signed in with ``token``."""
    done = await api.client.post("/sign-in", data={"token": token},
                                 headers={"Origin": api.url})
    assert done.status_code == 303
    answer = await api.client.get(path)
    assert answer.status_code == 200
    return answer.text


async def test_admission_and_start_lateness_have_two_names_at_every_door(
        db: Database, db_dsn: str, tmp_path: Path) -> None:
    """The scheduled task was admitted 30 s after its not_before and started 0.6 s later:
    history calls the first admission_lateness_seconds (30.0) at the API, the MCP tools,
    the CLI and the page; the report calls the second start lateness (30.6 s). Before,
    both were "lateness" (history 30.0, report 30.6 for the same task)."""
    clock = FakeClock(CONFIRMED_AT)
    world = await paris(db, clock, tmp_path)
    admission = (TICK_AT - SLOT_AT).total_seconds()
    start = (START_AT - SLOT_AT).total_seconds()
    task = world.scheduled_task
    async with serving(db, clock, tmp_path, mcp=True) as api:
        entry = (await api.call("GET", f"/v1/tasks/{task}", world.alice)).json()
        report = (await api.call("GET", f"/v1/tasks/{task}/report", world.alice)).json()
        schema = (await api.call("GET", "/openapi.json")).json()["components"]["schemas"]
        async with over_http(api, world.agent) as client:
            tool = structured(await client.call_tool("task_report", {"task_id": task}))
        html = await page(api, world.alice, "/definitions/holdings")
    assert start == 30.6 and admission == 30.0
    for answer in (entry, tool["task"]):
        assert answer["admission_lateness_seconds"] == admission
        assert "lateness_seconds" not in answer
    assert "admission_lateness_seconds" in schema["HistoryEntryOut"]["properties"]
    assert f"admission lateness {admission:.1f} s" in html
    assert f"- start lateness: {start:.1f} s\n" in report["markdown"]
    assert f"- start lateness: {start:.1f} s\n" in tool["report"]["markdown"]
    listed = json.loads(await cli(db_dsn, tmp_path, "history", "holdings", "--tenant", "acme",
                                  "--json"))
    (from_cli,) = [i for i in listed["items"] if i["task_id"] == task]
    assert from_cli["admission_lateness_seconds"] == admission


async def test_a_manual_occurrence_shows_its_local_time_in_the_definitions_zone(
        db: Database, db_dsn: str, tmp_path: Path) -> None:
    """Trigger-now at 10:31:12.345678 UTC on a Europe/Paris definition: history says
    zone Europe/Paris and local 11:31:12+01:00 (to the second, as a scheduled one shows
    20:00:00+01:00) at the API, the MCP tools and the CLI; the page shows
    'Wed 2026-12-02 11:31:12 (UTC+01:00) Europe/Paris', the CLI table '11:31:12 +01:00'.
    The slot key stays the UTC instant. Before: zone UTC, local 10:31:12.345678."""
    clock = FakeClock(CONFIRMED_AT)
    world = await paris(db, clock, tmp_path)
    paris_local = MANUAL_AT.astimezone(ZoneInfo("Europe/Paris"))
    assert paris_local.isoformat() == "2026-12-02T11:31:12.345678+01:00"
    async with serving(db, clock, tmp_path, mcp=True) as api:
        entry = (await api.call("GET", f"/v1/tasks/{world.manual_task}", world.alice)).json()
        scheduled = (await api.call("GET", f"/v1/tasks/{world.scheduled_task}",
                                    world.alice)).json()
        async with over_http(api, world.agent) as client:
            tool = structured(await client.call_tool(
                "task_report", {"task_id": world.manual_task}))["task"]
        html = await page(api, world.alice, "/definitions/holdings")
    assert "local Wed 2026-12-02 11:31:12 (UTC+01:00) Europe/Paris" in html
    assert "10:31:12.345678 UTC" not in html
    listed = json.loads(await cli(db_dsn, tmp_path, "history", "holdings", "--tenant", "acme",
                                  "--json"))
    (from_cli,) = [i for i in listed["items"] if i["kind"] == "manual"]
    for answer in (entry, tool, from_cli):
        assert (answer["kind"], answer["slot"], answer["zone"], answer["local"]) == (
            "manual", "2026-12-02T10:31:12.345678Z", "Europe/Paris",
            "2026-12-02T11:31:12+01:00")
    assert (scheduled["zone"], scheduled["local"]) == ("Europe/Paris",
                                                       "2026-12-02T20:00:00+01:00")
    table = await cli(db_dsn, tmp_path, "history", "holdings", "--tenant", "acme")
    assert re.search(r"^ 2026-12-02 10:31:12 .*\n 11:31:12 \+01:00 ", table, re.MULTILINE)


async def test_costs_print_as_plain_decimals(db: Database, db_dsn: str,
                                             tmp_path: Path) -> None:
    """A request priced at 0.0038816 USD (request_cost rounds to 18 places) asked under
    a 0.003 USD cap: the run's error, the next step, the CLI's table and the page say
    '0.0038816' and '0.003', never '0.003881600000000000'."""
    clock = FakeClock(CONFIRMED_AT)
    world = await paris(db, clock, tmp_path)
    assert str(request_cost(PRICES, 1552, 1)) == "0.003881600000000000"
    assert Decimal(SPENT) == (1552 * Decimal("0.0025") + Decimal("0.0016")) / 1000
    async with serving(db, clock, tmp_path) as api:
        entry = (await api.call("GET", f"/v1/tasks/{world.capped_task}", world.alice)).json()
        html = await page(api, world.alice, "/definitions/capped")
    table = await cli(db_dsn, tmp_path, "history", "capped", "--tenant", "acme")
    (run,) = entry["runs"]
    assert run["outcome"] == "budget_exceeded"
    assert run["error"].endswith(f"cost_usd: {SPENT} would exceed the task's limit of {CAP}")
    assert f"limits.max_cost_usd is {CAP} for the whole task" in entry["next_step"]
    assert f"{SPENT} would exceed" in html and f"{SPENT} would exceed" in " ".join(table.split())
    for text in (json.dumps(entry), html, table):
        assert "0.003881600000000000" not in text


async def test_the_history_table_reads_in_100_columns(db: Database, db_dsn: str,
                                                      tmp_path: Path) -> None:
    """COLUMNS=100: no line is wider, and each occurrence's essential facts stand whole
    on its first two lines: the UTC time, the definition, the decision and the task id,
    then the local time, the kind, the admission lateness and the task's status; the
    details (slot, runs, notices, next step) fold in the last column. Before, nine
    columns folded every cell, 'scheduled_for (UTC)' and the task's status included."""
    clock = FakeClock(CONFIRMED_AT)
    await paris(db, clock, tmp_path)
    table = await cli(db_dsn, tmp_path, "history", "--tenant", "acme", columns=100)
    lines = table.splitlines()
    assert max(len(line) for line in lines) <= 100, table
    page_ = await uc.history(db, uc.HistoryQuery(tenant_id="acme"))
    assert len(page_.entries) == 5
    for e in page_.entries:
        first = rf"^ {e['scheduled_for']:%Y-%m-%d %H:%M}\S* +{e['definition_id']} +{e['decision']} "
        if e["task_id"] is not None:
            first += rf"+#{e['task_id']} "
        local = e["local"][11:16]
        second = (rf"^ {local}\S* [+-]\d\d:\d\d +{e['kind']} +"
                  rf"{e['admission_lateness_seconds']:.1f} s +{e['task_status'] or ''}")
        assert re.search(first + r".*\n" + second, table, re.MULTILINE), (first, second, table)
    assert "…" not in table


async def test_propose_and_history_json_use_the_apis_names(
        db: Database, db_dsn: str, tmp_path: Path) -> None:
    """``propose --json`` answers what POST /v1/definitions/{id}/revisions answers (the
    same keys, summary, effective part, spec_hash and warnings for the same spec);
    ``history --json`` answers what GET /v1/history answers for the same tenant, item
    for item ({items, events, next_cursor}), and its --cursor continues where the API's
    next_cursor points. Before: no summary, and {entries, events, next_after}."""
    clock = FakeClock(CONFIRMED_AT)
    world = await paris(db, clock, tmp_path)
    spec = {"version": 1, "title": "Weekly", **WEDNESDAY}
    (tmp_path / "weekly.json").write_text(json.dumps(spec))
    async with serving(db, clock, tmp_path) as api:
        proposed = await api.call("POST", "/v1/definitions/weekly-api/revisions", world.agent,
                                  body={"spec": spec, "owner": "alice"})
        assert proposed.status_code == 201, proposed.text
        whole = (await api.call("GET", "/v1/history", world.operator)).json()
        first = (await api.call("GET", "/v1/history", world.operator, limit=2)).json()
        second = (await api.call("GET", "/v1/history", world.operator, limit=2,
                                 cursor=first["next_cursor"])).json()
    by_api = proposed.json()
    by_cli = json.loads(await cli(db_dsn, tmp_path, "propose", str(tmp_path / "weekly.json"),
                                  "--tenant", "acme", "--id", "weekly-cli", "--owner", "alice",
                                  "--json"))
    assert set(by_cli) == set(by_api) == set(api_models.ProposalOut.model_fields)
    for key in ("summary", "effective", "spec_hash", "warnings", "needs_confirmation",
                "title", "notes", "revision"):
        assert by_cli[key] == by_api[key], key
    assert by_cli["summary"] == uc.describe(parse_spec(spec))
    assert by_cli["confirm"]["cli"].startswith("watchkeeper confirm weekly-cli --revision 1 ")
    assert by_cli["next"][0]["slot"].endswith("T20:00[Europe/Paris]")
    listed = json.loads(await cli(db_dsn, tmp_path, "history", "--tenant", "acme", "--json"))
    assert listed == whole
    assert set(listed) == {"items", "events", "next_cursor"} and len(listed["items"]) == 5
    paged = json.loads(await cli(db_dsn, tmp_path, "history", "--tenant", "acme", "--json",
                                 "--limit", "2"))
    assert paged == first and paged["next_cursor"] is not None
    more = json.loads(await cli(db_dsn, tmp_path, "history", "--tenant", "acme", "--json",
                                "--limit", "2", "--cursor", paged["next_cursor"]))
    assert more == second
    assert [i["slot"] for i in first["items"] + second["items"]] == [
        i["slot"] for i in whole["items"][:4]]


async def test_the_history_and_report_answers_are_defined_once(
        db: Database, tmp_path: Path) -> None:
    """The API's and the MCP tools' history entry, history page and report are the use
    cases' models (one definition each, so the doors cannot drift): the API's OpenAPI
    components and the MCP tools' output schemas are built from them."""
    assert api_models.HistoryEntryOut is uc.HistoryEntryOut
    assert api_models.HistoryPageOut is uc.HistoryPageOut
    assert api_models.ReportOut is uc.ReportOut
    assert mcp_models.TaskReport.model_fields["task"].annotation is uc.HistoryEntryOut
    assert mcp_models.HistoryPageOut is uc.HistoryPageOut
    for module in (api_models, mcp_models):
        defined_here = {name for name, value in vars(module).items()
                        if isinstance(value, type) and value.__module__ == module.__name__}
        assert not defined_here & {"HistoryEntryOut", "HistoryEntry", "HistoryEventOut",
                                   "EventOut", "HistoryEvent", "HistoryPageOut",
                                   "HistoryPage", "ReportOut", "Report", "UsageTotals"}
    clock = FakeClock(CONFIRMED_AT)
    await uc.add_user(db, clock, "acme", "alice")
    agent = (await uc.create_key(db, clock, "agent", tenant_id="acme", name="chat")).token
    async with serving(db, clock, tmp_path, mcp=True) as api:
        schemas = (await api.call("GET", "/openapi.json")).json()["components"]["schemas"]
        async with over_http(api, agent) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
    entry = uc.HistoryEntryOut.model_json_schema()
    assert set(schemas["HistoryEntryOut"]["properties"]) == set(entry["properties"])
    assert set(schemas["ReportOut"]["properties"]) == set(
        uc.ReportOut.model_json_schema()["properties"])
    output = tools["task_history"].output_schema
    assert output is not None
    assert set(output["$defs"]["HistoryEntryOut"]["properties"]) == set(entry["properties"])
