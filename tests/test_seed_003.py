"""Seed 003's fault table, one named test per row, each asserting the seed's "safer
result" on real PostgreSQL with injected time.

- clock jumps backward -> monotonic lease timers, hold new dispatch:
  ``test_clock_authority.py::test_seed_003_clock_jumps_backward_*``
- clock jumps forward -> reject dispatch outside the freshness window:
  ``test_clock_authority.py::test_seed_003_clock_jumps_forward_*``
- NTP becomes unavailable -> CLOCK_UNCERTAIN with an alert:
  ``test_clock_authority.py::test_seed_003_ntp_unavailable_*``
- worker pauses during a lease -> the fencing token rejects the stale worker: below
- scheduler restarts at a boundary -> reload durable state, reconcile by run id: below
- DST or timezone conversion -> store UTC plus the original schedule zone: below
"""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
from _helpers import confirmed, occurrences, tasks, utc

from watchkeeper.runtime.engine._agents import AgentCatalog, AgentContext, AgentResult
from watchkeeper.runtime.engine._clock import FakeClock
from watchkeeper.runtime.engine._scheduler import tick
from watchkeeper.runtime.engine._supervisor import Supervisor, SupervisorConfig
from watchkeeper.runtime.engine._worker import Worker
from watchkeeper.runtime.store._db import Database

pytestmark = pytest.mark.anyio

START = utc("2026-06-01T00:00:00Z")


async def test_seed_003_worker_paused_during_a_lease_is_fenced_out(db: Database,
                                                                  tmp_path: Path) -> None:
    """The seed's own experiment: pause a worker after it claims a lease, advance the
    authority clock past the lease, start a replacement worker, then let the old worker
    attempt the effect. The result is a rejected stale token, not a second provider
    call: the provider is called once (by the replacement, under the task's idempotency
    key), the old run ends ``lease_lost`` (outcome stale) and the report is the
    replacement's."""
    clock = FakeClock(START)
    provider: list[tuple[str, int]] = []
    paused = anyio.Event()
    resume = anyio.Event()

    async def send(key: str) -> dict[str, str]:
        provider.append((key, len(provider) + 1))
        return {"message_id": f"m-{len(provider)}"}

    class Notifier:
        async def run(self, ctx: AgentContext) -> AgentResult:
            if ctx.attempt == 1:  # the worker that will be paused
                paused.set()
                await resume.wait()
            receipt = await ctx.effects.perform("notify", send)
            return AgentResult(f"# sent {receipt['message_id']} on attempt {ctx.attempt}\n")

    catalog = AgentCatalog()
    catalog.add("notifier", Notifier())
    await confirmed(db, clock, {"trigger": {"type": "interval", "every": 3600,
                                            "anchor": START.isoformat()},
                                "agent": {"name": "notifier"}})
    clock.advance(1)
    assert (await tick(db, clock)).admitted == 1
    old = Worker(db, clock, catalog, worker_id="old", artifact_root=tmp_path, lease_seconds=30,
                 renew_every=10_000)  # paused: it renews nothing
    replacement = Worker(db, clock, catalog, worker_id="new", artifact_root=tmp_path,
                         lease_seconds=30)
    stale: list[Any] = []
    async with anyio.create_task_group() as tg:
        claimed = await old.claim()
        assert claimed is not None

        async def keep() -> None:
            stale.append(await old.execute(claimed))

        tg.start_soon(keep)
        await paused.wait()
        clock.advance(31)  # the authority clock passes the old lease
        fresh = await replacement.run_once()
        assert fresh is not None and (fresh.attempt, fresh.status) == (2, "completed")
        resume.set()  # the old worker wakes and attempts the effect
    (task,) = await tasks(db)
    assert len(provider) == 1 and provider[0][0] == f"{task['idempotency_key']}#notify"
    assert stale[0].status == "stale"
    runs = await db.pool.fetch("SELECT attempt, outcome, worker FROM runs ORDER BY run_id")
    assert [(r["attempt"], r["outcome"], r["worker"]) for r in runs] == [
        (1, "lease_lost", "old"), (2, "succeeded", "new")]
    assert await db.pool.fetchval("SELECT content_md FROM reports") == "# sent m-1 on attempt 2\n"
    assert (task["status"], task["lease_token"]) == ("completed", claimed["lease_token"] + 1)


async def test_seed_003_scheduler_restart_at_a_boundary_loses_and_duplicates_nothing(
        db: Database, db_dsn: str, tmp_path: Path) -> None:
    """A supervisor admits the 00:01:00 slot at the boundary and is stopped before any
    worker ran it; a new supervisor (its own pool, empty caches) starts at the same
    instant, reloads durable state, admits nothing twice and runs the task once; the
    next boundary is admitted once."""
    clock = FakeClock(START + timedelta(seconds=59))
    await confirmed(db, clock, {"trigger": {"type": "interval", "every": 60}})
    config = SupervisorConfig(home=tmp_path, skew_budget=None, supervisor_id="first", workers=0)
    first = Supervisor(db, clock, config)
    async with anyio.create_task_group() as tg:
        await tg.start(first.run)
        await first.wait_idle()
        clock.advance(1)  # 00:01:00
        await first.wait_until(lambda s: s.admitted == 1)
        first.stop()  # stopped at the boundary, its task not run
    assert [t["status"] for t in await tasks(db)] == ["pending"]
    async with Database.open(db_dsn, migrate=False) as pool:
        second = Supervisor(pool, clock, SupervisorConfig(home=tmp_path, skew_budget=None,
                                                          supervisor_id="second"))
        async with anyio.create_task_group() as tg:
            await tg.start(second.run)
            await second.wait_until(lambda s: s.completed == 1)
            await second.wait_idle()
            clock.advance(60)  # 00:02:00
            await second.wait_until(lambda s: s.completed == 2)
            await second.wait_idle()
            second.stop()
    rows = await occurrences(db)
    assert [(r["slot"], r["decision"], r["decided_by"], r["task_status"]) for r in rows] == [
        ("2026-06-01T00:01:00Z", "admitted", "first", "completed"),
        ("2026-06-01T00:02:00Z", "admitted", "second", "completed")]
    assert await db.pool.fetchval("SELECT count(*) FROM runs") == 2


async def test_seed_003_dst_conversion_stores_utc_plus_the_schedule_zone(db: Database,
                                                                         tmp_path: Path) -> None:
    """Daily 09:00 Europe/Paris through the autumn change (2026-10-25): a supervisor
    admits 07:00Z on the 24th and 08:00Z on the 25th and 26th, and every occurrence
    row carries the resolved UTC instant together with the zone, the local wall time
    09:00 and the tzdata version used, so the shift is explained, not guessed."""
    clock = FakeClock(utc("2026-10-24T06:59:00Z"))
    await confirmed(db, clock, {"trigger": {"type": "cron", "expr": "0 9 * * *",
                                            "zone": "Europe/Paris"}})
    sup = Supervisor(db, clock, SupervisorConfig(home=tmp_path, skew_budget=None,
                                                 supervisor_id="sup", workers=0))
    async with anyio.create_task_group() as tg:
        await tg.start(sup.run)
        await sup.wait_idle()
        for count, due in enumerate(("2026-10-24T07:00:00Z", "2026-10-25T08:00:00Z",
                                     "2026-10-26T08:00:00Z"), start=1):
            clock.set_wall(utc(due) - timedelta(seconds=1))
            await sup.wait_idle()
            assert len(await occurrences(db)) == count - 1  # not a second early
            clock.advance(1)
            await sup.wait_until(lambda s, n=count: sum(s.decisions.values()) >= n)
            await sup.wait_idle()
        sup.stop()
    rows = await occurrences(db)
    assert [r["scheduled_for"] for r in rows] == [
        utc("2026-10-24T07:00:00Z"), utc("2026-10-25T08:00:00Z"), utc("2026-10-26T08:00:00Z")]
    assert {(r["zone"], r["local_wall"].hour, r["local_wall"].minute) for r in rows} == {
        ("Europe/Paris", 9, 0)}
    assert all(re.fullmatch(r"20\d\d[a-z]", r["tzdata_version"]) for r in rows), rows
    assert [r["slot"] for r in rows] == [
        "2026-10-24T09:00[Europe/Paris]", "2026-10-25T09:00[Europe/Paris]",
        "2026-10-26T09:00[Europe/Paris]"]
