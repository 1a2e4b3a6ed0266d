"""A supervisor's graceful drain, on a fake clock against real PostgreSQL: on a stop
request it claims nothing new, lets what is in flight finish within the drain deadline,
then interrupts what is left, records those runs ``interrupted`` with the reason and
releases their tasks at once (another worker runs them before the lease would have
expired), within the task's attempts and deadline; the outbox releases what it was
sending; and ``watchkeeper run`` drains on SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
from _helpers import confirmed, tasks, utc

from watchkeeper.outbox import Dispatcher, LogChannel, Notice
from watchkeeper.runtime import ConfigError, load_settings
from watchkeeper.runtime.engine._agents import AgentCatalog, AgentContext, AgentResult
from watchkeeper.runtime.engine._clock import FakeClock, SystemClock
from watchkeeper.runtime.engine._delivery_store import PgDeliveryStore
from watchkeeper.runtime.engine._drain import Shutdown
from watchkeeper.runtime.engine._registry import Registry, RunContext, ScheduleDef, register
from watchkeeper.runtime.engine._scheduler import tick
from watchkeeper.runtime.engine._supervisor import Supervisor, SupervisorConfig
from watchkeeper.runtime.engine._worker import Worker
from watchkeeper.runtime.store._db import Database
from watchkeeper.runtime.usecases import trigger_now

pytestmark = pytest.mark.anyio

DEADLINE_REASON = "supervisor shutting down: drain deadline of 30 s passed"


class Quick:
    """Takes ``seconds`` of the fake clock, then reports."""

    def __init__(self, clock: FakeClock, seconds: float = 0) -> None:
        self.clock, self.seconds = clock, seconds
        self.started = anyio.Event()

    async def run(self, ctx: AgentContext) -> AgentResult:
        self.started.set()
        await self.clock.sleep(self.seconds)
        return AgentResult(f"# attempt {ctx.attempt}\n")


class Stuck:
    """Never returns on its own; notes that it was cancelled."""

    def __init__(self) -> None:
        self.started = anyio.Event()
        self.cancelled = False

    async def run(self, ctx: AgentContext) -> AgentResult:
        self.started.set()
        try:
            await anyio.sleep_forever()
        finally:
            self.cancelled = True
        raise AssertionError("unreachable")


class Blocking:
    """A channel whose send never finishes."""

    def __init__(self) -> None:
        self.entered = anyio.Event()

    async def send(self, notice: Notice) -> str:
        self.entered.set()
        await anyio.sleep_forever()
        raise AssertionError("unreachable")


def config(tmp_path: Path, **changes: Any) -> SupervisorConfig:
    return SupervisorConfig(home=tmp_path, skew_budget=None, supervisor_id="sup-a",
                            **{"drain_seconds": 30.0, **changes})


def every_minute(agent: str, **spec: Any) -> dict[str, Any]:
    return {"trigger": {"type": "interval", "every": 60}, "agent": {"name": agent}, **spec}


async def task_of(db: Database, definition_id: str) -> dict[str, Any]:
    rows = await tasks(db, definition_id)
    assert len(rows) == 1, rows
    return rows[0]


async def runs_of(db: Database, task_id: int) -> list[tuple[int, str, str | None, str]]:
    rows = await db.pool.fetch("SELECT attempt, outcome, error, worker FROM runs "
                               "WHERE task_id = $1 ORDER BY attempt", task_id)
    return [(r["attempt"], r["outcome"], r["error"], r["worker"]) for r in rows]


async def test_a_drain_finishes_what_it_can_and_releases_the_rest_at_once(
        db: Database, tmp_path: Path) -> None:
    """Two running tasks and a drain of 30 s: the one whose agent finishes in 10 s
    completes; the one that blocks is interrupted at the deadline, its run recorded
    ``interrupted`` with the reason and its task released (pending, lease cleared), so
    a plain worker runs it as attempt 2 at once, before the old lease would have
    expired. The draining supervisor claims nothing new: not a task admitted during the
    drain, and its tick admits no slot that falls due during it."""
    clock = FakeClock(utc("2026-06-01T00:00:30Z"))
    me = await confirmed(db, clock, every_minute("quick"), definition_id="quick")
    await confirmed(db, clock, every_minute("stuck"), definition_id="stuck", principal=me)
    await confirmed(db, clock, {"trigger": {"type": "interval", "every": 86400}},
                    definition_id="later", principal=me)  # next slot tomorrow
    await confirmed(db, clock, {"trigger": {"type": "interval", "every": 60,
                                            "anchor": "2026-06-01T00:00:20Z"}},
                    definition_id="edge", principal=me)  # a slot at 00:01:20, in the drain
    quick, stuck = Quick(clock, 10), Stuck()
    agents = AgentCatalog()
    agents.add("quick", quick)
    agents.add("stuck", stuck)
    supervisor = Supervisor(db, clock, config(tmp_path), agents=agents)
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            await tg.start(supervisor.run)
            await supervisor.wait_idle()
            clock.advance(30)  # 00:01:00: quick and stuck are admitted and start
            await quick.started.wait()
            await stuck.started.wait()
            lease = (await task_of(db, "stuck"))["lease_expires_at"]
            assert lease == utc("2026-06-01T00:02:00Z")
            assert supervisor.drain() is Shutdown.DRAINING
            await trigger_now(db, clock, me, "acme", "later")  # due now, admitted meanwhile
            clock.advance(10)  # 00:01:10: the quick run finishes within the drain
            await supervisor.wait_until(lambda s: s.completed == 1)
            clock.advance(20)  # 00:01:30: the deadline; edge's 00:01:20 slot is due too
    assert clock.now() == utc("2026-06-01T00:01:30Z")
    assert stuck.cancelled
    done, released = await task_of(db, "quick"), await task_of(db, "stuck")
    assert (done["status"], done["attempts"]) == ("completed", 1)
    assert (released["status"], released["attempts"], released["lease_owner"],
            released["lease_expires_at"]) == ("pending", 1, None, None)
    assert released["status_reason"] == f"released for another attempt: {DEADLINE_REASON}"
    [(attempt, outcome, error, first)] = await runs_of(db, released["task_id"])
    assert (attempt, outcome, error) == (1, "interrupted", DEADLINE_REASON)
    assert first.startswith("sup-a/w")
    later = await task_of(db, "later")
    assert (later["status"], later["attempts"], later["lease_owner"]) == ("pending", 0, None)
    assert await tasks(db, "edge") == []
    report = supervisor.drain_report()
    assert report is not None and report.reason == DEADLINE_REASON
    assert [(o.task_id, o.status) for o in report.finished] == [(done["task_id"], "completed")]
    assert [(o.task_id, o.status) for o in report.interrupted] == [(released["task_id"], "pending")]
    assert report.summary() == f"drained: 1 finished, 1 interrupted and released (task {released['task_id']})"
    assert await db.pool.fetchval("SELECT status FROM supervisors") == "stopped"

    other = AgentCatalog()
    other.add("stuck", Quick(clock))
    worker = Worker(db, clock, other, worker_id="sup-b/w0", artifact_root=tmp_path)
    outcome = await worker.run_once()  # at once: the clock has not moved
    assert outcome is not None and (outcome.task_id, outcome.attempt, outcome.status) == (
        released["task_id"], 2, "completed")
    assert worker.takeovers == 0 and clock.now() < lease
    assert [(a, o, w) for a, o, _, w in await runs_of(db, released["task_id"])] == [
        (1, "interrupted", first), (2, "succeeded", "sup-b/w0")]
    assert (await tick(db, clock)).admitted == 1  # edge's slot was due all along


async def test_a_second_stop_request_ends_the_drain_early(db: Database, tmp_path: Path) -> None:
    """Five seconds into a 30 s drain, a second request interrupts at once: the run is
    recorded with a reason that says so and the task released, without waiting for the
    deadline; a further request moves on to abandoning."""
    clock = FakeClock(utc("2026-06-01T00:00:30Z"))
    await confirmed(db, clock, every_minute("stuck"), definition_id="stuck")
    stuck = Stuck()
    agents = AgentCatalog()
    agents.add("stuck", stuck)
    supervisor = Supervisor(db, clock, config(tmp_path, workers=1), agents=agents)
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            await tg.start(supervisor.run)
            await supervisor.wait_idle()
            clock.advance(30)
            await stuck.started.wait()
            assert supervisor.drain() is Shutdown.DRAINING
            clock.advance(5)
            assert supervisor.drain() is Shutdown.INTERRUPTING
    assert clock.now() == utc("2026-06-01T00:01:05Z")  # the deadline never came
    reason = ("supervisor shutting down: a second stop request ended the drain after 5 s of "
              "30 s")
    task = await task_of(db, "stuck")
    assert (task["status"], task["lease_expires_at"]) == ("pending", None)
    assert [(a, o, e) for a, o, e, _ in await runs_of(db, task["task_id"])] == [
        (1, "interrupted", reason)]
    report = supervisor.drain_report()
    assert report is not None and report.reason == reason and len(report.released) == 1
    assert supervisor.drain() is Shutdown.ABANDONED


async def test_stop_interrupts_at_once(db: Database, tmp_path: Path) -> None:
    """``stop()`` is a drain with no drain time: the run in flight is interrupted and its
    task released at once."""
    clock = FakeClock(utc("2026-06-01T00:00:30Z"))
    await confirmed(db, clock, every_minute("stuck"), definition_id="stuck")
    stuck = Stuck()
    agents = AgentCatalog()
    agents.add("stuck", stuck)
    supervisor = Supervisor(db, clock, config(tmp_path, workers=1), agents=agents)
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            await tg.start(supervisor.run)
            await supervisor.wait_idle()
            clock.advance(30)
            await stuck.started.wait()
            supervisor.stop()
    task = await task_of(db, "stuck")
    assert (task["status"], task["lease_owner"]) == ("pending", None)
    assert [(o, e) for _, o, e, _ in await runs_of(db, task["task_id"])] == [
        ("interrupted", "supervisor shutting down with no drain time")]


async def test_a_normal_stop_with_nothing_in_flight_logs_info_not_a_warning(
        db: Database, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A supervisor that ran one task to completion and is stopped while idle logs the
    stop at INFO ("nothing was in flight") and no WARNING; ``supervisor.stats`` is its
    public statistics record (1 completed, 1 admitted); a stop with a run in flight
    still warns that it interrupts it (issue 19, item 11)."""
    clock = FakeClock(utc("2026-06-01T00:00:30Z"))
    await confirmed(db, clock, every_minute("quick"), definition_id="quick")
    agents = AgentCatalog()
    agents.add("quick", Quick(clock))
    supervisor = Supervisor(db, clock, config(tmp_path, workers=1), agents=agents)
    caplog.set_level("INFO", logger="watchkeeper")
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            await tg.start(supervisor.run)
            await supervisor.wait_idle()
            clock.advance(30)
            await supervisor.wait_until(lambda stats: stats.completed == 1)
            await supervisor.wait_idle()
            supervisor.stop()
    stats = supervisor.stats
    assert (stats.completed, stats.admitted, stats.task_outcomes) == (1, 1, {"completed": 1})
    stops = [r for r in caplog.records if "shutting down" in r.getMessage()]
    assert [(r.levelname, r.getMessage()) for r in stops] == [
        ("INFO", "supervisor shutting down with no drain time; nothing was in flight")]
    assert not [r for r in caplog.records if r.levelno >= 30 and r.name.startswith("watchkeeper")]


async def test_an_interrupted_last_attempt_is_not_retried(db: Database, tmp_path: Path) -> None:
    """With max_attempts = 1 the interrupted run was the task's last: the task ends
    ``failed`` with the reason, and there is nothing left for another worker."""
    clock = FakeClock(utc("2026-06-01T00:00:30Z"))
    await confirmed(db, clock, every_minute("stuck", limits={"max_attempts": 1}),
                    definition_id="stuck")
    stuck = Stuck()
    agents = AgentCatalog()
    agents.add("stuck", stuck)
    supervisor = Supervisor(db, clock, config(tmp_path, workers=1), agents=agents)
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            await tg.start(supervisor.run)
            await supervisor.wait_idle()
            clock.advance(30)
            await stuck.started.wait()
            supervisor.drain()
            clock.advance(30)
    task = await task_of(db, "stuck")
    assert (task["status"], task["status_reason"], task["lease_owner"]) == (
        "failed", f"{DEADLINE_REASON}; that was attempt 1 of 1, so it is not retried", None)
    assert [(a, o, e) for a, o, e, _ in await runs_of(db, task["task_id"])] == [
        (1, "interrupted", DEADLINE_REASON)]
    report = supervisor.drain_report()
    assert report is not None and report.summary() == (
        f"drained: 0 finished, 0 interrupted and released, 1 interrupted and ended "
        f"(task {task['task_id']} failed)")
    other = AgentCatalog()
    other.add("stuck", Quick(clock))
    assert await Worker(db, clock, other, worker_id="w", artifact_root=tmp_path).run_once() is None


async def test_an_interrupt_past_the_task_deadline_times_it_out(db: Database,
                                                                tmp_path: Path) -> None:
    """A worker interrupted when the task's deadline (10 min) has passed on the wall
    clock (an NTP step: the monotonic watchdog has not fired) ends the task
    ``timed_out`` with the reason instead of releasing it; the run is ``interrupted``."""
    clock = FakeClock(utc("2026-06-01T00:00:30Z"))
    await confirmed(db, clock, every_minute("stuck"), definition_id="stuck")
    stuck = Stuck()
    agents = AgentCatalog()
    agents.add("stuck", stuck)
    clock.advance(30)
    assert (await tick(db, clock)).admitted == 1
    worker = Worker(db, clock, agents, worker_id="w", artifact_root=tmp_path)
    outcomes = []
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: _append(outcomes, worker.run_once()))
            await stuck.started.wait()
            clock.step_wall(timedelta(minutes=11))
            worker.interrupt("supervisor shutting down: test")
    [outcome] = outcomes
    assert (outcome.status, outcome.interrupted) == ("timed_out", True)
    task = await task_of(db, "stuck")
    assert (task["status"], task["status_reason"]) == (
        "timed_out", "supervisor shutting down: test; the task deadline passed, so it is not "
        "retried")
    assert [o for _, o, _, _ in await runs_of(db, task["task_id"])] == ["interrupted"]
    assert await worker.run_once() is None  # an interrupted worker claims nothing more


async def _append(into: list[Any], awaitable: Any) -> None:
    into.append(await awaitable)


async def test_a_run_callable_in_flight_is_cancelled_and_recorded_failed(
        db: Database, tmp_path: Path) -> None:
    """A housekeeping ``run`` callable still going at the drain deadline is cancelled and
    its occurrence recorded ``failed`` with the reason (never retried, as any failed
    run callable), rather than left ``running`` until it goes stale."""
    clock = FakeClock(utc("2026-06-01T00:14:30Z"))
    entered, cancelled = anyio.Event(), []

    async def sweep(ctx: RunContext) -> None:
        entered.set()
        try:
            await anyio.sleep_forever()
        finally:
            cancelled.append(ctx.slot)

    definition = ScheduleDef(id="sweep", every=timedelta(minutes=15), run=sweep)
    await register(db, clock, definition)
    supervisor = Supervisor(db, clock, config(tmp_path), registry=Registry([definition]))
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            await tg.start(supervisor.run)
            await supervisor.wait_idle()
            clock.advance(30)  # 00:15:00
            await entered.wait()
            supervisor.drain()
            clock.advance(30)
    assert cancelled == ["2026-06-01T00:15:00Z"]
    row = await db.pool.fetchrow("SELECT run_status, run_error FROM occurrences")
    assert tuple(row) == ("failed", f"interrupted: {DEADLINE_REASON}")


@pytest.mark.parametrize("value", ["soon", "-1", "nan", "inf", ""])
def test_a_bad_drain_setting_names_the_variable_and_the_fix(
        value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """WATCHKEEPER_DRAIN_SECONDS must be a finite number of seconds >= 0; anything else
    is a configuration error naming the variable, the value and the fix."""
    monkeypatch.setenv("WATCHKEEPER_DRAIN_SECONDS", value)
    with pytest.raises(ConfigError) as raised:
        load_settings()
    message = str(raised.value)
    assert message.startswith(f"setting WATCHKEEPER_DRAIN_SECONDS: {value!r} is not a ")
    assert "Fix: set WATCHKEEPER_DRAIN_SECONDS to the seconds runs in flight may take" in message
    monkeypatch.setenv("WATCHKEEPER_DRAIN_SECONDS", "0")
    assert load_settings().drain_seconds == 0.0
    monkeypatch.delenv("WATCHKEEPER_DRAIN_SECONDS")
    assert load_settings().drain_seconds == 30.0


async def test_a_notice_being_sent_is_released_when_the_drain_ends(db: Database,
                                                                   tmp_path: Path) -> None:
    """A notice whose send is still going at the drain deadline is recorded ``retrying``
    with the reason and its lease cleared, due at once: another dispatcher sends it
    without waiting for the lease to expire."""
    clock = FakeClock(utc("2026-06-01T00:00:30Z"))
    await confirmed(db, clock, every_minute("digest", delivery=[{"channel": "log"}]),
                    definition_id="d1")
    channel = Blocking()
    supervisor = Supervisor(db, clock, config(tmp_path), channels={"log": channel})
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            await tg.start(supervisor.run)
            await supervisor.wait_idle()
            clock.advance(30)
            await channel.entered.wait()
            supervisor.drain()
            clock.advance(30)
    row = await db.pool.fetchrow("SELECT * FROM deliveries")
    assert (row["status"], row["attempts"], row["lease_owner"], row["lease_expires_at"],
            row["next_attempt_at"]) == ("retrying", 1, None, None, clock.now())
    assert DEADLINE_REASON in row["last_error"]
    report = supervisor.drain_report()
    assert report is not None and report.deliveries_released == 1
    assert report.summary() == "drained: 0 finished, 0 interrupted and released, 1 notice released"
    again = Dispatcher(PgDeliveryStore(db, clock), {"log": LogChannel()}, now=clock.now,
                       owner="sup-b/outbox")
    stats = await again.dispatch_once()
    assert (stats.claimed, stats.delivered) == (1, 1)
    row = await db.pool.fetchrow("SELECT status, attempts FROM deliveries")
    assert (row["status"], row["attempts"]) == ("delivered", 2)


async def test_an_interrupted_pass_counts_a_started_send_and_not_a_waiting_one(
        db: Database, clock: FakeClock, tmp_path: Path) -> None:
    """With one send at a time, an interrupted pass of two notices records the one being
    sent as an attempt (``retrying``) and releases the waiting one unsent (``pending``,
    no attempt), both due now."""
    await confirmed(db, clock, {"trigger": {"type": "interval", "every": 60},
                                "delivery": [{"channel": "log", "destination": "a"},
                                             {"channel": "log", "destination": "b"}]})
    clock.advance(60)
    assert (await tick(db, clock)).admitted == 1
    done = await Worker(db, clock, AgentCatalog(), worker_id="w", artifact_root=tmp_path).run_once()
    assert done is not None and done.status == "completed"
    channel = Blocking()
    dispatcher = Dispatcher(PgDeliveryStore(db, clock), {"log": channel}, now=clock.now,
                            owner="o", concurrency=1)
    result = []
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: _append(result, dispatcher.dispatch_once()))
            await channel.entered.wait()
            dispatcher.interrupt("supervisor shutting down: test")
    [stats] = result
    assert (stats.claimed, stats.retrying, stats.deferred, stats.released) == (2, 1, 1, 2)
    rows = await db.pool.fetch("SELECT status, attempts, lease_token, next_attempt_at, "
                               "coalesce(last_error, status_reason) AS why FROM deliveries "
                               "ORDER BY status")
    assert [(r["status"], r["attempts"], r["lease_token"], r["next_attempt_at"]) for r in rows] == [
        ("pending", 0, None, clock.now()), ("retrying", 1, None, clock.now())]
    assert rows[0]["why"] == "released unsent: supervisor shutting down: test"
    assert "the send was interrupted (supervisor shutting down: test)" in rows[1]["why"]
    assert (await dispatcher.dispatch_once()).claimed == 0  # it claims nothing more


@pytest.mark.parametrize("command", [["run"], ["serve", "--port", "0"]], ids=["run", "serve"])
async def test_run_and_serve_drain_on_sigterm(db: Database, db_dsn: str, tmp_path: Path,
                                              command: list[str]) -> None:
    """``watchkeeper run`` (and ``serve``, which runs a supervisor too) with a command
    agent that sleeps, SIGTERM with WATCHKEEPER_DRAIN_SECONDS=1: exit 0, the drain line
    on stderr, the command killed, the run ``interrupted`` and the task pending with its
    lease cleared."""
    clock = SystemClock()
    me = await confirmed(db, clock, {"trigger": {"type": "interval", "every": 86400},
                                     "agent": {"name": "slow"}})
    await trigger_now(db, clock, me, "acme", "d1")
    fifo = tmp_path / "started"
    os.mkfifo(fifo)
    # The command agent stands for a run that outlasts the 1 s drain: it announces itself
    # through the fifo and then blocks (sleep 60 inside the agent process, never in the
    # test, which waits on the fifo and the process). The test asserts it was killed.
    code = (f"import os, sys, time; sys.stdin.read(); f = open({str(fifo)!r}, 'w'); "
            "f.write(str(os.getpid())); f.close(); time.sleep(60)")
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env.update(DATABASE_URL=db_dsn, WATCHKEEPER_HOME=str(tmp_path), WATCHKEEPER_DRAIN_SECONDS="1",
               WATCHKEEPER_WORKERS="1")
    agent = f"slow={sys.executable} -c {json.dumps(code)}"
    with anyio.fail_after(30):
        async with await anyio.open_process([sys.executable, "-m", "watchkeeper", *command,
                                             "--agent", agent], env=env) as process:
            assert process.stderr is not None
            pid = int(await anyio.to_thread.run_sync(fifo.read_text))  # the command runs
            process.send_signal(signal.SIGTERM)
            err = b"".join([chunk async for chunk in process.stderr]).decode()
            returncode = await process.wait()
    assert returncode == 0, err
    task = await task_of(db, "d1")
    assert f"drained: 0 finished, 1 interrupted and released (task {task['task_id']})" in err
    assert "draining: claiming nothing new; runs in flight have 1 s to finish" in err
    assert "Traceback" not in err
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert (task["status"], task["attempts"], task["lease_owner"], task["lease_expires_at"]) == (
        "pending", 1, None, None)
    assert [(a, o, e) for a, o, e, _ in await runs_of(db, task["task_id"])] == [
        (1, "interrupted", "supervisor shutting down: drain deadline of 1 s passed")]
