"""The supervisor's loops with a fake clock against real PostgreSQL: end to end, no
drift under long runs, restart of a loop after a database outage, and the
clock-skew budget."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
from _helpers import confirmed, occurrences, tasks, utc
from _pgproxy import PgProxy

from watchkeeper.runtime.engine._agents import AgentCatalog, AgentContext, AgentResult
from watchkeeper.runtime.engine._clock import FakeAuthority, FakeClock, SkewedClock
from watchkeeper.runtime.engine._scheduler import tick
from watchkeeper.runtime.engine._supervisor import LoopDied, Supervisor, SupervisorConfig
from watchkeeper.runtime.engine._worker import Worker
from watchkeeper.runtime.store._db import Database

pytestmark = pytest.mark.anyio


def config(tmp_path: Path, **changes: Any) -> SupervisorConfig:
    return SupervisorConfig(home=tmp_path, skew_budget=None, supervisor_id="sup-1", **changes)


async def test_end_to_end_three_slots_three_reports_three_notices(db: Database,
                                                                  tmp_path: Path) -> None:
    """Each minute the supervisor admits, runs, commits and delivers one report."""
    clock = FakeClock(utc("2026-06-01T00:00:30Z"))
    await confirmed(db, clock, {"trigger": {"type": "interval", "every": 60},
                                "delivery": [{"channel": "file", "destination": "notices.jsonl"}]})
    supervisor = Supervisor(db, clock, config(tmp_path))
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            await tg.start(supervisor.run)
            await supervisor.wait_idle()
            for _ in range(3):
                clock.advance(30)
                await supervisor.wait_idle()
                clock.advance(30)
                await supervisor.wait_idle()
            supervisor.stop()
    stats = supervisor.statistics()
    assert (stats.admitted, stats.completed, stats.deliveries) == (3, 3, 3)
    lines = [json.loads(x) for x in
             (tmp_path / "notices" / "acme" / "notices.jsonl").read_text().splitlines()]
    assert [n["slot"] for n in lines] == ["2026-06-01T00:01:00Z", "2026-06-01T00:02:00Z",
                                          "2026-06-01T00:03:00Z"]
    assert len({n["content_sha256"] for n in lines}) == 3
    heartbeat = await db.pool.fetchrow("SELECT status, heartbeat_at FROM supervisors")
    assert heartbeat["status"] == "stopped"


async def test_a_fifteen_minute_interval_with_92_second_runs_never_drifts(db: Database,
                                                                          tmp_path: Path) -> None:
    """Runs taking 92 s do not move the boundaries: :00, :15, :30, next :45."""
    clock = FakeClock(utc("2026-06-01T08:59:00Z"))

    class Slow:
        async def run(self, ctx: AgentContext) -> AgentResult:
            await clock.sleep(92)
            return AgentResult(f"# {ctx.occurrence.slot}\n")

    catalog = AgentCatalog()
    catalog.add("slow", Slow())
    await confirmed(db, clock, {"trigger": {"type": "interval", "every": 900},
                                "agent": {"name": "slow"}})
    worker = Worker(db, clock, catalog, worker_id="w", artifact_root=tmp_path)
    for quarter in ("09:00", "09:15", "09:30"):
        clock.set_wall(utc(f"2026-06-01T{quarter}:00Z"))
        assert (await tick(db, clock)).admitted == 1
        async with anyio.create_task_group() as tg:
            tg.start_soon(worker.run_once)
            await clock.wait_for_sleepers(3)
            clock.advance(92)
    assert [(o["scheduled_for"], o["task_status"]) for o in await occurrences(db)] == [
        (utc("2026-06-01T09:00Z"), "completed"), (utc("2026-06-01T09:15Z"), "completed"),
        (utc("2026-06-01T09:30Z"), "completed")]
    finished = [t["finished_at"] for t in await tasks(db)]
    assert finished == [utc("2026-06-01T09:01:32Z"), utc("2026-06-01T09:16:32Z"),
                        utc("2026-06-01T09:31:32Z")]
    assert await db.pool.fetchval("SELECT next_due_at FROM definitions") == utc("2026-06-01T09:45Z")


async def test_loops_restart_after_an_outage_and_the_heartbeat_stops_meanwhile(
        db: Database, db_dsn: str, tmp_path: Path) -> None:
    """While PostgreSQL is unreachable every loop is down, restarts with backoff, and no
    heartbeat is written; once it is back the loops recover and the heartbeat resumes."""
    clock = FakeClock(utc("2026-06-01T00:00:00Z"))
    async with PgProxy(db_dsn) as proxy, Database.open(proxy.dsn, migrate=False) as through:
        supervisor = Supervisor(through, clock, config(tmp_path, restart_limit=50))
        async with anyio.create_task_group() as tg:
            await tg.start(supervisor.run)
            await supervisor.wait_idle()
            before = await db.pool.fetchval("SELECT heartbeat_at FROM supervisors")
            await proxy.go_down()
            clock.advance(5)
            stats = await supervisor.wait_until(lambda s: len(s.dead_loops) >= 6)
            assert stats.dead_loops == {"tick", "poll", "worker-0", "worker-1", "dispatch",
                                        "heartbeat"}
            for _ in range(3):
                clock.advance(10)
                await supervisor.wait_idle()
            assert await db.pool.fetchval("SELECT heartbeat_at FROM supervisors") == before
            proxy.go_up()
            clock.advance(30)
            stats = await supervisor.wait_until(lambda s: not s.dead_loops)
            assert all(stats.restarts[name] >= 1 for name in stats.dead_loops | {"tick"})
            clock.advance(5)
            await supervisor.wait_idle()
            after = await db.pool.fetchval("SELECT heartbeat_at FROM supervisors")
            assert after > before
            supervisor.stop()


async def test_a_loop_that_keeps_failing_takes_the_supervisor_down(db_dsn: str,
                                                                   tmp_path: Path) -> None:
    """After restart_limit consecutive failures, run() raises LoopDied."""
    clock = FakeClock(utc("2026-06-01T00:00:00Z"))
    async with PgProxy(db_dsn) as proxy, Database.open(proxy.dsn, migrate=False) as through:
        supervisor = Supervisor(through, clock, config(tmp_path, restart_limit=2))
        with pytest.raises(ExceptionGroup) as info:
            async with anyio.create_task_group() as tg:
                await tg.start(supervisor.run)
                await supervisor.wait_idle()
                await proxy.go_down()
                for _ in range(10):
                    clock.advance(40)
                    await supervisor.wait_idle()
        assert info.group_contains(LoopDied)


async def test_heartbeat_is_not_written_while_any_loop_is_dead(db: Database,
                                                               tmp_path: Path) -> None:
    """The heartbeat step writes nothing while a loop is marked dead."""
    clock = FakeClock(utc("2026-06-01T00:00:00Z"))
    supervisor = Supervisor(db, clock, config(tmp_path))
    supervisor._dead.add("tick")
    await supervisor._heartbeat_step()
    assert await db.pool.fetchval("SELECT count(*) FROM supervisors") == 0
    supervisor._dead.clear()
    await supervisor._heartbeat_step()
    assert await db.pool.fetchval("SELECT count(*) FROM supervisors") == 1


async def test_beyond_the_clock_skew_budget_nothing_new_is_dispatched(db: Database,
                                                                      tmp_path: Path) -> None:
    """A host wall clock 5 s ahead of the authority's: clock_uncertain is recorded and
    nothing is admitted though a slot is due; once the host is back within 2 s, the due
    slot is admitted (decided at the authority's time, not the host's)."""
    truth = FakeClock(utc("2026-06-01T00:00:00Z"))
    await confirmed(db, truth, {"trigger": {"type": "interval", "every": 60,
                                            "anchor": "2026-06-01T00:00:02Z"}})
    host = SkewedClock(truth, timedelta(seconds=5))
    supervisor = Supervisor(db, host, SupervisorConfig(home=tmp_path, skew_budget=2.0,
                                                       supervisor_id="sup-1"),
                            authority=FakeAuthority(truth))
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            await tg.start(supervisor.run)
            stats = await supervisor.wait_idle()
            assert stats.clock_uncertain and stats.clock_offset == 5.0
            truth.advance(3)  # the slot is due at 00:00:02
            stats = await supervisor.wait_idle()
            assert stats.ticks == 0
            assert await db.pool.fetchval("SELECT count(*) FROM occurrences") == 0
            kinds = await db.pool.fetch("SELECT kind, reason FROM schedule_events")
            assert [r["kind"] for r in kinds] == ["clock_uncertain"]
            assert "offset +5.000 s" in kinds[0]["reason"]
            host.step(timedelta(seconds=-4.5))
            truth.advance(1)
            stats = await supervisor.wait_until(lambda s: s.admitted == 1)
            assert not stats.clock_uncertain
            supervisor.stop()
    assert await db.pool.fetchval("SELECT decided_at FROM occurrences") == utc(
        "2026-06-01T00:00:04Z")


async def test_a_killed_supervisor_is_marked_lost_once_its_heartbeat_expires(
        db: Database, tmp_path: Path) -> None:
    """A supervisor that left a 'running' heartbeat and no stop (SIGKILL) is marked lost
    by a live supervisor's heartbeat once more than 3 of its 5 s intervals have passed
    (not at exactly 15 s), and shown lost by `status`, the CLI and the
    watchkeeper_supervisors_lost gauge; a supervisor that stopped is never lost
    (issue 18, item 10)."""
    import os
    import sys
    from datetime import UTC, datetime

    from _api import serving

    from watchkeeper.runtime import usecases as uc

    # an hour before the real time, so that the CLI's real-time read sees the same past
    start = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)
    clock = FakeClock(start)
    await db.execute("supervisor_upsert", "killed-1", "box", 4242, start, "running", None,
                     {"heartbeat_seconds": 5.0, "agents": ["digest"], "sources": []})
    supervisor = Supervisor(db, clock, config(tmp_path, heartbeat_seconds=5.0))
    seen: dict[int, tuple[str, bool]] = {}
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            await tg.start(supervisor.run)
            for second in (5, 10, 15, 20):
                clock.advance(5)
                await supervisor.wait_idle()
                row = await db.pool.fetchrow(
                    "SELECT status, detail FROM supervisors WHERE supervisor_id = 'killed-1'")
                state = {s.supervisor_id: s for s in await uc.supervisors(db, clock.now())}
                seen[second] = (row["status"], state["killed-1"].lost)
                assert not state["sup-1"].lost and state["sup-1"].live
            assert row["detail"]["was"] == "running"
            async with serving(db, clock, tmp_path) as api:
                metrics = (await api.call("GET", "/metrics")).text
            supervisor.stop()
    assert seen == {5: ("running", False), 10: ("running", False), 15: ("running", False),
                    20: ("lost", True)}
    assert "watchkeeper_supervisors_lost 1.0" in metrics
    assert "watchkeeper_supervisors_alive 1.0" in metrics
    clock.advance(3600)  # the stopped one stays stopped, never lost
    state = {s.supervisor_id: s for s in await uc.supervisors(db, clock.now())}
    assert (state["sup-1"].status, state["sup-1"].lost) == ("stopped", False)
    assert (state["killed-1"].status, state["killed-1"].lost, state["killed-1"].live) == (
        "lost", True, False)
    env = {**os.environ, "DATABASE_URL": db.dsn or "", "WATCHKEEPER_HOME": str(tmp_path),
           "COLUMNS": "200"}
    done = await anyio.run_process([sys.executable, "-m", "watchkeeper", "status"], env=env)
    lines = {line.split(":")[0]: line for line in done.stdout.decode().splitlines()}
    assert "lost (no heartbeat for" in lines["killed-1"] and "no stop recorded" in lines["killed-1"]
    assert lines["sup-1"].startswith("sup-1: stopped")


async def test_a_lock_held_past_the_lease_stalls_loudly_and_loses_nothing(
        db: Database, db_dsn: str, tmp_path: Path) -> None:
    """Another session holds an exclusive lock on `tasks` from before a slot falls due
    until 65 s after it (past the 60 s lease). The tick's statements give up after the
    pool's lock_timeout (0.3 s here) instead of waiting silently: each stall is counted
    (watchkeeper_lock_stalls_total), one lock_stall event per stalled loop is recorded,
    /readyz answers 503 naming the stalled loop, and the loops retry with backoff. Once
    the lock is released the slot is admitted once and run once, and /readyz no longer
    names a stall (issue 18, item 9)."""
    import asyncpg
    from _api import serving

    from watchkeeper.runtime.store._db import Timeouts, server_settings

    clock = FakeClock(utc("2026-06-01T00:59:30Z"))
    await confirmed(db, clock, {"trigger": {"type": "interval", "every": 3600},
                                "lateness": {"policy": "skip_expired", "late_grace": 600}})
    holder = await asyncpg.connect(db_dsn, server_settings=server_settings(db.schema))
    async with Database.open(db_dsn, migrate=False, max_size=8,
                             timeouts=Timeouts(0.3, 30)) as timed:
        supervisor = Supervisor(timed, clock, config(tmp_path, workers=1, lease_seconds=60))
        with anyio.fail_after(90):
            async with anyio.create_task_group() as tg:
                await tg.start(supervisor.run)
                await supervisor.wait_idle()
                lock = holder.transaction()
                await lock.start()
                await holder.execute("LOCK TABLE tasks IN ACCESS EXCLUSIVE MODE")
                clock.set_wall(utc("2026-06-01T01:00:00Z"))
                await supervisor.wait_until(lambda s: "tick" in s.stalled)
                for _ in range(13):  # 65 s: past the lease
                    clock.advance(5)
                    await supervisor.wait_idle()
                held = supervisor.statistics()
                async with serving(timed, clock, tmp_path, supervisor=supervisor) as api:
                    stalled = await api.call("GET", "/readyz")
                    metrics = (await api.call("GET", "/metrics")).text
                await lock.rollback()
                for _ in range(40):  # the backoff is capped at 30 s
                    if supervisor.statistics().completed:
                        break
                    clock.advance(1)
                    await supervisor.wait_idle()
                after = supervisor.statistics()
                async with serving(timed, clock, tmp_path, supervisor=supervisor) as api:
                    recovered = await api.call("GET", "/readyz")
                supervisor.stop()
    await holder.close()
    assert held.admitted == 0 and held.lock_stalls["tick"] >= 3, held
    assert stalled.status_code == 503
    assert "tick" in stalled.json()["checks"]["locks"] and "lock timeout" in \
        stalled.json()["checks"]["locks"]
    lines = [x for x in metrics.splitlines()
             if x.startswith('watchkeeper_lock_stalls_total{loop="tick"}')]
    assert len(lines) == 1, metrics
    assert float(lines[0].split()[-1]) == held.lock_stalls["tick"]
    rows = await db.pool.fetch("SELECT binding_id, reason FROM schedule_events "
                               "WHERE kind = 'lock_stall' ORDER BY event_id")
    loops = [r["reason"].split(":")[0] for r in rows]
    assert "loop tick" in loops and len(loops) == len(set(loops)), loops  # once per loop
    assert {r["binding_id"] for r in rows} == {"sup-1"}
    assert (after.admitted, after.completed, after.stalled) == (1, 1, {})
    assert "locks" not in recovered.json()["checks"]
    assert [(o["slot"], o["decision"]) for o in await occurrences(db)] == [
        ("2026-06-01T01:00:00Z", "admitted")]
    assert [t["status"] for t in await tasks(db)] == ["completed"]
