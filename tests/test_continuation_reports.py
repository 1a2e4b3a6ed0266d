"""A continuation (root 2) never costs the report root 1 committed: root 1's report
survives a root 2 that never runs, fails verification, or is cancelled (the task or the
definition) while it waits; the CLI shows a continuation's reason and a kept report's
verification as text. Real PostgreSQL, a real worker."""

from __future__ import annotations

from pathlib import Path

import pytest
from _helpers import tasks, utc
from _model_server import answer, model_server
from _scripted import GO_ON, SCRIPTED_START, admitted, cli
from test_model_agent import START, Market, model_task, model_worker

from watchkeeper.runtime import FakeClock
from watchkeeper.runtime._errors import AgentError
from watchkeeper.runtime.engine._agents import (
    AgentContext,
    AgentResult,
    Continuation,
)
from watchkeeper.runtime.store._db import Database

pytestmark = pytest.mark.anyio

READ = "read_observation"


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
    clock = FakeClock(utc(SCRIPTED_START))

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
    clock = FakeClock(utc(SCRIPTED_START))

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


async def test_cancelling_a_definition_while_root2_waits_keeps_root1s_report(
        db: Database, tmp_path: Path) -> None:
    """Root 1 continued; before root 2 is claimed the owner cancels the definition (not
    --running). Root 2 never runs, and the task ends with root 1's report, delivered,
    the reason naming the cancellation."""
    from watchkeeper.runtime.usecases import cancel

    clock = FakeClock(utc(SCRIPTED_START))
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


async def test_cli_history_shows_a_models_continuation_reason_as_text(
        db: Database, db_dsn: str, tmp_path: Path) -> None:
    """The CLI history table puts each run's continuation reason (the model's own text)
    into a rich Table cell, and rich parses cell strings as console markup: a reason
    with "[/b]" raises MarkupError and `watchkeeper history` crashes; "[link=...]" or
    "[black on black]" would restyle or hide what the operator reads. (The page escapes
    it; the CLI does not.)"""
    clock = FakeClock(utc(SCRIPTED_START))
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
    clock = FakeClock(utc(SCRIPTED_START))

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
