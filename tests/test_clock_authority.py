"""PostgreSQL's clock is the authority (DESIGN "Runs, leases, fencing, clocks"; seed
003): a supervisor whose host wall clock steps or drifts decides leases, takeovers,
renewals, due slots and deadlines on the database's time, sees the step within one tick
and records ``clock_uncertain`` with the offset while it lasts.

The fake world: one :class:`FakeClock` plays the database's clock (the authority, read
through :class:`FakeAuthority`, as seed 003 asks: "advance the authority clock"); a
supervisor's host is a :class:`SkewedClock` over it, whose wall clock the test steps or
lets drift while its monotonic clock keeps the true pace. One test runs the production
authority, PostgreSQL's ``clock_timestamp()``, with the real clocks.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
from _helpers import confirmed, occurrences, owner, tasks, utc

from watchkeeper.runtime.engine._agents import AgentCatalog, AgentContext, AgentResult
from watchkeeper.runtime.engine._clock import (
    AnchoredClock,
    FakeAuthority,
    FakeClock,
    SampleRejected,
    SkewedClock,
    SystemClock,
)
from watchkeeper.runtime.engine._scheduler import tick
from watchkeeper.runtime.engine._supervisor import Supervisor, SupervisorConfig
from watchkeeper.runtime.engine._worker import Worker
from watchkeeper.runtime.store._db import Database

pytestmark = pytest.mark.anyio

START = utc("2026-06-01T00:00:00Z")
HOUR = timedelta(hours=1)


class Sleeper:
    """An agent that takes ``seconds`` of (true) time and counts its executions."""

    def __init__(self, clock: FakeClock, seconds: float) -> None:
        self.clock, self.seconds, self.calls = clock, seconds, 0
        self.started = anyio.Event()
        self.wakes_at = float("inf")

    async def run(self, ctx: AgentContext) -> AgentResult:
        self.calls += 1
        self.wakes_at = self.clock.monotonic() + self.seconds
        self.started.set()
        await self.clock.sleep(self.seconds)
        return AgentResult(f"# took {self.seconds:g} s\n")


def supervisor(db: Database, host: Any, truth: FakeClock, tmp_path: Path, agents: AgentCatalog,
               **changes: Any) -> Supervisor:
    """Supervisor "B" on ``host``, its authority the database's (fake) clock."""
    settings = {"home": tmp_path, "supervisor_id": "B", "lease_seconds": 15.0,
                "skew_budget": 2.0, "tick_seconds": 1.0, "poll_seconds": 1.0, "workers": 1,
                **changes}
    return Supervisor(db, host, SupervisorConfig(**settings), agents=agents,
                      authority=FakeAuthority(truth))


async def uncertain_events(db: Database) -> list[dict[str, Any]]:
    rows = await db.pool.fetch("SELECT reason, recorded_at, recorded_by FROM schedule_events "
                               "WHERE kind = 'clock_uncertain' ORDER BY event_id")
    return [dict(r) for r in rows]


async def event_kinds(db: Database, definition_id: str) -> list[str]:
    return [r["kind"] for r in await db.pool.fetch(
        "SELECT kind FROM schedule_events WHERE definition_id = $1 ORDER BY event_id",
        definition_id)]


async def step_seconds(truth: FakeClock, b: Supervisor, seconds: float, by: float = 1.0) -> None:
    """Advance the database's clock ``seconds`` in steps of ``by``, letting B settle."""
    moved = 0.0
    while moved < seconds - 1e-9:
        truth.advance(min(by, seconds - moved))
        moved += min(by, seconds - moved)
        await b.wait_idle()


@pytest.mark.parametrize(("step", "budget"), [(HOUR, 2.0), (timedelta(minutes=10), 2.0),
                                              (HOUR, None)],
                         ids=["+1h", "+10min", "+1h-anchoring-alone"])
async def test_seed_003_clock_jumps_forward_takes_nothing_over_and_admits_nothing_early(
        db: Database, tmp_path: Path, step: timedelta, budget: float | None) -> None:
    """Worker A (on the true clock, lease 15 s) holds a healthy 25 s task; supervisor B's
    host wall clock steps forward. B never takes A's lease over (A's one run succeeds,
    no takeover, one execution), never times the task out, admits the 60 s interval's
    slot at START+30 s exactly (not when its host thought so), records no slot as
    superseded or missed, and — with a budget — records ``clock_uncertain`` with the
    offset at its first step after the clock moved, then resumes once it is back.
    Without a budget (anchoring alone) B keeps working through the step, on the
    database's time."""
    truth = FakeClock(START)
    slow = Sleeper(truth, 25)
    catalog = AgentCatalog()
    catalog.add("slow", slow)
    me = await owner(db, truth)
    await confirmed(db, truth, {"trigger": {"type": "interval", "every": 3600, "anchor":
                                            START.isoformat()}, "agent": {"name": "slow"}},
                    definition_id="long", principal=me)
    await confirmed(db, truth, {"trigger": {"type": "interval", "every": 60, "anchor":
                                            (START + timedelta(seconds=30)).isoformat()}},
                    definition_id="minute", principal=me)
    truth.advance(1)
    assert (await tick(db, truth)).admitted == 1  # long's slot START; minute's first is +30 s
    a = Worker(db, truth, catalog, worker_id="A", artifact_root=tmp_path, lease_seconds=15)
    claimed = await a.claim()
    assert claimed is not None
    outcome: list[Any] = []
    host = SkewedClock(truth)
    b = supervisor(db, host, truth, tmp_path, catalog, skew_budget=budget)

    done = anyio.Event()

    async def keep() -> None:
        outcome.append(await a.execute(claimed))
        done.set()

    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            tg.start_soon(keep)
            await tg.start(b.run)
            await b.wait_idle()
            truth.advance(1)  # START+2
            await b.wait_idle()
            stepped_at = truth.now()
            host.step(step)
            truth.advance(1)  # B's next tick
            stats = await b.wait_idle()
            if budget is not None:
                assert stats.clock_uncertain
                (event,) = await uncertain_events(db)
                assert event["recorded_at"] == stepped_at + timedelta(seconds=1)
                offset = step.total_seconds()
                assert f"offset {offset:+.3f} s" in event["reason"], event["reason"]
                assert stats.clock_offset == pytest.approx(offset)
            # A's 25 s run goes on under renewals; B must not take it over at any second
            while truth.now() < START + timedelta(seconds=26):
                lease = await db.pool.fetchrow(
                    "SELECT lease_owner, lease_token, status FROM tasks WHERE definition_id = 'long'")
                assert (lease["lease_owner"], lease["lease_token"], lease["status"]) == (
                    "A", claimed["lease_token"], "running"), (truth.now(), dict(lease))
                truth.advance(1)
                await b.wait_idle()
            await done.wait()  # START+26: A's agent has had its 25 s
            truth.advance(1)  # START+27
            await b.wait_idle()
            host.step(-step)  # the host's clock is put right
            truth.advance(1)  # START+28
            stats = await b.wait_idle()
            assert not stats.clock_uncertain
            await step_seconds(truth, b, 1.5, by=0.5)  # START+29.5: minute's slot not yet due
            assert await occurrences(db, "minute") == []
            truth.advance(0.5)  # START+30: due on the database's clock
            await b.wait_until(lambda s: s.admitted >= 1)
            await b.wait_idle()
            b.stop()
    assert outcome[0].status == "completed" and slow.calls == 1
    assert b.statistics().takeovers == 0
    (long_task,) = await tasks(db, "long")
    assert (long_task["status"], long_task["attempts"]) == ("completed", 1)
    long_runs = await db.pool.fetch("SELECT worker, outcome FROM runs ORDER BY run_id")
    assert [(r["worker"], r["outcome"]) for r in long_runs][0] == ("A", "succeeded")
    (minute,) = await occurrences(db, "minute")
    assert (minute["scheduled_for"], minute["decision"], minute["late"]) == (
        START + timedelta(seconds=30), "admitted", False)
    assert minute["decided_at"] >= minute["scheduled_for"]
    assert await event_kinds(db, "minute") == []  # nothing superseded, nothing missed


async def settle(b: Supervisor, truth: FakeClock, agent: Sleeper) -> Any:
    """Wait until B's loops are parked and, while its worker is inside the agent's run,
    until the run's three sleepers (agent, lease renewal, deadline watchdog) are back
    on the clock: nothing more happens until the clock moves."""
    if agent.wakes_at <= truth.monotonic():  # the run is over or ending: all will park
        return await b.wait_idle()
    stats = await b.wait_idle(but_workers=True)
    await truth.wait_for_sleepers(len(b._loops) - 1 + 3)
    return stats


@pytest.mark.parametrize("step", [-HOUR, -timedelta(minutes=10)], ids=["-1h", "-10min"])
async def test_seed_003_clock_jumps_backward_never_writes_an_expired_lease(
        db: Database, tmp_path: Path, step: timedelta) -> None:
    """Supervisor B runs a 20 s task (lease 15 s, renewed every 5 s); its host wall clock
    steps back. Every lease B writes expires after the database's now, a healthy worker
    A trying every second never takes it over, the agent runs once and the task
    completes under B's token; ``clock_uncertain`` is recorded with the negative
    offset at B's next step."""
    truth = FakeClock(START)
    slow = Sleeper(truth, 20)
    catalog = AgentCatalog()
    catalog.add("slow", slow)
    await confirmed(db, truth, {"trigger": {"type": "interval", "every": 3600, "anchor":
                                            (START + timedelta(seconds=1)).isoformat()},
                                "agent": {"name": "slow"}}, definition_id="long")
    host = SkewedClock(truth)
    b = supervisor(db, host, truth, tmp_path, catalog)
    a = Worker(db, truth, catalog, worker_id="A", artifact_root=tmp_path, lease_seconds=15)
    expiries: list[tuple[datetime, datetime]] = []
    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            await tg.start(b.run)
            await b.wait_idle()
            truth.advance(1)  # START+1: B admits and claims
            await slow.started.wait()
            await settle(b, truth, slow)
            token = await db.pool.fetchval("SELECT lease_token FROM tasks")
            host.step(step)
            truth.advance(1)
            stats = await settle(b, truth, slow)
            assert stats.clock_uncertain
            (event,) = await uncertain_events(db)
            assert f"offset {step.total_seconds():+.3f} s" in event["reason"]
            while True:
                truth.advance(1)
                await settle(b, truth, slow)
                row = await db.pool.fetchrow("SELECT status, lease_expires_at FROM tasks")
                if row["status"] != "running":
                    break
                expiries.append((truth.now(), row["lease_expires_at"]))
                assert await a.run_once() is None  # no takeover of a healthy lease
            b.stop()
    assert expiries and all(expires > now for now, expires in expiries), expiries
    assert max(expires - now for now, expires in expiries) <= timedelta(seconds=15)
    (task,) = await tasks(db, "long")
    assert (task["status"], task["attempts"], slow.calls) == ("completed", 1, 1)
    runs = await db.pool.fetch("SELECT worker, outcome, lease_token FROM runs")
    assert [(r["worker"], r["outcome"], r["lease_token"]) for r in runs] == [
        ("B/w0", "succeeded", token)]
    assert a.takeovers == 0


async def test_a_slowly_drifting_host_admits_on_the_databases_time(db: Database,
                                                                   tmp_path: Path) -> None:
    """B's host gains 1 s per minute. While within the 2 s budget B decides each slot of
    a 60 s interval (START+30 s, START+90 s; the second is ``skipped_overrun``: no
    worker ran the first) when it is due on the database's clock, never the 0.5 s or
    1.5 s earlier its host shows; once the offset passes 2 s (after two minutes) it
    records ``clock_uncertain`` within one tick and holds the next slot."""
    truth = FakeClock(START)
    await confirmed(db, truth, {"trigger": {"type": "interval", "every": 60,
                                            "anchor": (START + timedelta(seconds=30)).isoformat()}})
    host = SkewedClock(truth)
    host.drift(1 / 60)
    b = supervisor(db, host, truth, tmp_path, AgentCatalog(), workers=0)
    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            await tg.start(b.run)
            await b.wait_idle()
            for count, slot in enumerate((30, 90), start=1):
                await step_seconds(truth, b, slot - 0.25 - (truth.now() - START).total_seconds(),
                                   by=0.25)
                assert len(await occurrences(db)) == count - 1, truth.now()
                truth.advance(0.25)
                await b.wait_until(lambda s, n=count: sum(s.decisions.values()) >= n)
                await b.wait_idle()
            await step_seconds(truth, b, 29.0, by=1.0)  # START+119: offset 1.98 s
            assert not b.statistics().clock_uncertain
            await step_seconds(truth, b, 2.0, by=0.25)  # START+121: offset 2.02 s
            assert b.statistics().clock_uncertain
            (event,) = await uncertain_events(db)
            assert START + timedelta(seconds=120) <= event["recorded_at"] <= START + timedelta(
                seconds=121)
            await step_seconds(truth, b, 30.0, by=1.0)  # START+151: slot 150 due, held
            b.stop()
    rows = await occurrences(db)
    assert [r["scheduled_for"] for r in rows] == [START + timedelta(seconds=s) for s in (30, 90)]
    assert all(r["decided_at"] == r["scheduled_for"] for r in rows)


async def test_seed_003_ntp_unavailable_holds_dispatch_with_an_alert(
        db: Database, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Seed 003, "NTP becomes unavailable": the authority cannot be read. After three
    sample intervals (30 s) without a reading B is ``clock_uncertain`` (event, heartbeat
    status and an error in the log), admits nothing though a slot is due, and resumes at
    the first good sample."""
    truth = FakeClock(START)
    await confirmed(db, truth, {"trigger": {"type": "interval", "every": 60,
                                            "anchor": (START + timedelta(seconds=40)).isoformat()}})
    authority = FakeAuthority(truth)
    b = Supervisor(db, SkewedClock(truth), SupervisorConfig(
        home=tmp_path, supervisor_id="B", workers=0, tick_seconds=1.0), authority=authority)
    caplog.set_level(logging.ERROR, logger="watchkeeper.supervisor")
    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            await tg.start(b.run)
            await b.wait_idle()
            authority.fail = OSError("authority unreachable")
            await step_seconds(truth, b, 30.0)  # last good sample at START+0
            assert not b.statistics().clock_uncertain
            await step_seconds(truth, b, 1.0)  # START+31: 31 s without a sample
            assert b.statistics().clock_uncertain
            (event,) = await uncertain_events(db)
            assert "no offset measurable" in event["reason"]
            assert "authority unreachable" in event["reason"]
            assert await db.pool.fetchval("SELECT status FROM supervisors") == "clock_uncertain"
            assert any("clock uncertain" in r.getMessage() for r in caplog.records)
            await step_seconds(truth, b, 19.0)  # START+50: the START+40 slot is due, held
            assert await occurrences(db) == []
            authority.fail = None
            await step_seconds(truth, b, 10.0)  # the next sample (every 10 s) succeeds
            stats = await b.wait_until(lambda s: s.admitted == 1)
            assert not stats.clock_uncertain
            b.stop()
    (row,) = await occurrences(db)
    assert row["scheduled_for"] == START + timedelta(seconds=40)


async def test_postgresql_is_the_authority_of_a_supervisor_on_the_real_clocks(
        db: Database, tmp_path: Path) -> None:
    """Production wiring: the supervisor's authority is PostgreSQL's clock_timestamp().
    A host wall clock an hour ahead is uncertain from the first sample (offset ~+3600 s
    recorded), and slots due on the host's clock but not on PostgreSQL's are neither
    admitted nor recorded as missed."""
    server_now = await db.server_now()
    clock = FakeClock(server_now)
    await confirmed(db, clock, {"trigger": {"type": "interval", "every": 60,
                                            "anchor": (server_now + timedelta(minutes=5)).isoformat()}})
    host = SkewedClock(SystemClock(), HOUR)
    b = Supervisor(db, host, SupervisorConfig(home=tmp_path, supervisor_id="B", workers=0,
                                              tick_seconds=0.05))
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            await tg.start(b.run)
            stats = b.statistics()
            assert stats.clock_uncertain and stats.clock_offset == pytest.approx(3600, abs=5)
            host.step(-HOUR)
            stats = await b.wait_until(lambda s: not s.clock_uncertain and s.ticks >= 3)
            b.stop()
    (event,) = await uncertain_events(db)
    assert "offset +3" in event["reason"]
    assert await occurrences(db) == []
    assert await event_kinds(db, "d1") == []


class SlowAuthority:
    """The database's clock read in ``seconds`` of round trip (the fake clock moves
    while the reading is in flight, the authority's time taken in its middle)."""

    def __init__(self, truth: FakeClock, seconds: float) -> None:
        self.truth, self.seconds = truth, seconds

    async def read(self, monotonic: Any) -> tuple[float, datetime, float]:
        before = monotonic()
        self.truth.advance(self.seconds / 2)
        at = self.truth.now()
        self.truth.advance(self.seconds / 2)
        return before, at, monotonic()


async def test_a_slow_reading_of_the_authority_is_not_anchored_to() -> None:
    """A reading that took 0.2 s anchors at its midpoint (exact here); one that took
    1.0 s (its midpoint uncertain by 0.5 s, a pool wait or a stalled network) is refused
    with the reason, and the anchor stays where the previous reading put it."""
    truth = FakeClock(START)
    host = SkewedClock(truth, timedelta(seconds=7))
    clock = AnchoredClock(host)
    sample = await clock.resample(SlowAuthority(truth, 0.2))
    assert clock.now() == truth.now() and sample.round_trip == pytest.approx(0.2)
    assert sample.host_offset == pytest.approx(7.0)
    with pytest.raises(SampleRejected, match="took 1.000 s, more than 0.5 s"):
        await clock.resample(SlowAuthority(truth, 1.0))
    assert clock.now() == truth.now()  # still running on the good anchor
    assert clock.sample_age() == pytest.approx(1.0)
