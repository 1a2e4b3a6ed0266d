"""Adversarial checks of the model-backed agent, on the setup of tests/test_model_agent.py
(real PostgreSQL, a real worker, the scripted local endpoint). Each test states the rule
of the design it checks and the defect it found; each failed on 698d25e."""

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
from test_model_agent import START, Market, model_task, model_worker, run_rows

from watchkeeper.runtime import FakeClock
from watchkeeper.runtime.store._db import Database
from watchkeeper.sources import CallableSource, SourceRegistry

pytestmark = pytest.mark.anyio

READ = "read_observation"


async def test_a_tool_call_whose_arguments_postgresql_cannot_store_is_recorded_and_closed(
        db: Database, tmp_path: Path) -> None:
    """The model's tool arguments are untrusted text. A subject with a NUL (a lone
    surrogate is refused by pydantic-ai's argument parsing already) goes into the
    run's tool_calls jsonb, which PostgreSQL refuses: before the fix run_charge failed, then
    every run_finish fails too (the journal still holds the call), so the run row
    stays 'running', the call is not recorded and the task is left 'running'
    ("unrecorded") until its lease expires and it is taken over."""
    clock = FakeClock(utc(START))
    market = Market(clock)
    async with model_server(tools((READ, {"source": "prices", "subject": "FUND\u0000X"})),
                            answer()) as server:
        await model_task(db, clock, server.base_url, limits={"max_attempts": 2})
        outcome = await model_worker(db, clock, tmp_path, server.base_url, market).run_once()
    assert outcome is not None and outcome.status != "unrecorded", outcome
    (run,) = await run_rows(db)
    assert run["outcome"] != "running"
    assert len(run["tool_calls"]) == 1  # the call is recorded (escaped or refused)
    assert (await tasks(db))[0]["status"] != "running"


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


async def test_root1_report_survives_when_the_accepted_root2_never_runs(
        db: Database, tmp_path: Path) -> None:
    """Root 1 continues before the deadline (accepted); root 2 is claimed after it and
    refused (timed_out before it could start). The task ends with no report at all,
    though root 1 wrote one: an accepted intent must not make a finished report
    disappear."""
    clock = FakeClock(utc(START))
    market = Market(clock)
    intent = {"reason": "more to read", "instructions": "Go on."}
    async with model_server(answer("# Part 1\n", continuation=intent),
                            answer("# Part 2\n")) as server:
        await model_task(db, clock, server.base_url, limits={"max_roots": 2, "deadline": 60})
        worker = model_worker(db, clock, tmp_path, server.base_url, market)
        first = await worker.run_once()
        assert first is not None and first.status == "pending"
        clock.advance(61)
        await worker.run_once()
    assert await db.pool.fetchval("SELECT content_md FROM reports") == "# Part 1\n"


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


@pytest.mark.parametrize("bad", [
    {"report": "# R\u0000\n"},
    {"headline": "All\u0000quiet"},
    {"continuation": {"reason": "more\u0000", "instructions": "Go on."}},
], ids=["report", "headline", "continuation"])
async def test_an_answer_postgresql_cannot_store_is_sent_back_for_correction(
        db: Database, tmp_path: Path, bad: dict[str, Any]) -> None:
    """Module docstring: "An answer that does not validate is sent back for correction
    output_retries times". An answer with a NUL passes ModelAnswer, then fails later:
    in the report or headline the task fails for good (result_problems, not retried,
    no correction); in the continuation Continuation() raises a bare ValueError
    outside _mapped: the attempt fails as a generic (retryable) error and a retry
    repeats the whole run. Either way the corrected second answer is never asked
    for."""
    clock = FakeClock(utc(START))
    market = Market(clock)
    first = answer(**bad)
    async with model_server(first, answer("# Clean\n")) as server:
        await model_task(db, clock, server.base_url, limits={"max_roots": 2})
        outcome = await model_worker(db, clock, tmp_path, server.base_url, market).run_once()
        made = len(server.received)
    assert made == 2, outcome
    assert outcome is not None and outcome.status == "completed", outcome


async def test_a_binding_for_the_model_agent_has_its_params_checked(
        db: Database, tmp_path: Path) -> None:
    """An operator binding may name agent "model" with its own params (they become the
    task's params), but validate_bindings never checks them as ModelAgentParams: a
    typo surfaces only at run time, as a pydantic dump retried max_attempts times
    instead of a BindingSetError naming agent.params.<field>."""
    from watchkeeper.triggers import BindingSetError, validate_bindings
    with pytest.raises(BindingSetError, match="modle"):
        validate_bindings([{"tenant_id": "acme", "binding_id": "b1", "owner_user_id": "alice",
                            "agent": "model", "params": {"modle": "x", "temperature": 9}}])


async def test_bad_model_params_at_run_time_fail_once_naming_the_field(
        db: Database, tmp_path: Path) -> None:
    """The run-time side of the same gap (the task's params as such a binding would
    admit them): a config error is not retryable, yet it was retried with backoff."""
    clock = FakeClock(utc(START))
    market = Market(clock)
    async with model_server(answer()) as server:
        await model_task(db, clock, server.base_url, limits={"max_attempts": 3})
        await db.pool.execute("""UPDATE tasks SET params = params || '{"modle": "x"}'""")
        outcome = await model_worker(db, clock, tmp_path, server.base_url, market).run_once()
        made = len(server.received)
    assert made == 0
    assert outcome is not None and outcome.status == "failed", outcome
    assert "modle" in outcome.reason
