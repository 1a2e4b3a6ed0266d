"""Adversarial checks of continuation roots, the report's usage and the doors that show
model-provided text (second round). Real PostgreSQL, a real worker; the agents are
in-process Python agents (their results stand for what a model or a command answers).
Each test states the rule it checks and the defect it found; each failed on 1d2ddf8."""

from __future__ import annotations

import os
import sys
from collections.abc import Awaitable, Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import anyio
import pytest
from _helpers import confirmed, tasks, utc

from watchkeeper.runtime._errors import AgentError
from watchkeeper.runtime.engine._agents import (
    AgentCatalog,
    AgentContext,
    AgentResult,
    Continuation,
    Usage,
)
from watchkeeper.runtime.engine._clock import FakeClock
from watchkeeper.runtime.engine._scheduler import tick
from watchkeeper.runtime.engine._worker import Worker
from watchkeeper.runtime.store._db import Database
from watchkeeper.runtime.usecases import report

pytestmark = pytest.mark.anyio

START = "2026-06-01T00:00:00Z"


class Scripted:
    """An agent whose run is ``fn(ctx)``."""

    def __init__(self, fn: Callable[[AgentContext], Awaitable[AgentResult]]) -> None:
        self.fn = fn

    async def run(self, ctx: AgentContext) -> AgentResult:
        return await self.fn(ctx)


async def admitted(db: Database, clock: FakeClock, tmp_path: Path,
                   fn: Callable[[AgentContext], Awaitable[AgentResult]],
                   **spec: Any) -> Worker:
    """Definition d1 (agent 'py' = ``fn``), its first slot admitted; a worker for it."""
    agents = AgentCatalog()
    agents.add("py", Scripted(fn))
    await confirmed(db, clock, {"trigger": {"type": "interval", "every": 3600, "anchor": START},
                                "agent": {"name": "py"}, **spec})
    clock.advance(1)
    assert (await tick(db, clock)).admitted == 1
    return Worker(db, clock, agents, worker_id="w", artifact_root=tmp_path)


async def cli(dsn: str, home: Path, *args: str) -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env.update(WATCHKEEPER_HOME=str(home), COLUMNS="200", DATABASE_URL=dsn)
    result = await anyio.run_process([sys.executable, "-m", "watchkeeper", *args], env=env,
                                     check=False)
    return result.returncode, result.stdout.decode(), result.stderr.decode()


GO_ON = Continuation("half done", "finish it")


@pytest.mark.parametrize("cost", ["10", "20", "0.0000001"])
async def test_the_reports_cost_total_is_a_plain_decimal_string(
        db: Database, tmp_path: Path, cost: str) -> None:
    """ReportOut.usage.cost_usd: "USD, a decimal string (exact)". uc.report formats the
    sum with str(Decimal.normalize()), which is scientific notation for a whole number
    of tens ("1E+1" for 10 USD, "2E+1" for 20) and for anything below a millionth
    ("1E-7"); the run rows themselves use format(..., "f"). The API, MCP and CLI
    `report` show "1E+1 USD"; a client doing Decimal() still reads it, one comparing
    strings or parsing JSON numbers-as-text in another language does not."""
    clock = FakeClock(utc(START))

    async def run(ctx: AgentContext) -> AgentResult:
        return AgentResult("# r\n", usage=Usage(model_requests=1, cost_usd=Decimal(cost)))

    worker = await admitted(db, clock, tmp_path, run)
    outcome = await worker.run_once()
    assert outcome is not None and outcome.status == "completed", outcome
    row = await report(db, "acme", outcome.task_id)
    assert row["usage"]["cost_usd"] == format(Decimal(cost), "f")
    assert "E" not in row["usage"]["cost_usd"]


async def test_a_cancel_requested_during_root1_does_not_discard_its_report(
        db: Database, tmp_path: Path) -> None:
    """Rules: a further root only under an explicit intent within limits; when a later
    root does not finish, the task keeps the earlier root's report. A cancel request
    (cancel --running) lands while root 1 runs; root 1 returns its report with a
    continuation before the renewal sees the request. _continue checks max_roots,
    deadline and budget but not cancel_requested_at, so it accepts: task_continue puts
    the task back to pending as root 2, whose claim _refusal turns into 'cancelled'
    (not in KEEPS_EARLIER_ROOT). Root 1's finished report is gone, although the same
    race without a continuation commits it (completed). The intent should be refused
    ("cancellation was requested") and root 1's report committed, or kept."""
    clock = FakeClock(utc(START))

    async def run(ctx: AgentContext) -> AgentResult:
        if ctx.root == 1:
            await db.pool.execute("UPDATE tasks SET cancel_requested_at = now()")
            return AgentResult("# part 1\n", continuation=GO_ON)
        return AgentResult("# part 2\n")

    worker = await admitted(db, clock, tmp_path, run, limits={"max_roots": 2})
    await worker.run_once()
    await worker.run_once()
    assert await db.pool.fetchval("SELECT content_md FROM reports") == "# part 1\n"


async def test_a_root2_report_that_fails_verification_does_not_replace_root1s(
        db: Database, tmp_path: Path) -> None:
    """Rule: when a later root fails, the task keeps the earlier root's report. Root 1
    wrote a good (verified) markdown report and asked to go on; root 2 returns an empty
    report. KEEPS_EARLIER_ROOT is only failed/timed_out, and _commit writes root 2's
    empty, unverified report as the task's: the task ends failed_verification, root 1's
    verified report is discarded and nothing is delivered."""
    clock = FakeClock(utc(START))

    async def run(ctx: AgentContext) -> AgentResult:
        if ctx.root == 1:
            return AgentResult("# part 1\n", continuation=GO_ON)
        return AgentResult("")

    worker = await admitted(db, clock, tmp_path, run, limits={"max_roots": 2})
    await worker.run_once()
    second = await worker.run_once()
    assert second is not None
    row = await db.pool.fetchrow("SELECT content_md, verified FROM reports")
    assert tuple(row) == ("# part 1\n", True)
    assert (await tasks(db))[0]["status"] == "completed"


async def test_cli_history_shows_a_models_continuation_reason_as_text(
        db: Database, db_dsn: str, tmp_path: Path) -> None:
    """The CLI history table puts each run's continuation reason (the model's own text)
    into a rich Table cell, and rich parses cell strings as console markup: a reason
    with "[/b]" raises MarkupError and `watchkeeper history` crashes; "[link=...]" or
    "[black on black]" would restyle or hide what the operator reads. (The page escapes
    it; the CLI does not.)"""
    clock = FakeClock(utc(START))
    reason = "prices moved [/b] see [red]FUNDX[/red]"

    async def run(ctx: AgentContext) -> AgentResult:
        return AgentResult("# r\n", continuation=Continuation(reason, "go on"))

    worker = await admitted(db, clock, tmp_path, run)  # max_roots 1: refused, committed
    outcome = await worker.run_once()
    assert outcome is not None and outcome.status == "completed", outcome
    code, out, err = await cli(db_dsn, tmp_path, "history", "d1", "--tenant", "acme")
    assert code == 0, err
    assert "[/b]" in out.replace("\n", "")


async def test_cli_report_prints_a_kept_reports_verification_as_text(
        db: Database, db_dsn: str, tmp_path: Path) -> None:
    """When root 2 fails, _earlier_root_report records the root 2 error (an agent's
    message) in the report's verification; `watchkeeper report` prints the receipt line
    (verification included) with rich markup on (only the headline and usage lines pass
    markup=False), so an error text with "[/x]" crashes the command with MarkupError
    and the kept report cannot be read from the CLI."""
    clock = FakeClock(utc(START))

    async def run(ctx: AgentContext) -> AgentResult:
        if ctx.root == 1:
            return AgentResult("# part 1\n", continuation=GO_ON)
        raise AgentError("upstream said [/x] nope", retryable=False)

    worker = await admitted(db, clock, tmp_path, run, limits={"max_roots": 2})
    await worker.run_once()
    second = await worker.run_once()
    assert second is not None and second.status == "completed", second
    code, out, err = await cli(db_dsn, tmp_path, "report", str(second.task_id),
                               "--tenant", "acme")
    assert code == 0, err
    assert "[/x]" in out and "# part 1" in out


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
    clock = FakeClock(utc(START))

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


async def test_cancelling_a_definition_while_root2_waits_keeps_root1s_report(
        db: Database, tmp_path: Path) -> None:
    """Root 1 continued; before root 2 is claimed the owner cancels the definition (not
    --running). Root 2 never runs, and the task ends with root 1's report, delivered,
    the reason naming the cancellation."""
    from watchkeeper.runtime.usecases import cancel

    clock = FakeClock(utc(START))
    ran: list[int] = []

    async def run(ctx: AgentContext) -> AgentResult:
        ran.append(ctx.root)
        return AgentResult("# part 1\n", continuation=GO_ON)

    worker = await admitted(db, clock, tmp_path, run, limits={"max_roots": 2})
    first = await worker.run_once()
    assert first is not None and first.status == "pending"
    me = await db.pool.fetchval("SELECT owner_user_id FROM definitions")
    from watchkeeper.runtime.usecases import UserPrincipal
    await cancel(db, clock, UserPrincipal("acme", me), "acme", "d1")
    second = await worker.run_once()
    assert ran == [1]
    assert second is not None and second.status == "completed"
    (task,) = await tasks(db)
    assert "cancel" in task["status_reason"] and "root 1's" in task["status_reason"]
    assert await db.pool.fetchval("SELECT content_md FROM reports") == "# part 1\n"
    assert await db.pool.fetchval("SELECT count(*) FROM deliveries") == 1
