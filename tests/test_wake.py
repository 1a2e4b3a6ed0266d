"""The supervisor wakes at the due instant, not on its tick period: it sleeps until the
earliest ``next_due_at``, and a PostgreSQL notice (LISTEN/NOTIFY) wakes it sooner when a
confirmation or a trigger-now makes work due before that (issue 17, item 3). The tick
period here is an hour, so only these wake-ups can explain an admission on time."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from _helpers import confirmed, occurrences, owner, tasks, utc

from watchkeeper.runtime.engine._clock import FakeClock
from watchkeeper.runtime.engine._supervisor import Supervisor, SupervisorConfig
from watchkeeper.runtime.store._db import Database
from watchkeeper.runtime.usecases import trigger_now

pytestmark = pytest.mark.anyio

HOUR = 3600.0


def config(tmp_path: Path, **changes: Any) -> SupervisorConfig:
    """A supervisor whose fallback tick period is an hour."""
    return SupervisorConfig(home=tmp_path, skew_budget=None, supervisor_id="sup-wake",
                            tick_seconds=HOUR, poll_seconds=HOUR, **changes)


async def test_the_tick_wakes_at_the_due_instant(db: Database, tmp_path: Path) -> None:
    """A 10-minute interval confirmed at 00:00:30 is first due at 00:10:00. With an hour's
    tick period the supervisor still admits it at 00:10:00 exactly (decided at that
    instant, no lateness), and not a second before; then at 00:20:00."""
    clock = FakeClock(utc("2026-06-01T00:00:30Z"))
    await confirmed(db, clock, {"trigger": {"type": "interval", "every": 600}})
    supervisor = Supervisor(db, clock, config(tmp_path, workers=0))
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            await tg.start(supervisor.run)
            await supervisor.wait_idle()
            clock.set_wall(utc("2026-06-01T00:09:59Z"))
            await supervisor.wait_idle()
            assert supervisor.statistics().admitted == 0
            clock.set_wall(utc("2026-06-01T00:10:00Z"))
            await supervisor.wait_idle()
            assert supervisor.statistics().admitted == 1
            clock.set_wall(utc("2026-06-01T00:20:00Z"))
            await supervisor.wait_idle()
            assert supervisor.statistics().wake == "notify"
            supervisor.stop()
    rows = await occurrences(db)
    assert [(r["slot"], r["decided_at"], r["lateness_seconds"]) for r in rows] == [
        ("2026-06-01T00:10:00Z", utc("2026-06-01T00:10:00Z"), 0.0),
        ("2026-06-01T00:20:00Z", utc("2026-06-01T00:20:00Z"), 0.0)]


async def test_a_confirmation_wakes_a_sleeping_supervisor(db: Database, tmp_path: Path) -> None:
    """The supervisor sleeps towards 01:00 (the only definition's slot). Another process
    confirms a definition due at 00:05: the notice wakes the tick loop, which now sleeps
    towards 00:05 and admits the new slot then, on time."""
    clock = FakeClock(utc("2026-06-01T00:00:30Z"))
    me = await confirmed(db, clock, {"trigger": {"type": "cron", "expr": "0 1 * * *",
                                                 "zone": "UTC"}}, definition_id="hourly")
    supervisor = Supervisor(db, clock, config(tmp_path, workers=0))
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            await tg.start(supervisor.run)
            await supervisor.wait_until(lambda s: s.wake == "notify")
            await supervisor.wait_idle()
            ticks = supervisor.statistics().ticks
            await confirmed(db, clock, {"trigger": {"type": "cron", "expr": "5 0 * * *",
                                                    "zone": "UTC"}}, definition_id="soon",
                            principal=me)
            await supervisor.wait_until(lambda s: s.ticks > ticks)  # woken by the notice
            await supervisor.wait_idle()
            clock.set_wall(utc("2026-06-01T00:05:00Z"))
            await supervisor.wait_idle()
            supervisor.stop()
    assert [(r["slot"], r["decided_at"], r["decision"]) for r in await occurrences(db, "soon")] == [
        ("2026-06-01T00:05[UTC]", utc("2026-06-01T00:05:00Z"), "admitted")]
    assert await occurrences(db, "hourly") == []


async def test_without_notices_the_tick_period_bounds_the_wait(db: Database,
                                                               tmp_path: Path) -> None:
    """The same confirmation with LISTEN off (as behind a transaction pooler): nothing
    wakes the loop, so the slot due at 00:05 waits for the next tick, an hour after the
    last one, and is past its 10-minute grace by then; the supervisor says it polls,
    and why."""
    clock = FakeClock(utc("2026-06-01T00:00:30Z"))
    me = await owner(db, clock)
    supervisor = Supervisor(db, clock, config(tmp_path, workers=0, listen=False))
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            await tg.start(supervisor.run)
            await supervisor.wait_idle()
            await confirmed(db, clock, {"trigger": {"type": "cron", "expr": "5 0 * * *",
                                                    "zone": "UTC"}}, definition_id="soon",
                            principal=me)
            clock.set_wall(utc("2026-06-01T00:05:00Z"))
            await supervisor.wait_idle()
            assert supervisor.statistics().admitted == 0
            clock.set_wall(utc("2026-06-01T01:00:30Z"))
            await supervisor.wait_idle()
            supervisor.stop()
    stats = supervisor.statistics()
    assert stats.wake == "polling every 3600 s: WATCHKEEPER_LISTEN is off"
    assert [(r["slot"], r["decided_at"], r["decision"]) for r in await occurrences(db, "soon")] == [
        ("2026-06-01T00:05[UTC]", utc("2026-06-01T01:00:30Z"), "skipped_expired")]


async def test_a_trigger_now_wakes_the_workers(db: Database, tmp_path: Path) -> None:
    """Workers idle on an hour's poll period run a task another process triggered at
    once: the new task's notice wakes them (no clock movement at all)."""
    clock = FakeClock(utc("2026-06-01T00:00:30Z"))
    me = await confirmed(db, clock, {"trigger": {"type": "cron", "expr": "0 9 * * *",
                                                 "zone": "UTC"}})
    supervisor = Supervisor(db, clock, config(tmp_path, workers=1))
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            await tg.start(supervisor.run)
            await supervisor.wait_until(lambda s: s.wake == "notify")
            await supervisor.wait_idle()
            await trigger_now(db, clock, me, "acme", "d1")
            await supervisor.wait_until(lambda s: s.completed == 1)
            supervisor.stop()
    assert [(t["kind"], t["status"]) for t in await tasks(db)] == [("manual", "completed")]
    assert clock.now() == utc("2026-06-01T00:00:30Z")

