"""What an agent returns that PostgreSQL cannot store, and a database that refuses a
task's outcome, against real PostgreSQL with a fake clock: the task fails once with a
reason naming the problem, and neither the worker, the supervisor nor a tick stops."""

from __future__ import annotations

import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

import anyio
import pytest
from _helpers import confirmed, tasks, utc

from watchkeeper.runtime._errors import AgentError
from watchkeeper.runtime._settings import Settings
from watchkeeper.runtime.engine._agents import AgentCatalog, AgentContext, AgentResult, Usage
from watchkeeper.runtime.engine._clock import FakeClock
from watchkeeper.runtime.engine._command import CommandAgent
from watchkeeper.runtime.engine._scheduler import tick
from watchkeeper.runtime.engine._supervisor import Supervisor, SupervisorConfig
from watchkeeper.runtime.engine._worker import UNRECORDABLE, Worker
from watchkeeper.runtime.store._db import Database
from watchkeeper.runtime.usecases import tick_once
from watchkeeper.sources import SourceRegistry

pytestmark = pytest.mark.anyio

START = "2026-06-01T00:00:00Z"
BIGINT_MAX = 9223372036854775807
NO_USAGE = {"model_requests": 0, "tool_attempts": 0, "input_tokens": 0, "output_tokens": 0,
            "cost_usd": "0"}
FIX = (". Fix: return text without NUL characters or lone surrogates, an Importance, and a "
       "Usage whose figures PostgreSQL can hold")


class Returning:
    """An agent that returns (or raises) what ``make(ctx)`` gives."""

    def __init__(self, make: Any) -> None:
        self.make = make

    async def run(self, ctx: AgentContext) -> AgentResult:
        return self.make(ctx)


async def admitted(db: Database, clock: FakeClock, tmp_path: Path, agent: Any,
                   **spec: Any) -> Worker:
    """An hourly definition whose agent 'py' is ``agent``, its first slot admitted."""
    agents = AgentCatalog()
    agents.add("py", agent)
    await confirmed(db, clock, {"trigger": {"type": "interval", "every": 3600, "anchor": START},
                                "agent": {"name": "py"}, **spec})
    clock.advance(1)
    assert (await tick(db, clock)).admitted == 1
    return Worker(db, clock, agents, worker_id="w", artifact_root=tmp_path)


async def runs(db: Database) -> list[tuple[int, str, str | None, dict[str, Any]]]:
    rows = await db.pool.fetch("SELECT attempt, outcome, error, usage FROM runs ORDER BY run_id")
    return [(r["attempt"], r["outcome"], r["error"], r["usage"]) for r in rows]


@pytest.mark.parametrize(("result", "problem", "usage"), [
    (AgentResult("# r\x00"), "report: the report contains a NUL character at offset 3; "
     "PostgreSQL text cannot hold it", NO_USAGE),
    (AgentResult("# \ud800 r"), "report: the report contains a lone surrogate U+D800 at offset "
     "2; it has no UTF-8 encoding, so PostgreSQL text cannot hold it", NO_USAGE),
    (AgentResult("# r", artifact=Path("a\x00.csv")), "artifact: the artifact path contains a "
     "NUL character at offset 1; PostgreSQL text cannot hold it", NO_USAGE),
    (AgentResult("# r", importance="high"),  # type: ignore[arg-type]
     "importance: 'high' is not an Importance (low, normal or high)", NO_USAGE),
    (None, "result: the agent returned NoneType, not an AgentResult", NO_USAGE),
    (AgentResult("# r", usage=Usage(model_requests=2**64)),
     f"usage.model_requests: {2**64} is past the largest recordable count ({BIGINT_MAX})",
     {**NO_USAGE, "model_requests": BIGINT_MAX}),
    (AgentResult("# r", usage=Usage(cost_usd=Decimal("1E-20000"))),
     "usage.cost_usd: 1E-20000 has more than 18 digits after the decimal point",
     {**NO_USAGE, "cost_usd": "0.000000000000000001"}),
])
async def test_a_result_postgresql_cannot_store_fails_the_task_once(
        db: Database, tmp_path: Path, result: Any, problem: str,
        usage: dict[str, Any]) -> None:
    """A Python agent's unstorable result fails its task without another attempt (3 were
    allowed), naming the field; usage is recorded as the nearest storable value at or
    above it, so the budget's sums over the runs still compute."""
    clock = FakeClock(utc(START))
    worker = await admitted(db, clock, tmp_path, Returning(lambda ctx: result),
                            limits={"max_attempts": 3})
    outcome = await worker.run_once()
    reason = f"AgentError: the agent's result cannot be stored: {problem}{FIX}"
    assert outcome is not None and (outcome.status, outcome.reason) == ("failed", reason)
    assert await worker.run_once() is None
    assert await runs(db) == [(1, "failed", reason, usage)]
    [task] = await tasks(db)
    assert (task["status"], task["status_reason"]) == ("failed", reason)
    assert await db.pool.fetchval("SELECT count(*) FROM reports") == 0
    total = await db.pool.fetchrow(
        "SELECT sum((usage->>'model_requests')::bigint) AS requests, "
        "sum((usage->>'cost_usd')::numeric) AS cost FROM runs")
    assert (total["requests"], total["cost"]) == (usage["model_requests"],
                                                  Decimal(usage["cost_usd"]))


async def test_an_error_message_with_nul_and_a_surrogate_is_recorded_escaped(
        db: Database, tmp_path: Path) -> None:
    """An agent's own AgentError quoting a NUL and a lone surrogate is retried as it asks,
    its message recorded with both written as backslash escapes."""
    clock = FakeClock(utc(START))

    def fail(ctx: AgentContext) -> AgentResult:
        raise AgentError("bad\x00thing \ud800", retryable=True)

    worker = await admitted(db, clock, tmp_path, Returning(fail))
    outcome = await worker.run_once()
    assert outcome is not None and outcome.status == "pending"
    [task] = await tasks(db)
    assert task["status_reason"] == "retrying after AgentError: bad\\x00thing \\ud800"
    assert await runs(db) == [(1, "failed", "AgentError: bad\\x00thing \\ud800", NO_USAGE)]


async def test_a_long_error_message_is_cut_to_the_reason_limit(db: Database,
                                                                tmp_path: Path) -> None:
    """A 10,000-character exception message is recorded as its first 4,000 characters of
    reason and a note of how many more were cut."""
    clock = FakeClock(utc(START))

    def fail(ctx: AgentContext) -> AgentResult:
        raise RuntimeError("x" * 10_000)

    worker = await admitted(db, clock, tmp_path, Returning(fail))
    assert (await worker.run_once()).status == "pending"  # type: ignore[union-attr]
    full = "retrying after RuntimeError: " + "x" * 10_000
    [task] = await tasks(db)
    assert task["status_reason"] == full[:4000] + f"... ({len(full) - 4000} more characters cut)"


REFUSE_REPORTS = ("ALTER TABLE reports ADD CONSTRAINT test_refuses_this_report "
                  "CHECK (content_md NOT LIKE '%REFUSED%')")


async def test_a_refused_report_commit_fails_the_task_and_the_supervisor_goes_on(
        db: Database, tmp_path: Path) -> None:
    """The database refusing one report (a check constraint) fails that task, its usage
    recorded, with the refusal as its reason; no loop dies and the next slot completes."""
    clock = FakeClock(utc("2026-06-01T00:00:30Z"))
    await db.pool.execute(REFUSE_REPORTS)
    agents = AgentCatalog()
    first = "2026-06-01T00:01:00Z"

    def report(ctx: AgentContext) -> AgentResult:
        word = "REFUSED" if ctx.occurrence.slot == first else "fine"
        return AgentResult(f"# {word}\n", usage=Usage(model_requests=2))

    agents.add("py", Returning(report))
    await confirmed(db, clock, {"trigger": {"type": "interval", "every": 60},
                                "agent": {"name": "py"}, "limits": {"max_attempts": 3}})
    supervisor = Supervisor(db, clock, SupervisorConfig(home=tmp_path, skew_budget=None,
                                                        supervisor_id="sup-1"), agents=agents)
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            await tg.start(supervisor.run)
            await supervisor.wait_idle()
            for _ in range(2):
                clock.advance(60)
                await supervisor.wait_idle()
            stats = supervisor.statistics()
            supervisor.stop()
    assert (stats.task_outcomes, stats.dead_loops, stats.restarts) == (
        {"failed": 1, "completed": 1}, frozenset(), {})
    failed, completed = await tasks(db)
    assert (failed["slot"], failed["status"], failed["attempts"]) == (first, "failed", 1)
    assert failed["status_reason"].startswith(
        "the database refused to record this task's outcome: report_insert: new row for "
        'relation "reports" violates check constraint "test_refuses_this_report"')
    assert completed["status"] == "completed"
    assert await runs(db) == [
        (1, "failed", failed["status_reason"], {**NO_USAGE, "model_requests": 2}),
        (1, "succeeded", None, {**NO_USAGE, "model_requests": 2})]


async def test_when_the_refusal_itself_is_refused_a_fixed_reason_is_recorded(
        db: Database, tmp_path: Path) -> None:
    """A task whose reason may not name the constraint gets the fixed reason; the run keeps
    the full one."""
    clock = FakeClock(utc(START))
    await db.pool.execute(REFUSE_REPORTS)
    await db.pool.execute("ALTER TABLE tasks ADD CONSTRAINT test_refuses_the_reason CHECK "
                          "(status_reason NOT LIKE '%test_refuses_this_report%')")
    worker = await admitted(db, clock, tmp_path, Returning(lambda ctx: AgentResult("# REFUSED")))
    outcome = await worker.run_once()
    assert outcome is not None and (outcome.status, outcome.reason) == ("failed", UNRECORDABLE)
    [task] = await tasks(db)
    assert (task["status"], task["status_reason"]) == ("failed", UNRECORDABLE)
    [(_, run_outcome, error, _)] = await runs(db)
    assert run_outcome == "failed" and 'check constraint "test_refuses_this_report"' in error


async def test_a_database_that_refuses_every_record_leaves_the_task_to_its_lease(
        db: Database, tmp_path: Path) -> None:
    """With even the failure refused, the worker returns 'unrecorded' instead of raising;
    the task stays running until its lease expires."""
    clock = FakeClock(utc(START))
    await db.pool.execute(REFUSE_REPORTS)
    await db.pool.execute("ALTER TABLE tasks ADD CONSTRAINT test_refuses_failing CHECK "
                          "(status <> 'failed')")
    worker = await admitted(db, clock, tmp_path, Returning(lambda ctx: AgentResult("# REFUSED")))
    outcome = await worker.run_once()
    assert outcome is not None and outcome.status == "unrecorded"
    assert outcome.reason.startswith("the database refused to record this task's outcome: "
                                     "report_insert: ")
    [task] = await tasks(db)
    assert task["status"] == "running"
    assert await worker.run_once() is None  # the lease is still held


async def test_a_tick_with_a_nul_printing_command_counts_one_failed_task(
        db: Database, tmp_path: Path) -> None:
    """`watchkeeper tick`'s work (tick_once) ends normally: the command printing a NUL
    fails its task once, counted, and nothing is raised."""
    clock = FakeClock(utc(START))
    agents = AgentCatalog()
    code = "import sys; sys.stdin.read(); sys.stdout.write('# report\\0tail\\n')"
    agents.add("cmd", CommandAgent([sys.executable, "-c", code]))
    await confirmed(db, clock, {"trigger": {"type": "interval", "every": 3600, "anchor": START},
                                "agent": {"name": "cmd"}, "limits": {"max_attempts": 3}})
    clock.advance(1)
    result = await tick_once(db, clock, Settings(home=tmp_path), agents=agents,
                             sources=SourceRegistry())
    assert result["tasks"] == {"failed": 1}
    [task] = await tasks(db)
    assert task["status"] == "failed" and task["attempts"] == 1
    assert ("report: the report contains a NUL character at offset 8; PostgreSQL text cannot "
            "hold it") in task["status_reason"]


async def test_a_supervisor_running_a_nul_printing_command_keeps_running(
        db: Database, tmp_path: Path) -> None:
    """The reviewer's reproduction, in process: the command runs once, its task fails for
    good, and the supervisor's loops all stay up."""
    clock = FakeClock(utc("2026-06-01T00:00:30Z"))
    calls = tmp_path / "calls.log"
    code = (f"import sys; sys.stdin.read(); open({str(calls)!r}, 'a').write('run\\n'); "
            "sys.stdout.write('# report\\0tail\\n')")
    agents = AgentCatalog()
    agents.add("cmd", CommandAgent([sys.executable, "-c", code]))
    await confirmed(db, clock, {"trigger": {"type": "interval", "every": 3600},
                                "agent": {"name": "cmd"}, "limits": {"max_attempts": 3}})
    supervisor = Supervisor(db, clock, SupervisorConfig(home=tmp_path, skew_budget=None,
                                                        supervisor_id="sup-1",
                                                        lease_seconds=3), agents=agents)
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            await tg.start(supervisor.run)
            clock.advance(3600)
            await supervisor.wait_idle()
            for _ in range(4):
                clock.advance(4)
                await supervisor.wait_idle()
            stats = supervisor.statistics()
            supervisor.stop()
    assert (stats.task_outcomes, stats.dead_loops) == ({"failed": 1}, frozenset())
    assert calls.read_text() == "run\n"
    [task] = await tasks(db)
    assert (task["status"], task["attempts"]) == ("failed", 1)
    assert [tuple(r) for r in await db.pool.fetch("SELECT attempt, outcome, usage FROM runs")] == [
        (1, "failed", {**NO_USAGE, "tool_attempts": 1})]
