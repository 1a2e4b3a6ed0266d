"""What a model-backed or in-process agent spends is kept, durably and exactly: a
continuation the task budget cannot pay for is refused with the report kept; a response
without usage keeps its reservation; a stale run closed by a takeover, parallel tool
charges and a stale continuation never lower the durable usage; the report's cost total
is a plain decimal string. Real PostgreSQL, a real worker, the scripted local endpoint
(tests/_model_server.py) or in-process agents (tests/_scripted.py)."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import _model_server
import anyio
import anyio.lowlevel
import pytest
from _helpers import tasks, utc
from _model_server import answer, held, model_server, tools
from _scripted import GO_ON, SCRIPTED_START, admitted
from test_model_agent import START, Market, model_task, model_worker, run_rows

from watchkeeper.runtime import FakeClock
from watchkeeper.runtime.engine._agents import (
    AgentContext,
    AgentResult,
    Usage,
)
from watchkeeper.runtime.store._db import Database
from watchkeeper.runtime.usecases import report
from watchkeeper.sources import CallableSource, SourceRegistry

pytestmark = pytest.mark.anyio

READ = "read_observation"


async def test_a_continuation_the_budget_cannot_pay_for_is_refused_and_the_report_kept(
        db: Database, tmp_path: Path) -> None:
    """AgentResult: a continuation is granted "within limits.max_roots, the deadline and
    the budget; otherwise this report is the task's, with the refusal recorded".
    max_model_requests 1, spent by root 1: _continue checks only roots and deadline,
    accepts, root 2 is refused its first request (budget_exceeded), the task ends
    failed and root 1's good report is never committed."""
    clock = FakeClock(utc(START))
    market = Market(clock)
    intent = {"reason": "more to read", "instructions": "Go on."}
    async with model_server(answer("# Part 1\n", continuation=intent),
                            answer("# Part 2\n")) as server:
        await model_task(db, clock, server.base_url,
                         limits={"max_roots": 2, "max_model_requests": 1})
        worker = model_worker(db, clock, tmp_path, server.base_url, market)
        await worker.run_once()
        await worker.run_once()
    assert await db.pool.fetchval("SELECT content_md FROM reports") == "# Part 1\n"
    runs = await run_rows(db)
    assert runs[0]["continuation"]["status"] == "refused"
    assert (await tasks(db))[0]["status"] == "completed"


async def test_a_response_without_usage_keeps_its_reservation(
        db: Database, tmp_path: Path, monkeypatch: Any) -> None:
    """An endpoint that omits `usage` (several OpenAI-compatible servers do) makes
    pydantic-ai report 0 tokens; true_up then replaces the reservation by 0 USD, so
    max_cost_usd never binds. Reservation 100 x 1.5/1000 = 0.15 USD, limit 0.20: with
    the reservation kept (cost unknown) only one request may be made; four were before the fix."""
    from starlette.responses import JSONResponse

    def without_usage(content: Any, **kw: Any) -> Any:
        if isinstance(content, dict):
            content = {k: v for k, v in content.items() if k != "usage"}
        return JSONResponse(content, **kw)

    monkeypatch.setattr(_model_server, "JSONResponse", without_usage)
    clock = FakeClock(utc(START))
    market = Market(clock)
    script = [tools((READ, {"source": "prices", "subject": "FUNDX"})) for _ in range(3)]
    async with model_server(*script, answer()) as server:
        await model_task(db, clock, server.base_url, limits={"max_cost_usd": "0.2"},
                         params={"input_usd_per_1k": "0"})
        outcome = await model_worker(db, clock, tmp_path, server.base_url, market).run_once()
        made = len(server.received)
    assert made == 1
    assert outcome is not None and outcome.status == "failed"
    (run,) = await run_rows(db)
    assert Decimal(run["usage"]["cost_usd"]) >= Decimal("0.15")


async def test_a_stale_run_closed_during_a_takeover_keeps_its_spending(
        db: Database, tmp_path: Path) -> None:
    """B's claim was two statements: tasks_take_over, then runs_mark_lease_lost (one
    statement since, so that window is gone; A's close path is still checked). If A's
    next charge is refused in between, execute()'s StaleLease handler closes A's run
    with Usage() (zero): run_finish still matches the 'running' row and overwrites the
    request A made. B's spent_before then misses it, and with max_model_requests 1
    the task makes two requests."""
    clock = FakeClock(utc(START))
    market = Market(clock)
    release = anyio.Event()
    async with model_server(
            held(release, tools((READ, {"source": "prices", "subject": "FUNDX"}))),
            answer("# B\n")) as server:
        await model_task(db, clock, server.base_url,
                         limits={"max_attempts": 2, "max_model_requests": 1})
        a = model_worker(db, clock, tmp_path, server.base_url, market, "A",
                         lease_seconds=60, renew_every=1000)
        b = model_worker(db, clock, tmp_path, server.base_url, market, "B", lease_seconds=60)
        stale: list[Any] = []
        async with anyio.create_task_group() as tg:
            claimed = await a.claim()
            assert claimed is not None

            done = anyio.Event()

            async def go() -> None:
                stale.append(await a.execute(claimed))
                done.set()

            tg.start_soon(go)
            await server.wait_for_requests(1)
            clock.advance(61)
            # B's claim; A's answer arrives after it, before B runs
            (taken,) = await db.fetch("tasks_take_over", clock.now(), 1, "B", 60.0, None,
                                      ["model"])
            release.set()
            with anyio.fail_after(10):
                await done.wait()
        a_run = (await run_rows(db))[0]
        await b.execute(taken)
        made = len(server.received)
    assert a_run["usage"]["model_requests"] == 1, a_run["usage"]
    assert made == 1


async def test_parallel_tool_charges_never_lower_the_durable_usage(
        db: Database, tmp_path: Path, monkeypatch: Any) -> None:
    """Two read_observation calls in one response are charged concurrently; each
    run_charge writes the whole usage snapshot it saw, on its own pool connection. If
    the first (tool_attempts 1) reaches PostgreSQL after the second (2), the row says
    1 while both reads are under way: a crash now lets the next attempt spend the
    refunded call again ("written durably before it happens" is broken)."""
    clock = FakeClock(utc(START))
    market = Market(clock)
    gate, both = anyio.Event(), anyio.Event()
    started: list[str] = []

    async def slow(subject: str, at: Any) -> Decimal:
        started.append(subject)
        if len(started) == 2:
            both.set()
        await gate.wait()
        return Decimal(1)

    market.registry = SourceRegistry([CallableSource("prices", "1", slow, now=clock.now)])
    real = db.fetchval
    written: list[int] = []

    async def jittery(name: str, *args: Any) -> Any:
        if name == "run_charge" and args[2]["tool_attempts"] == 1:
            for _ in range(200):  # a slow network: let the other call's write go first
                await anyio.lowlevel.checkpoint()  # (a yield, not a wait on any clock)
        result = await real(name, *args)
        if name == "run_charge":
            written.append(args[2]["tool_attempts"])
        return result

    monkeypatch.setattr(db, "fetchval", jittery)
    async with model_server(tools((READ, {"source": "prices", "subject": "A"}),
                                  (READ, {"source": "prices", "subject": "B"})),
                            answer()) as server:
        await model_task(db, clock, server.base_url, sources=("prices",))
        worker = model_worker(db, clock, tmp_path, server.base_url, market)
        async with anyio.create_task_group() as tg:
            tg.start_soon(worker.run_once)
            with anyio.fail_after(10):
                await both.wait()  # each read starts only once its charge is written
            durable = await db.pool.fetchval("SELECT usage FROM runs")
            gate.set()
    if isinstance(durable, str):
        durable = json.loads(durable)
    assert sorted(started) == ["A", "B"]
    assert durable["tool_attempts"] == 2, durable
    assert written == sorted(written), written  # the row's figure never went back


@pytest.mark.parametrize("cost", ["10", "20", "0.0000001"])
async def test_the_reports_cost_total_is_a_plain_decimal_string(
        db: Database, tmp_path: Path, cost: str) -> None:
    """ReportOut.usage.cost_usd: "USD, a decimal string (exact)". uc.report formats the
    sum with str(Decimal.normalize()), which is scientific notation for a whole number
    of tens ("1E+1" for 10 USD, "2E+1" for 20) and for anything below a millionth
    ("1E-7"); the run rows themselves use format(..., "f"). The API, MCP and CLI
    `report` show "1E+1 USD"; a client doing Decimal() still reads it, one comparing
    strings or parsing JSON numbers-as-text in another language does not."""
    clock = FakeClock(utc(SCRIPTED_START))

    async def run(ctx: AgentContext) -> AgentResult:
        return AgentResult("# r\n", usage=Usage(model_requests=1, cost_usd=Decimal(cost)))

    worker = await admitted(db, clock, tmp_path, run)
    outcome = await worker.run_once()
    assert outcome is not None and outcome.status == "completed", outcome
    row = await report(db, "acme", outcome.task_id)
    assert row["usage"]["cost_usd"] == format(Decimal(cost), "f")
    assert "E" not in row["usage"]["cost_usd"]


async def test_a_stale_continuation_keeps_the_usage_its_run_reported(
        db: Database, tmp_path: Path) -> None:
    """Rule: the budget spans attempts and roots and is never refunded; a stale worker
    cannot continue. A's run (a command-like agent: its usage is known only when it
    returns) reports 1 model request and a continuation after B took the lease over
    (tasks_take_over marks A's run 'lease_lost'). _continue's
    task_continue is fenced (good), but the stale branch closes the run with
    _close_run -> run_finish, which matches only outcome = 'running': A's usage is
    never written (the _commit path's run_reject_stale accepts 'lease_lost' and does
    write it). B's spent_before then misses A's request: with max_model_requests 2, B
    may make two more (three in all); the run also stays 'lease_lost', not 'rejected_stale'."""
    from datetime import timedelta
    clock = FakeClock(utc(SCRIPTED_START))

    async def run(ctx: AgentContext) -> AgentResult:
        later = clock.now() + timedelta(seconds=600)
        (taken,) = await db.fetch("tasks_take_over", later, 1, "B", 60.0, None, ["py"])
        return AgentResult("# part 1\n", usage=Usage(model_requests=1), continuation=GO_ON)

    worker = await admitted(db, clock, tmp_path, run,
                            limits={"max_roots": 2, "max_attempts": 2, "max_model_requests": 2})
    outcome = await worker.run_once()
    assert outcome is not None and outcome.status == "stale", outcome
    row = await db.pool.fetchrow("SELECT outcome, usage FROM runs WHERE worker = 'w'")
    used = row["usage"] if isinstance(row["usage"], dict) else __import__("json").loads(row["usage"])
    assert used.get("model_requests") == 1, (row["outcome"], used)
