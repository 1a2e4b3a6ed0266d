"""The model-backed agent end to end: real PostgreSQL, a real worker, pydantic-ai's
OpenAI chat client over real HTTP to a local scripted endpoint (tests/_model_server.py).

Time is the test's FakeClock (the worker's deadline, lease, the request timeout and the
waits between retries all run on it); the model's answers are scripted per test. Each
expected figure is computed here from the script and the prices, not read back from
the code under test.
"""

from __future__ import annotations

import json
import os
from decimal import Decimal
from pathlib import Path
from typing import Any

import anyio
import pytest
from _helpers import confirmed, tasks, utc
from _model_server import ANSWER_TOOL, answer, held, model_server, status, tools

from watchkeeper.runtime import AgentCatalog, FakeClock, ModelAgent, ModelEndpoint, Worker
from watchkeeper.runtime.engine import tick
from watchkeeper.runtime.store._db import Database
from watchkeeper.runtime.usecases import HistoryQuery, history
from watchkeeper.sources import CallableSource, SourceRegistry

pytestmark = pytest.mark.anyio

REPO = Path(__file__).resolve().parents[1]
START = "2026-06-03T18:00:00Z"  # a Wednesday, 20:00 in Europe/Paris
OUT_PRICE = Decimal("1.5")  # USD per 1,000 output tokens
IN_PRICE = Decimal("0.5")  # USD per 1,000 input tokens


def cost(prompt: int, completion: int) -> Decimal:
    """One request's cost at the test's prices, as a model agent user would compute it."""
    return (prompt * IN_PRICE + completion * OUT_PRICE) / 1000


class Market:
    """Two read-only sources (prices in USD/share, EURUSD rate) counting their reads, and
    a third that is registered but outside every test definition's scope."""

    def __init__(self, clock: FakeClock) -> None:
        self.reads: list[tuple[str, str]] = []
        prices = {"FUNDX": Decimal("4987.50"), "FUNDY": Decimal("102.25")}

        def read(name: str, table: dict[str, Decimal]) -> Any:
            def fn(subject: str, at: Any) -> Decimal:
                self.reads.append((name, subject))
                return table[subject]
            return fn

        self.registry = SourceRegistry([
            CallableSource("prices", "1", read("prices", prices), unit="USD/share",
                           currency="USD", now=clock.now),
            CallableSource("fx", "2", read("fx", {"EURUSD": Decimal("1.0842")}), now=clock.now),
            CallableSource("secret", "1", read("secret", {"ALL": Decimal(1)}), now=clock.now),
        ])


async def model_task(db: Database, clock: FakeClock, base_url: str, *,
                     limits: dict[str, Any] | None = None, params: dict[str, Any] | None = None,
                     sources: tuple[str, ...] = ("prices", "fx")) -> None:
    """Confirm an hourly model-agent definition and admit its first slot."""
    spec = {
        "trigger": {"type": "interval", "every": 3600, "anchor": START},
        "agent": {"name": "model", "params": {
            "model": "test-model", "max_output_tokens": 100,
            "input_usd_per_1k": str(IN_PRICE), "output_usd_per_1k": str(OUT_PRICE),
            **(params or {})}},
        "instructions": "Review my holdings: FUNDX in USD and what it is worth in EUR.",
        "sources": list(sources),
        "limits": {"max_attempts": 1, **(limits or {})},
    }
    await confirmed(db, clock, spec)
    clock.advance(1)
    assert (await tick(db, clock)).admitted == 1


def model_worker(db: Database, clock: FakeClock, tmp_path: Path, base_url: str, market: Market,
                 name: str = "w", **options: Any) -> Worker:
    catalog = AgentCatalog()
    catalog.add("model", ModelAgent(ModelEndpoint(base_url, "test-key")))
    return Worker(db, clock, catalog, worker_id=name, artifact_root=tmp_path,
                  sources=market.registry, **options)


async def run_rows(db: Database) -> list[dict[str, Any]]:
    rows = await db.pool.fetch(
        "SELECT attempt, root, outcome, error, model, usage, tool_calls, continuation "
        "FROM runs ORDER BY run_id")
    out = []
    for r in rows:
        row = dict(r)
        for key in ("usage", "tool_calls", "continuation"):
            if isinstance(row[key], str):
                row[key] = json.loads(row[key])
        out.append(row)
    return out


def usage(requests: int, tools: int, prompt: int, completion: int, usd: Decimal) -> dict[str, Any]:
    return {"model_requests": requests, "tool_attempts": tools, "input_tokens": prompt,
            "output_tokens": completion, "cost_usd": usd}


def recorded(row: dict[str, Any]) -> dict[str, Any]:
    """A run row's usage with the cost as a Decimal (compared by value)."""
    return {**row["usage"], "cost_usd": Decimal(row["usage"]["cost_usd"])}


async def test_a_research_run_reads_two_observations_and_commits_its_report(
        db: Database, tmp_path: Path) -> None:
    """Two tool calls (prices FUNDX, fx EURUSD), then the structured answer: the report is
    committed with importance high and its headline; the run row records the model, 3
    requests, 2 tool calls with their observations, the tokens and the cost; the model
    saw the instructions, the trusted occurrence and only the read tool."""
    clock = FakeClock(utc(START))
    market = Market(clock)
    report = "# Holdings\n\nFUNDX 4,987.50 USD is below 5,000 USD.\n"
    async with model_server(
            tools(("read_observation", {"source": "prices", "subject": "FUNDX"}), usage=(300, 40)),
            tools(("read_observation", {"source": "fx", "subject": "EURUSD"}), usage=(420, 30)),
            answer(report, "high", "FUNDX fell below 5,000 USD", usage=(520, 90))) as server:
        await model_task(db, clock, server.base_url)
        outcome = await model_worker(db, clock, tmp_path, server.base_url, market).run_once()
        received = server.received

    assert outcome is not None and outcome.status == "completed", outcome
    row = await db.pool.fetchrow("SELECT content_md, importance, headline FROM reports")
    assert tuple(row) == (report, "high", "FUNDX fell below 5,000 USD")
    (notice,) = await db.fetch("delivery_payloads", ["acme"], [outcome.task_id])
    assert notice["headline"] == "FUNDX fell below 5,000 USD"  # the notice carries it
    assert market.reads == [("prices", "FUNDX"), ("fx", "EURUSD")]
    (run,) = await run_rows(db)
    assert (run["outcome"], run["model"], run["root"]) == ("succeeded", "test-model-2026", 1)
    assert recorded(run) == usage(3, 2, 300 + 420 + 520, 40 + 30 + 90,
                                  cost(300, 40) + cost(420, 30) + cost(520, 90))
    calls = run["tool_calls"]
    assert [(c["source"], c["subject"], c["status"], c["value"], c["unit"], c["currency"])
            for c in calls] == [("prices", "FUNDX", "ok", "4987.50", "USD/share", "USD"),
                                ("fx", "EURUSD", "ok", "1.0842", None, None)]
    assert [c["source_version"] for c in calls] == ["1", "2"]

    first = received[0]
    assert first["model"] == "test-model" and first["max_completion_tokens"] == 100
    assert sorted(t["function"]["name"] for t in first["tools"]) == [ANSWER_TOOL,
                                                                     "read_observation"]
    text = json.dumps(first["messages"])
    assert "Review my holdings: FUNDX in USD" in text
    assert "2026-06-03T18:00:00Z" in text  # the trusted occurrence, from the admission
    assert "prices" in text and "fx" in text and "secret" not in text
    # the second request carries the first observation back to the model
    assert "4987.50" in json.dumps(received[1]["messages"])

    entries = (await history(db, HistoryQuery(tenant_id="acme"))).entries
    (shown,) = entries[0]["runs"]
    assert (shown["model"], shown["root"], shown["usage"]["model_requests"],
            len(shown["tool_calls"])) == ("test-model-2026", 1, 3, 2)


async def test_the_request_limit_stops_the_run_before_the_request_past_it(
        db: Database, tmp_path: Path) -> None:
    """max_model_requests 2: two requests are made, the third is not; the run ends
    budget_exceeded with 2 requests recorded and the task is not retried."""
    clock = FakeClock(utc(START))
    market = Market(clock)
    async with model_server(
            tools(("read_observation", {"source": "prices", "subject": "FUNDX"}), usage=(200, 10)),
            tools(("read_observation", {"source": "prices", "subject": "FUNDY"}), usage=(250, 10)),
            answer()) as server:
        await model_task(db, clock, server.base_url,
                         limits={"max_model_requests": 2, "max_attempts": 3})
        outcome = await model_worker(db, clock, tmp_path, server.base_url, market).run_once()
        made = len(server.received)

    assert made == 2
    assert outcome is not None and outcome.status == "failed"
    assert "model_requests: 3 would exceed the task's limit of 2" in outcome.reason
    (run,) = await run_rows(db)
    assert run["outcome"] == "budget_exceeded"
    assert recorded(run) == usage(2, 2, 450, 20, cost(200, 10) + cost(250, 10))
    assert (await tasks(db))[0]["status"] == "failed"
    assert market.reads == [("prices", "FUNDX"), ("prices", "FUNDY")]


async def test_after_budget_exceeded_the_next_step_is_a_larger_limit(
        db: Database, tmp_path: Path) -> None:
    """A run stopped at max_model_requests 2: history's next step names the limit and its
    value and says to propose a revision with a larger one (triggering the same revision
    again would stop the same way), not "fix the cause, then run it again" (issue 19,
    item 8)."""
    clock = FakeClock(utc(START))
    market = Market(clock)
    async with model_server(
            tools(("read_observation", {"source": "prices", "subject": "FUNDX"})),
            tools(("read_observation", {"source": "prices", "subject": "FUNDY"})),
            answer()) as server:
        await model_task(db, clock, server.base_url, limits={"max_model_requests": 2})
        outcome = await model_worker(db, clock, tmp_path, server.base_url, market).run_once()
    assert outcome is not None and outcome.status == "failed"
    (entry,) = (await history(db, HistoryQuery("acme", "d1"))).entries
    assert entry.next_step == (
        "the run stopped at its budget: limits.max_model_requests is 2 for the whole task "
        "(every attempt and root), so running this revision again stops the same way; "
        "propose a revision (--based-on 1) with a limits.max_model_requests larger than 2, "
        "have the owner confirm it, then, not to wait for the next occurrence: watchkeeper "
        "trigger d1 --tenant acme")


async def test_after_a_model_endpoint_404_the_next_step_names_agent_params_model(
        db: Database, tmp_path: Path) -> None:
    """The model endpoint answers 404 (it does not serve 'test-model'): the task fails
    and history's next step names agent.params.model (issue 19, item 8)."""
    clock = FakeClock(utc(START))
    market = Market(clock)
    async with model_server(status(404)) as server:
        await model_task(db, clock, server.base_url)
        outcome = await model_worker(db, clock, tmp_path, server.base_url, market).run_once()
    assert outcome is not None and outcome.status == "failed", outcome
    assert "404" in outcome.reason
    (entry,) = (await history(db, HistoryQuery("acme", "d1"))).entries
    step = entry.next_step
    assert step is not None and step.startswith(
        "the model endpoint answered 404: it does not serve the model named in "
        "agent.params.model")
    assert "propose a revision (--based-on 1) whose agent.params.model is a model the " \
        "endpoint lists" in step and "fix the cause" not in step


async def test_the_tool_limit_refuses_the_call_past_it_and_records_it(
        db: Database, tmp_path: Path) -> None:
    """max_tool_attempts 1: the first read happens, the second is refused before the
    source is read, recorded as refused; the run ends budget_exceeded."""
    clock = FakeClock(utc(START))
    market = Market(clock)
    async with model_server(
            tools(("read_observation", {"source": "prices", "subject": "FUNDX"})),
            tools(("read_observation", {"source": "fx", "subject": "EURUSD"})),
            answer()) as server:
        await model_task(db, clock, server.base_url, limits={"max_tool_attempts": 1})
        outcome = await model_worker(db, clock, tmp_path, server.base_url, market).run_once()
        made = len(server.received)

    assert made == 2
    assert outcome is not None and outcome.status == "failed"
    assert "tool_attempts: 2 would exceed the task's limit of 1" in outcome.reason
    assert market.reads == [("prices", "FUNDX")]
    (run,) = await run_rows(db)
    assert run["outcome"] == "budget_exceeded"
    assert run["usage"]["tool_attempts"] == 1 and run["usage"]["model_requests"] == 2
    assert [(c["source"], c["status"]) for c in run["tool_calls"]] == [("prices", "ok"),
                                                                        ("fx", "refused")]
    assert "max_tool_attempts" not in run["tool_calls"][1]["reason"]  # (says the figures)
    assert "would exceed the task's limit of 1" in run["tool_calls"][1]["reason"]


async def test_the_cost_limit_stops_the_run_when_a_request_could_pass_it(
        db: Database, tmp_path: Path) -> None:
    """Output price only, so each request's reservation is exactly max_output_tokens at
    the output price (100 x 1.5/1000 = 0.15 USD) and each costs 20 x 1.5/1000 = 0.03 USD.
    Limit 0.25 USD: request n is made while (n - 1) x 0.03 + 0.15 <= 0.25, i.e. n <= 4;
    the fifth is not made; 4 x 0.03 = 0.12 USD is recorded."""
    clock = FakeClock(utc(START))
    market = Market(clock)
    limit, reserve, each = Decimal("0.25"), 100 * OUT_PRICE / 1000, 20 * OUT_PRICE / 1000
    allowed = max(n for n in range(1, 20) if (n - 1) * each + reserve <= limit)
    assert allowed == 4
    script = [tools(("read_observation", {"source": "prices", "subject": "FUNDX"}),
                    usage=(1000, 20)) for _ in range(6)]
    async with model_server(*script) as server:
        await model_task(db, clock, server.base_url, limits={"max_cost_usd": str(limit)},
                         params={"input_usd_per_1k": "0"})
        outcome = await model_worker(db, clock, tmp_path, server.base_url, market).run_once()
        made = len(server.received)

    assert made == allowed
    assert outcome is not None and outcome.status == "failed"
    assert "cost_usd" in outcome.reason and "limit of 0.25" in outcome.reason
    (run,) = await run_rows(db)
    assert run["outcome"] == "budget_exceeded"
    assert recorded(run) == usage(allowed, allowed, 1000 * allowed, 20 * allowed, each * allowed)


async def test_a_429_with_retry_after_is_retried_after_that_wait_then_succeeds(
        db: Database, tmp_path: Path) -> None:
    """429 with Retry-After: 7, then a 503 with Retry-After: 3, then an answer: the second
    try comes exactly 7 s later on the worker's clock (nothing at 6.5 s), the third 3 s
    after the second; the
    run succeeds with one model request charged (the refused tries produced nothing)."""
    clock = FakeClock(utc(START))
    market = Market(clock)
    async with model_server(status(429, retry_after="7"), status(503, retry_after="3"),
                            answer(usage=(80, 10))) as server:
        await model_task(db, clock, server.base_url)
        worker = model_worker(db, clock, tmp_path, server.base_url, market)
        async with anyio.create_task_group() as tg:
            result: list[Any] = []

            async def go() -> None:
                result.append(await worker.run_once())

            tg.start_soon(go)
            await server.wait_for_requests(1)
            with anyio.fail_after(10):
                await clock.wait_for_sleep(7)  # the Retry-After wait has begun
            clock.advance(6.5)  # (binary fractions: 6.5 + 0.5 is exactly 7)
            with anyio.fail_after(10):
                await clock.wait_for_sleep(0.5)  # the wait is still on: nothing sent yet
            assert len(server.received) == 1
            clock.advance(0.5)
            await server.wait_for_requests(2)
            with anyio.fail_after(10):
                await clock.wait_for_sleep(3)  # the 503's Retry-After
            clock.advance(3)
            await server.wait_for_requests(3)
    assert result[0] is not None and result[0].status == "completed", result
    (run,) = await run_rows(db)
    assert recorded(run) == usage(1, 0, 80, 10, cost(80, 10))


async def test_a_request_timeout_fails_the_attempt_and_the_next_attempt_answers(
        db: Database, tmp_path: Path) -> None:
    """request_timeout_seconds 30: a request held past 30 s on the clock fails attempt 1
    (retryable); after the backoff attempt 2 gets an answer and the task completes."""
    clock = FakeClock(utc(START))
    market = Market(clock)
    async with model_server(held(), answer(usage=(90, 10))) as server:
        await model_task(db, clock, server.base_url, limits={"max_attempts": 2},
                         params={"request_timeout_seconds": 30})
        worker = model_worker(db, clock, tmp_path, server.base_url, market)
        async with anyio.create_task_group() as tg:
            first: list[Any] = []

            async def go() -> None:
                first.append(await worker.run_once())

            tg.start_soon(go)
            await server.wait_for_requests(1)
            with anyio.fail_after(10):
                await clock.wait_for_sleep(30)  # the request's timeout is running
            clock.advance(29.5)
            with anyio.fail_after(10):
                await clock.wait_for_sleep(0.5)  # the timeout has not fired
            assert first == []
            clock.advance(0.5)
        assert first[0].status == "pending"
        clock.advance(60)  # past the retry backoff (at most 60 s)
        second = await worker.run_once()
    assert second is not None and (second.attempt, second.status) == (2, "completed")
    runs = await run_rows(db)
    assert [(r["attempt"], r["outcome"]) for r in runs] == [(1, "failed"), (2, "succeeded")]
    assert "took longer than 30 s" in runs[0]["error"]
    assert runs[0]["usage"]["model_requests"] == 1


async def test_the_task_deadline_cancels_a_request_in_flight(db: Database,
                                                            tmp_path: Path) -> None:
    """Deadline 60 s, request timeout 120 s: the held request is cancelled at 60 s, the
    run and the task end timed_out, the request counted (its reservation kept: it may
    have been billed)."""
    clock = FakeClock(utc(START))
    market = Market(clock)
    async with model_server(held()) as server:
        await model_task(db, clock, server.base_url, limits={"deadline": 60},
                         params={"request_timeout_seconds": 120, "input_usd_per_1k": "0"})
        worker = model_worker(db, clock, tmp_path, server.base_url, market)
        async with anyio.create_task_group() as tg:
            done: list[Any] = []

            async def go() -> None:
                done.append(await worker.run_once())

            tg.start_soon(go)
            await server.wait_for_requests(1)
            await clock.wait_for_sleepers(3)
            clock.advance(60)
    assert done[0].status == "timed_out"
    (run,) = await run_rows(db)
    assert run["outcome"] == "timed_out"
    assert recorded(run) == usage(1, 0, 0, 0, 100 * OUT_PRICE / 1000)
    assert (await tasks(db))[0]["status"] == "timed_out"


async def test_an_answer_that_does_not_validate_is_corrected_then_fails(
        db: Database, tmp_path: Path) -> None:
    """A two-line headline is sent back once for correction (output_retries 1); the
    model repeats it, so the run fails saying so. In a second task the corrected
    answer is committed."""
    clock = FakeClock(utc(START))
    market = Market(clock)
    bad = answer(headline="two\nlines")
    async with model_server(bad, answer(headline="two\nlines")) as server:
        await model_task(db, clock, server.base_url)
        outcome = await model_worker(db, clock, tmp_path, server.base_url, market).run_once()
        retry_prompt = json.dumps(server.received[1]["messages"])
    assert outcome is not None and outcome.status == "failed"
    assert "did not validate after 1 correction(s)" in outcome.reason
    assert "one line" in retry_prompt  # the validation error went back to the model
    assert await db.pool.fetchval("SELECT count(*) FROM reports") == 0


async def test_an_answer_corrected_after_one_retry_is_committed(db: Database,
                                                              tmp_path: Path) -> None:
    clock = FakeClock(utc(START))
    market = Market(clock)
    async with model_server(answer(importance="urgent"), answer(importance="low")) as server:
        await model_task(db, clock, server.base_url)
        outcome = await model_worker(db, clock, tmp_path, server.base_url, market).run_once()
    assert outcome is not None and outcome.status == "completed"
    assert await db.pool.fetchval("SELECT importance FROM reports") == "low"
    (run,) = await run_rows(db)
    assert run["usage"]["model_requests"] == 2


async def test_a_read_outside_the_scope_is_refused_recorded_and_the_model_told(
        db: Database, tmp_path: Path) -> None:
    """The model asks for source "secret" (registered, not in the definition's sources):
    nothing is read, the call is recorded refused (and charged), the model gets the
    refusal as the tool's result and answers."""
    clock = FakeClock(utc(START))
    market = Market(clock)
    async with model_server(
            tools(("read_observation", {"source": "secret", "subject": "ALL"})),
            answer()) as server:
        await model_task(db, clock, server.base_url)
        outcome = await model_worker(db, clock, tmp_path, server.base_url, market).run_once()
        told = json.dumps(server.received[1]["messages"])
    assert outcome is not None and outcome.status == "completed"
    assert market.reads == []
    (run,) = await run_rows(db)
    (call,) = run["tool_calls"]
    assert (call["source"], call["status"]) == ("secret", "refused")
    assert "outside this definition's scope" in call["reason"]
    assert "outside this definition's scope" in told
    assert run["usage"]["tool_attempts"] == 1


async def test_continuation_runs_a_second_root_within_the_same_budget(
        db: Database, tmp_path: Path) -> None:
    """max_roots 2: root 1 answers with a continuation intent; its run ends continued with
    the intent and report recorded; root 2 gets the previous report and the next
    instructions and commits the task's report. The budget spans both roots: limit 3
    requests, root 1 used 2, so root 2 has 1."""
    clock = FakeClock(utc(START))
    market = Market(clock)
    intent = {"reason": "FUNDY needs the fund's own filing", "instructions": "Summarise FUNDY."}
    async with model_server(
            tools(("read_observation", {"source": "prices", "subject": "FUNDX"})),
            answer("# Part 1\n", continuation=intent),
            answer("# Part 2\n", "high", "Both funds reviewed")) as server:
        await model_task(db, clock, server.base_url,
                         limits={"max_roots": 2, "max_model_requests": 3})
        worker = model_worker(db, clock, tmp_path, server.base_url, market)
        first = await worker.run_once()
        assert first is not None and first.status == "pending"
        (task,) = await tasks(db)
        assert (task["status"], task["root"]) == ("pending", 2)
        second = await worker.run_once()
        root2_prompt = json.dumps(server.received[2]["messages"])
    assert second is not None and second.status == "completed"
    assert "# Part 1" in root2_prompt and "Summarise FUNDY." in root2_prompt
    assert await db.pool.fetchval("SELECT content_md FROM reports") == "# Part 2\n"
    runs = await run_rows(db)
    assert [(r["attempt"], r["root"], r["outcome"]) for r in runs] == [
        (1, 1, "continued"), (2, 2, "succeeded")]
    accepted = runs[0]["continuation"]
    assert (accepted["status"], accepted["reason"], accepted["instructions"],
            accepted["report"], accepted["next_root"]) == (
        "accepted", intent["reason"], intent["instructions"], "# Part 1\n", 2)
    assert runs[1]["continuation"] is None
    assert sum(r["usage"]["model_requests"] for r in runs) == 3
    entries = (await history(db, HistoryQuery(tenant_id="acme"))).entries
    assert [(u["root"], (u["continuation"] or {}).get("status")) for u in entries[0]["runs"]] == [
        (1, "accepted"), (2, None)]


async def test_a_continuation_past_max_roots_is_refused_and_the_report_kept(
        db: Database, tmp_path: Path) -> None:
    """max_roots 1 (the default): the intent is recorded refused with why, the report is
    the task's, and no second root is started."""
    clock = FakeClock(utc(START))
    market = Market(clock)
    intent = {"reason": "more to read", "instructions": "Read everything."}
    async with model_server(answer("# Only part\n", continuation=intent)) as server:
        await model_task(db, clock, server.base_url)
        worker = model_worker(db, clock, tmp_path, server.base_url, market)
        outcome = await worker.run_once()
        again = await worker.run_once()
    assert outcome is not None and outcome.status == "completed"
    assert again is None
    (run,) = await run_rows(db)
    assert run["outcome"] == "succeeded"
    assert run["continuation"]["status"] == "refused"
    assert run["continuation"]["refusal"] == ("limits.max_roots is 1: root 1 was the last this "
                                              "task may run")
    assert await db.pool.fetchval("SELECT content_md FROM reports") == "# Only part\n"


async def test_a_stale_worker_cannot_commit_or_read_after_losing_its_lease(
        db: Database, tmp_path: Path) -> None:
    """Worker A stops renewing (paused) while its model request is held; past the 60 s
    lease B takes over and completes. When A's answer finally arrives its report commit
    is rejected (rejected_stale), the task keeps B's report, and the source was read once
    (by B): A could not spend or read again."""
    clock = FakeClock(utc(START))
    market = Market(clock)
    release = anyio.Event()
    async with model_server(
            held(release, answer("# stale\n")),
            tools(("read_observation", {"source": "prices", "subject": "FUNDX"})),
            answer("# fresh\n")) as server:
        await model_task(db, clock, server.base_url, limits={"max_attempts": 2})
        a = model_worker(db, clock, tmp_path, server.base_url, market, "A",
                         lease_seconds=60, renew_every=1000)
        b = model_worker(db, clock, tmp_path, server.base_url, market, "B", lease_seconds=60)
        stale: list[Any] = []
        async with anyio.create_task_group() as tg:
            claimed = await a.claim()
            assert claimed is not None

            async def go() -> None:
                stale.append(await a.execute(claimed))

            tg.start_soon(go)
            await server.wait_for_requests(1)
            clock.advance(61)
            fresh = await b.run_once()
            assert fresh is not None and (fresh.attempt, fresh.status) == (2, "completed")
            release.set()
    assert stale[0].status == "stale"
    assert await db.pool.fetchval("SELECT content_md FROM reports") == "# fresh\n"
    runs = await run_rows(db)
    assert [(r["attempt"], r["outcome"]) for r in runs] == [(1, "rejected_stale"),
                                                            (2, "succeeded")]
    assert market.reads == [("prices", "FUNDX")]
    assert runs[0]["usage"]["model_requests"] == 1  # A's one request was charged and counts


def test_a_spec_naming_the_model_agent_has_its_params_checked() -> None:
    """Every problem of the model agent's params at once, each naming its field."""
    from watchkeeper.triggers import SpecError, parse_spec
    with pytest.raises(SpecError) as caught:
        parse_spec({"version": 1, "trigger": {"type": "interval", "every": 3600},
                    "agent": {"name": "model", "params": {
                        "modle": "x", "temperature": 3, "max_output_tokens": 0}}})
    fields = [p.field for p in caught.value.problems]
    assert fields == ["agent.params.temperature", "agent.params.max_output_tokens",
                      "agent.params.modle"]
    assert "did you mean 'model'" in str(caught.value)


async def test_the_model_example_runs_from_the_command_line(db: Database, db_dsn: str,
                                                            tmp_path: Path) -> None:
    """As the README's "Run a model-backed agent" says: with OPENAI_BASE_URL set, `tick`
    offers the built-in model agent; the example's task (triggered now) reads the stocks
    series through the tool and commits the model's report; `report` shows the headline,
    the model and what the task spent; without the variable the task waits."""
    from test_cli import cli

    repo = REPO
    example = repo / "examples" / "holdings_review_model.toml"
    series = f"stocks={repo / 'examples' / 'series' / 'stocks.csv'}"
    _, out, _ = await cli("users", "add", "acme", "alice", dsn=db_dsn, home=tmp_path)
    token = out.strip().splitlines()[-1]
    _, out, _ = await cli("propose", str(example), "--tenant", "acme", "--id", "holdings",
                          "--owner", "alice", "--json", dsn=db_dsn, home=tmp_path)
    await cli("confirm", "holdings", "--revision", "1", "--spec-hash",
              json.loads(out)["spec_hash"], "--token", token, dsn=db_dsn, home=tmp_path)
    await cli("trigger", "holdings", "--token", token, dsn=db_dsn, home=tmp_path)
    _, out, _ = await cli("tick", "--series", series, dsn=db_dsn, home=tmp_path)
    assert json.loads(out)["tasks"] == {}  # no endpoint configured: no model agent here

    async with model_server(
            tools(("read_observation", {"source": "stocks", "subject": "IBM"}), usage=(900, 30)),
            answer("# Holdings\n\nIBM closed at 125.55 USD/share.\n", "low",
                   "Nothing below 25 USD", usage=(1100, 60))) as server:
        os.environ["OPENAI_BASE_URL"] = server.base_url
        try:
            _, out, _ = await cli("tick", "--series", series, dsn=db_dsn, home=tmp_path)
        finally:
            del os.environ["OPENAI_BASE_URL"]
        sent = server.received
    assert json.loads(out)["tasks"] == {"completed": 1}
    assert sent[0]["model"] == "gpt-4.1-mini" and sent[0]["temperature"] == 0.2
    assert "careful portfolio analyst" in json.dumps(sent[0]["messages"])
    (observation,) = [m for m in sent[1]["messages"] if m["role"] == "tool"]
    assert json.loads(observation["content"])["value"] == "125.55"  # stocks.csv's last IBM
    task_id = await db.pool.fetchval("SELECT task_id FROM tasks")
    _, out, _ = await cli("report", str(task_id), "--tenant", "acme", dsn=db_dsn, home=tmp_path)
    spent = (Decimal(900 + 1100) * Decimal("0.0004")
             + Decimal(30 + 60) * Decimal("0.0016")) / 1000
    assert "headline: Nothing below 25 USD" in out
    assert (f"took: 1 run(s) in 1 root(s), model test-model-2026; 2 model request(s), 1 tool "
            f"call(s), 2000 input + 90 output tokens, {spent.normalize()} USD") in out
    assert "IBM closed at 125.55 USD/share." in out


async def test_a_condition_fire_tells_the_model_why_it_ran(db: Database, clock: FakeClock,
                                                          tmp_path: Path) -> None:
    """A first_match condition (AAPL <= 10 USD/share) fires on 9.75: the model's task
    prompt carries the verdict and the observation that fired it (value, unit, as_of,
    source version), from the poll, not from the model."""
    from test_conditions_runtime import LE_10, condition, registry_of, step_hours

    as_of = utc("2026-06-01T00:30Z")
    sources = registry_of(lambda s, at: ("9.75", as_of), clock=clock)
    spec = condition(LE_10, mode="first_match", sources=["prices"],
                     agent={"name": "model", "params": {"model": "test-model"}})
    async with model_server(answer("# AAPL\n\nBelow 10.\n", "high", "AAPL at 9.75")) as server:
        await confirmed(db, clock, spec)
        await step_hours(db, clock, sources, 1)
        catalog = AgentCatalog()
        catalog.add("model", ModelAgent(ModelEndpoint(server.base_url, "k")))
        worker = Worker(db, clock, catalog, worker_id="w", artifact_root=tmp_path,
                        sources=sources)
        outcome = await worker.run_once()
        prompt = json.dumps(server.received[0]["messages"])
    assert outcome is not None and outcome.status == "completed", outcome
    assert "## Why it ran" in prompt
    assert '\\"value\\": \\"9.75\\"' in prompt and "USD/share" in prompt
    assert "2026-06-01T00:30:00Z" in prompt and '\\"source_version\\": \\"1\\"' in prompt
    assert await db.pool.fetchval("SELECT headline FROM reports") == "AAPL at 9.75"


async def test_the_api_shows_what_a_model_run_took(db: Database,
                                                                tmp_path: Path) -> None:
    """GET /v1/tasks/{id}/report answers the headline, the model and the task's spending;
    /v1/history's runs carry root, model, usage and tool calls (as history does)."""
    from _api import serving

    from watchkeeper.runtime.usecases import create_key

    clock = FakeClock(utc(START))
    market = Market(clock)
    async with model_server(
            tools(("read_observation", {"source": "prices", "subject": "FUNDX"}), usage=(300, 40)),
            answer("# R\n", "high", "FUNDX below 5,000", usage=(500, 60))) as server:
        await model_task(db, clock, server.base_url)
        outcome = await model_worker(db, clock, tmp_path, server.base_url, market).run_once()
    assert outcome is not None and outcome.status == "completed"
    key = (await create_key(db, clock, "operator", tenant_id="acme", name="ops")).token
    async with serving(db, clock, tmp_path) as api:
        report = await api.call("GET", f"/v1/tasks/{outcome.task_id}/report", key)
        page = await api.call("GET", "/v1/history", key)
    assert report.status_code == 200, report.text
    body = report.json()
    assert (body["headline"], body["model"], body["roots"], body["runs"], body["tool_calls"]) == (
        "FUNDX below 5,000", "test-model-2026", 1, 1, 1)
    assert body["usage"] == {"model_requests": 2, "tool_attempts": 1, "input_tokens": 800,
                             "output_tokens": 100,
                             "cost_usd": str((cost(300, 40) + cost(500, 60)).normalize())}
    assert page.status_code == 200, page.text
    (run,) = page.json()["items"][0]["runs"]
    assert (run["root"], run["model"], run["usage"]["model_requests"], len(run["tool_calls"])) == (
        1, "test-model-2026", 2, 1)
