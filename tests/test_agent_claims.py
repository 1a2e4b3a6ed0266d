"""Workers claim only tasks whose agent they have, against real PostgreSQL with a fake
clock: a task goes to the worker (or supervisor) that has its agent, one that nobody
offers waits pending and is listed by ``unclaimable_tasks``, and past its expires_at it
follows the lateness policy with a reason naming the agent."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
from _helpers import confirmed, tasks, utc

from watchkeeper.runtime.engine._agents import AgentCatalog, AgentContext, AgentResult
from watchkeeper.runtime.engine._clock import FakeClock
from watchkeeper.runtime.engine._fleet import heartbeat_detail
from watchkeeper.runtime.engine._scheduler import tick
from watchkeeper.runtime.engine._supervisor import Supervisor, SupervisorConfig
from watchkeeper.runtime.engine._worker import Worker
from watchkeeper.runtime.store._db import Database
from watchkeeper.runtime.usecases import OPERATOR, UnclaimableTask, review, supervisors, unclaimable_tasks
from watchkeeper.sources import SeriesSource, SourceRegistry

pytestmark = pytest.mark.anyio

START = "2026-06-01T00:00:00Z"
SLOT = utc(START)  # the first slot; no jitter, so not_before = SLOT
GRACE = timedelta(minutes=10)  # the default late_grace: expires_at = SLOT + 10 min


class Reporter:
    """An agent that reports which occurrence it ran and whether it was late."""

    async def run(self, ctx: AgentContext) -> AgentResult:
        return AgentResult(f"# {ctx.occurrence.slot} late={ctx.occurrence.late}\n")


def catalog(*extra: str) -> AgentCatalog:
    """The built-in digest plus a Reporter under each name in ``extra``."""
    result = AgentCatalog()
    for name in extra:
        result.add(name, Reporter())
    return result


def worker(db: Database, clock: FakeClock, agents: AgentCatalog, tmp_path: Path,
           name: str, **options: Any) -> Worker:
    return Worker(db, clock, agents, worker_id=name, artifact_root=tmp_path, **options)


async def admitted(db: Database, clock: FakeClock, **spec: Any) -> dict[str, Any]:
    """One hourly definition whose agent is 'myagent', its first slot admitted at SLOT+1s."""
    body = {"trigger": {"type": "interval", "every": 3600, "anchor": START},
            "agent": {"name": "myagent"}, **spec}
    await confirmed(db, clock, body)
    clock.advance(1)
    assert (await tick(db, clock)).admitted == 1
    return (await tasks(db))[0]


async def heartbeat(db: Database, supervisor_id: str, at: datetime, agents: list[str], *,
                    status: str = "running") -> None:
    """A supervisor's heartbeat row as the supervisor writes it (every 5 s)."""
    detail = heartbeat_detail(loops=["worker-0"], restarts={}, heartbeat_seconds=5.0,
                              agents=agents, sources=[])
    await db.execute("supervisor_upsert", supervisor_id, "host", 1, at, status, None, detail)


async def runs(db: Database) -> list[tuple[int, str, str]]:
    rows = await db.pool.fetch("SELECT attempt, outcome, worker FROM runs ORDER BY run_id")
    return [tuple(r) for r in rows]


async def test_a_worker_leaves_a_task_whose_agent_it_lacks_to_one_that_has_it(
        db: Database, tmp_path: Path) -> None:
    """The worker without 'myagent' claims nothing and the task stays pending; the worker
    with it runs it."""
    clock = FakeClock(utc(START))
    await admitted(db, clock)
    lacking = worker(db, clock, catalog(), tmp_path, "A")
    having = worker(db, clock, catalog("myagent"), tmp_path, "B")
    assert await lacking.run_once() is None
    [task] = await tasks(db)
    assert (task["status"], task["attempts"], task["lease_owner"]) == ("pending", 0, None)
    done = await having.run_once()
    assert done is not None and (done.status, done.attempt) == ("completed", 1)
    assert await runs(db) == [(1, "succeeded", "B")]
    assert await db.pool.fetchval("SELECT content_md FROM reports") == f"# {START} late=False\n"


async def test_two_supervisors_the_task_runs_on_the_one_with_its_agent(
        db: Database, tmp_path: Path) -> None:
    """Supervisor A (digest only) runs first and leaves the task; B (with 'myagent') runs
    it. Each heartbeat names the agents its workers have and the sources it polls."""
    clock = FakeClock(utc(START))
    await admitted(db, clock)
    common = {"home": tmp_path, "skew_budget": None, "workers": 1}
    first = Supervisor(db, clock, SupervisorConfig(supervisor_id="sup-a", **common),
                       agents=catalog())
    second = Supervisor(db, clock, SupervisorConfig(supervisor_id="sup-b", **common),
                        agents=catalog("myagent"),
                        sources=SourceRegistry([SeriesSource([], name="prices", version="1")]))
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            await tg.start(first.run)
            await first.wait_idle()
            assert (await tasks(db))[0]["status"] == "pending"
            await tg.start(second.run)
            await second.wait_until(lambda s: s.completed == 1)
            offers = {r["supervisor_id"]: (r["detail"]["agents"], r["detail"]["sources"])
                      for r in await db.pool.fetch("SELECT supervisor_id, detail FROM supervisors")}
            first.stop()
            second.stop()
    assert offers == {"sup-a": (["digest"], []), "sup-b": (["digest", "myagent"], ["prices"])}
    assert first.statistics().task_outcomes == {}
    assert await runs(db) == [(1, "succeeded", "sup-b/w0")]


async def test_a_task_nobody_offers_stays_pending_and_is_listed(db: Database,
                                                                tmp_path: Path) -> None:
    """Two workers without 'myagent' leave the task; it is listed while no live supervisor
    offers the agent: none at all, one without it, one whose heartbeat is older than 3
    intervals (15 s), or one that stopped; a live one with it hides it."""
    clock = FakeClock(utc(START))
    task = await admitted(db, clock)
    for name in ("A", "B"):
        assert await worker(db, clock, catalog(), tmp_path, name).run_once() is None
    now = SLOT + timedelta(seconds=300)
    listed = [UnclaimableTask("acme", task["task_id"], "d1", "owner", START, "scheduled",
                              "myagent", "pending", "skip_expired", 0, SLOT, 300.0, SLOT + GRACE)]
    assert await unclaimable_tasks(db, now) == listed
    await heartbeat(db, "sup-a", now, ["digest"])
    assert await unclaimable_tasks(db, now) == listed
    beat = now - timedelta(seconds=15)
    await heartbeat(db, "sup-b", beat, ["digest", "myagent"])
    assert await unclaimable_tasks(db, now) == []
    later = now + timedelta(milliseconds=1)
    assert await unclaimable_tasks(db, later) == [
        UnclaimableTask(**{**_fields(listed[0]), "waited_seconds": 300.001})]
    assert {s.supervisor_id: (s.live, s.agents, s.silent_seconds)
            for s in await supervisors(db, later)} == {
        "sup-a": (True, ("digest",), 0.001), "sup-b": (False, ("digest", "myagent"), 15.001)}
    await heartbeat(db, "sup-b", now, ["digest", "myagent"], status="stopped")
    assert await unclaimable_tasks(db, now) == listed
    assert (await tasks(db))[0]["status"] == "pending"


def _fields(item: UnclaimableTask) -> dict[str, Any]:
    return {name: getattr(item, name) for name in item.__slots__}


async def test_a_running_task_whose_lease_expired_waits_for_a_worker_with_its_agent(
        db: Database, tmp_path: Path) -> None:
    """A lease held by a worker with 'myagent' expires; a worker without it does not take
    it over (it is listed, waiting since the lease's expiry); one with it does."""
    clock = FakeClock(utc(START))
    task = await admitted(db, clock)
    claimed = await worker(db, clock, catalog("myagent"), tmp_path, "B", lease_seconds=60).claim()
    assert claimed is not None
    clock.advance(61)
    assert await worker(db, clock, catalog(), tmp_path, "A").run_once() is None
    expired = SLOT + timedelta(seconds=1 + 60)
    assert await unclaimable_tasks(db, clock.now()) == [
        UnclaimableTask("acme", task["task_id"], "d1", "owner", START, "scheduled", "myagent",
                        "running", "skip_expired", 1, expired, 1.0, SLOT + GRACE)]
    done = await worker(db, clock, catalog("myagent"), tmp_path, "C").run_once()
    assert done is not None and (done.status, done.attempt) == ("completed", 2)


@pytest.mark.parametrize(("policy", "status"), [("skip_expired", "expired"),
                                                ("review_late", "review_required")])
async def test_a_task_that_expires_waiting_for_its_agent_says_why(
        db: Database, tmp_path: Path, policy: str, status: str) -> None:
    """20 min after its slot (grace 10 min) the worker without 'myagent' applies the
    policy, as dispatch would, with a reason naming the agent; no run is made."""
    clock = FakeClock(utc(START))
    task = await admitted(db, clock, lateness={"policy": policy})
    clock.set_wall(SLOT + timedelta(minutes=20))
    lacking = worker(db, clock, catalog(), tmp_path, "A")
    outcome = await lacking.run_once()
    reason = (f"no running supervisor offers agent 'myagent': waited 1200 s and expired at "
              f"2026-06-01T00:10:00Z ({policy}); start a supervisor with that agent "
              "(--agent myagent=COMMAND)")
    assert outcome is not None
    assert (outcome.task_id, outcome.status, outcome.reason) == (task["task_id"], status, reason)
    [row] = await tasks(db)
    assert (row["status"], row["status_reason"], row["attempts"]) == (status, reason, 0)
    assert row["finished_at"] == SLOT + timedelta(minutes=20)
    assert await runs(db) == []
    assert await lacking.run_once() is None
    assert await unclaimable_tasks(db, clock.now()) == []


async def test_a_task_approved_after_waiting_for_its_agent_runs_late(db: Database,
                                                                     tmp_path: Path) -> None:
    """review_late: expired waiting, approved, it waits again (listed) until a worker with
    the agent runs it, marked late."""
    clock = FakeClock(utc(START))
    await admitted(db, clock, lateness={"policy": "review_late"})
    clock.set_wall(SLOT + timedelta(minutes=20))
    lacking = worker(db, clock, catalog(), tmp_path, "A")
    assert (await lacking.run_once()).status == "review_required"  # type: ignore[union-attr]
    assert await review(db, clock, OPERATOR, "acme", "d1", START, approve=True) == "admitted"
    assert await lacking.run_once() is None
    assert [t.status for t in await unclaimable_tasks(db, clock.now())] == ["pending"]
    done = await worker(db, clock, catalog("myagent"), tmp_path, "B").run_once()
    assert done is not None and done.status == "completed"
    assert await db.pool.fetchval("SELECT content_md FROM reports") == f"# {START} late=True\n"


async def test_catch_up_once_keeps_waiting_for_its_agent_and_runs_late(db: Database,
                                                                        tmp_path: Path) -> None:
    """catch_up_once past grace is not expired while waiting; a worker with the agent runs
    it once, as a late dispatch would."""
    clock = FakeClock(utc(START))
    task = await admitted(db, clock, lateness={"policy": "catch_up_once"})
    clock.set_wall(SLOT + timedelta(minutes=20))
    assert await worker(db, clock, catalog(), tmp_path, "A").run_once() is None
    [waiting] = await unclaimable_tasks(db, clock.now())
    assert (waiting.task_id, waiting.waited_seconds) == (task["task_id"], 1200.0)
    done = await worker(db, clock, catalog("myagent"), tmp_path, "B").run_once()
    assert done is not None and done.status == "completed"


async def test_a_live_supervisor_with_the_agent_keeps_the_task_from_expiring_early(
        db: Database, tmp_path: Path) -> None:
    """While a live supervisor offers 'myagent', a worker without it does not decide the
    task's lateness: the capable one dispatches it and applies the rule itself."""
    clock = FakeClock(utc(START))
    await admitted(db, clock)
    clock.set_wall(SLOT + timedelta(minutes=20))
    await heartbeat(db, "sup-b", clock.now(), ["digest", "myagent"])
    assert await worker(db, clock, catalog(), tmp_path, "A").run_once() is None
    late = await worker(db, clock, catalog("myagent"), tmp_path, "B").run_once()
    assert late is not None
    assert (late.status, late.reason) == ("expired",
                                          "dispatched 600 s after expires_at (skip_expired)")


async def test_a_heartbeat_that_names_no_agents_may_take_any_task(db: Database,
                                                                 tmp_path: Path) -> None:
    """A live supervisor of an earlier version (no 'agents' in its heartbeat) claims tasks
    of any agent: nothing is listed, and past grace nothing is expired for want of one."""
    clock = FakeClock(utc(START))
    await admitted(db, clock)
    clock.set_wall(SLOT + timedelta(minutes=20))
    await db.execute("supervisor_upsert", "old", "host", 1, clock.now(), "running", None,
                     {"loops": ["worker-0"], "heartbeat_seconds": 5.0})
    assert await unclaimable_tasks(db, clock.now()) == []
    assert await worker(db, clock, catalog(), tmp_path, "A").run_once() is None
    assert (await tasks(db))[0]["status"] == "pending"
