"""Regressions found by an adversarial review, each with the value that is right."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
from _helpers import confirmed, events, occurrences, owner, tasks, utc
from _pgproxy import Fault, PgProxy

from watchkeeper.runtime._errors import Conflict
from watchkeeper.runtime.engine._agents import AgentCatalog, AgentContext, AgentResult
from watchkeeper.runtime.engine._clock import FakeClock
from watchkeeper.runtime.engine._effects import EffectNotApplied
from watchkeeper.runtime.engine._registry import Registry, RunContext, ScheduleDef, register
from watchkeeper.runtime.engine._scheduler import tick
from watchkeeper.runtime.engine._worker import Worker
from watchkeeper.runtime.store._db import Database
from watchkeeper.runtime.usecases import OPERATOR, cancel, confirm, pause, propose, review
from watchkeeper.triggers import CronSchedule, SpecError, parse_spec

pytestmark = pytest.mark.anyio

START = "2026-06-01T00:00:00Z"
HOURLY = {"trigger": {"type": "interval", "every": 3600, "anchor": START}}


def catalog(behaviour: Any = None) -> AgentCatalog:
    async def ok(ctx: AgentContext) -> AgentResult:
        return AgentResult(f"# {ctx.title or ctx.definition_id}\n")

    class Agent:
        async def run(self, ctx: AgentContext) -> AgentResult:
            return await (behaviour or ok)(ctx)

    result = AgentCatalog()
    result.add("a", Agent())
    return result


async def test_a_title_never_leaks_to_another_tenant(db: Database, tmp_path: Path) -> None:
    """Two tenants with the same effective spec each see their own title in reports."""
    clock = FakeClock(utc(START))
    base = {"trigger": {"type": "cron", "expr": "0 9 * * *", "zone": "UTC"}}
    acme = await owner(db, clock, "acme", "alice")
    globex = await owner(db, clock, "globex", "bob")
    await confirmed(db, clock, {**base, "title": "ACME confidential"}, definition_id="r",
                    principal=acme)
    await confirmed(db, clock, {**base, "title": "Globex digest"}, definition_id="g",
                    principal=globex)
    clock.set_wall(utc("2026-06-01T09:00:01Z"))
    await tick(db, clock)
    worker = Worker(db, clock, AgentCatalog(), worker_id="w", artifact_root=tmp_path)
    while await worker.run_once():
        pass
    rows = await db.pool.fetch("SELECT tenant_id, split_part(content_md, E'\\n', 1) AS headline "
                               "FROM reports ORDER BY tenant_id")
    assert [tuple(r) for r in rows] == [("acme", "# ACME confidential"), ("globex", "# Globex digest")]


async def test_a_held_task_is_released_when_the_task_it_waits_for_is_skipped(
        db: Database, tmp_path: Path) -> None:
    """queue_one + review_late: skipping the reviewed task releases the one held behind it."""
    clock = FakeClock(utc(START))
    me = await confirmed(db, clock, {**HOURLY, "agent": {"name": "a"}, "overrun": "queue_one",
                                     "lateness": {"policy": "review_late"}})
    clock.advance(1)
    await tick(db, clock)
    worker = Worker(db, clock, catalog(), worker_id="w", artifact_root=tmp_path)
    clock.advance(900)
    assert (await worker.run_once()).status == "review_required"  # type: ignore[union-attr]
    clock.set_wall(utc("2026-06-01T01:00:01Z"))
    await tick(db, clock)
    assert [t["status"] for t in await tasks(db)] == ["review_required", "held"]
    await review(db, clock, me, "acme", "d1", START, approve=False)
    assert [t["status"] for t in await tasks(db)] == ["expired", "pending"]
    done = await worker.run_once()
    assert done is not None and (done.task_id, done.status) == (2, "completed")


async def test_an_orphaned_hold_is_released_by_the_next_tick(db: Database) -> None:
    """A held task whose predecessor ended without releasing it (a race) is released."""
    clock = FakeClock(utc(START))
    await confirmed(db, clock, {**HOURLY, "overrun": "queue_one"})
    clock.advance(1)
    await tick(db, clock)
    clock.set_wall(utc("2026-06-01T01:00:01Z"))
    await tick(db, clock)
    await db.pool.execute("UPDATE tasks SET status = 'completed' WHERE task_id = 1")
    clock.advance(1)
    await tick(db, clock)
    assert [t["status"] for t in await tasks(db)] == ["completed", "pending"]


async def test_a_held_task_is_not_expired_by_its_wait(db: Database, tmp_path: Path) -> None:
    """queue_one's wait is by design: the held task runs even after its expires_at."""
    clock = FakeClock(utc(START))
    await confirmed(db, clock, {**HOURLY, "agent": {"name": "a"}, "overrun": "queue_one",
                                "limits": {"deadline": "PT3H"}})
    worker = Worker(db, clock, catalog(), worker_id="w", artifact_root=tmp_path, lease_seconds=7200)
    clock.advance(1)
    await tick(db, clock)
    running = await worker.claim()
    clock.set_wall(utc("2026-06-01T01:00:01Z"))
    await tick(db, clock)
    clock.set_wall(utc("2026-06-01T01:30:00Z"))  # 20 min past the held task's expires_at
    assert running is not None and (await worker.execute(running)).status == "completed"
    second = await worker.run_once()
    assert second is not None and second.status == "completed"


async def test_the_run_budget_spans_the_task_attempts(db: Database, tmp_path: Path) -> None:
    """max_cost_usd 1.50 over attempts of 1.00 each: the second attempt is refused."""
    from decimal import Decimal

    clock = FakeClock(utc(START))

    async def spend(ctx: AgentContext) -> AgentResult:
        ctx.budget.charge(cost_usd=Decimal("1.00"))
        raise RuntimeError("model error after spending")

    await confirmed(db, clock, {**HOURLY, "agent": {"name": "a"},
                                "limits": {"max_cost_usd": "1.50", "max_attempts": 5}})
    clock.advance(1)
    await tick(db, clock)
    worker = Worker(db, clock, catalog(spend), worker_id="w", artifact_root=tmp_path)
    assert (await worker.run_once()).status == "pending"  # type: ignore[union-attr]
    clock.advance(120)
    final = await worker.run_once()
    assert final is not None and final.status == "failed"
    assert "cost_usd: 2 would exceed the task's limit of 1.5" in final.reason  # plain decimals


async def test_a_takeover_honours_a_cancel_request(db: Database, tmp_path: Path) -> None:
    """cancel --running, then the worker is partitioned: the taker-over does not run it."""
    clock = FakeClock(utc(START))
    gate = anyio.Event()

    async def block(ctx: AgentContext) -> AgentResult:
        await gate.wait()
        return AgentResult("# never\n")

    me = await confirmed(db, clock, {**HOURLY, "agent": {"name": "a"}})
    clock.advance(1)
    await tick(db, clock)
    first = Worker(db, clock, catalog(block), worker_id="A", artifact_root=tmp_path,
                   renew_every=10**6)
    rival = Worker(db, clock, catalog(), worker_id="B", artifact_root=tmp_path)
    async with anyio.create_task_group() as tg:
        claimed = await first.claim()
        tg.start_soon(first.execute, claimed)
        await clock.wait_for_sleepers(2)
        await cancel(db, clock, me, "acme", "d1", running=True)
        clock.advance(61)
        outcome = await rival.run_once()
        assert outcome is not None and outcome.status == "cancelled"
        gate.set()
    assert (await tasks(db))[0]["status"] == "cancelled"
    assert await db.pool.fetchval("SELECT count(*) FROM reports") == 0


async def test_a_rolled_back_tick_does_not_run_what_another_replica_claimed(db: Database,
                                                                            db_dsn: str) -> None:
    """Replica A's COMMIT is lost and rolled back; replica B claims and runs the run
    terminal meanwhile; A's recovery must not conclude 'committed' from the moved cursor."""
    clock = FakeClock(utc(START))
    calls: list[str] = []

    async def cleanup(ctx: RunContext) -> None:
        calls.append(ctx.slot)

    definition = ScheduleDef(id="cleanup", every=timedelta(minutes=15), run=cleanup)
    registry = Registry([definition])
    await register(db, clock, definition)
    clock.set_wall(utc("2026-06-01T00:15:01Z"))
    async with PgProxy(db_dsn) as proxy, Database.open(proxy.dsn, migrate=False, max_size=2) as a:
        settle = a.settle

        async def settle_then_b_ticks(lost: Any, timeout_ms: int = 5000) -> None:
            await settle(lost, timeout_ms)
            await tick(db, clock, registry, actor="replica-B")

        a.settle = settle_then_b_ticks  # type: ignore[method-assign]
        proxy.arm(Fault.DROP_COMMIT)
        report = await tick(a, clock, registry, actor="replica-A")
    assert report.recovered and report.runs == [] and sum(report.decisions.values()) == 0
    assert calls == ["2026-06-01T00:15:00Z"]


async def test_review_approval_after_a_reconfirm_is_refused(db: Database) -> None:
    """An occurrence of revision 1 cannot be admitted under revision 2's spec."""
    clock = FakeClock(utc("2026-06-01T00:30:00Z"))
    me = await confirmed(db, clock, {**HOURLY, "lateness": {"policy": "review_late"}})
    clock.set_wall(utc("2026-06-01T01:15:00Z"))
    await tick(db, clock)
    spec = parse_spec({"version": 1, **HOURLY, "instructions": "new",
                       "lateness": {"policy": "review_late"}})
    proposal = await propose(db, clock, tenant_id="acme", definition_id="d1", owner_user_id="alice",
                             spec=spec, proposed_by="agent:test", based_on=1)
    await confirm(db, clock, me, definition_id="d1", revision=2, spec_hash=proposal.spec_hash)
    with pytest.raises(Conflict, match="reconfirmed"):
        await review(db, clock, me, "acme", "d1", "2026-06-01T01:00:00Z", approve=True)
    assert await tasks(db) == []


async def test_reconfirming_a_paused_definition_records_the_paused_span(db: Database) -> None:
    """The old revision's paused slots are recorded once when a new revision takes over."""
    clock = FakeClock(utc("2026-06-01T00:30:00Z"))
    me = await confirmed(db, clock, HOURLY)
    await pause(db, clock, me, "acme", "d1")
    clock.set_wall(utc("2026-06-01T04:30:00Z"))
    spec = parse_spec({"version": 1, **HOURLY, "instructions": "new"})
    proposal = await propose(db, clock, tenant_id="acme", definition_id="d1", owner_user_id="alice",
                             spec=spec, proposed_by="agent:test", based_on=1)
    await confirm(db, clock, me, definition_id="d1", revision=2, spec_hash=proposal.spec_hash)
    (event,) = await events(db)
    assert (event["kind"], event["first_slot"], event["last_slot"], event["count"]) == (
        "skipped_paused", "2026-06-01T01:00:00Z", "2026-06-01T04:00:00Z", 4)


async def test_a_cancelled_operator_definition_stays_cancelled_on_re_registration(
        db: Database) -> None:
    """A host restart that registers the same definition does not revive it."""
    clock = FakeClock(utc(START))

    async def sweep(ctx: RunContext) -> None:
        return None

    definition = ScheduleDef(id="sweep", every=timedelta(minutes=15), run=sweep)
    await register(db, clock, definition)
    await cancel(db, clock, OPERATOR, "_operator", "sweep")
    await register(db, clock, definition)
    assert await db.pool.fetchval("SELECT status FROM definitions") == "cancelled"


def test_run_terminal_tenants_are_validated() -> None:
    """Duplicate, empty or reserved tenants are refused at registration."""
    async def sweep(ctx: RunContext) -> None:
        return None

    for tenants in (["a", "a"], [""], ["_operator"]):
        with pytest.raises(SpecError, match="tenants"):
            ScheduleDef(id="x", every=timedelta(minutes=15), run=sweep, tenants=tenants)


async def test_an_effect_that_was_not_applied_may_be_retried(db: Database, tmp_path: Path) -> None:
    """EffectNotApplied declares that nothing happened: the retry performs it; any other
    error leaves the outcome unknown."""
    clock = FakeClock(utc(START))
    calls: list[int] = []

    async def behaviour(ctx: AgentContext) -> AgentResult:
        async def send(key: str) -> str:
            calls.append(ctx.attempt)
            if ctx.attempt == 1:
                raise EffectNotApplied("422: rejected by the provider")
            return "sent"

        await ctx.effects.perform("post", send)
        return AgentResult("# posted\n")

    await confirmed(db, clock, {**HOURLY, "agent": {"name": "a"}})
    clock.advance(1)
    await tick(db, clock)
    worker = Worker(db, clock, catalog(behaviour), worker_id="w", artifact_root=tmp_path)
    assert (await worker.run_once()).status == "pending"  # type: ignore[union-attr]
    clock.advance(120)
    done = await worker.run_once()
    assert done is not None and done.status == "completed"
    assert calls == [1, 2]
    assert await db.pool.fetchval("SELECT status FROM effects") == "done"


async def test_a_gap_slot_does_not_supersede_a_runnable_one(db: Database) -> None:
    """'30 1,2 * * *' Berlin on 2026-03-29, grace 1 h: at 01:00:01Z the runnable 01:30 CET
    is admitted and the missing 02:30 is recorded after it."""
    clock = FakeClock(utc("2026-03-28T12:00:00Z"))
    await confirmed(db, clock, {"trigger": {"type": "cron", "expr": "30 1,2 * * *",
                                            "zone": "Europe/Berlin"},
                                "lateness": {"late_grace": "PT1H"}})
    clock.set_wall(utc("2026-03-29T01:00:01Z"))
    await tick(db, clock)
    assert [(o["slot"], o["decision"]) for o in await occurrences(db)] == [
        ("2026-03-29T01:30[Europe/Berlin]", "admitted")]
    assert [(e["kind"], e["first_slot"]) for e in await events(db)] == [
        ("skipped_dst_gap", "2026-03-29T02:30[Europe/Berlin]")]


def test_run_after_with_a_transition_off_the_minute() -> None:
    """Africa/Monrovia moved from -00:44:30 to +00:00 at 1972-01-07T00:44:30Z: the missing
    00:44 runs once right after the gap, at 00:44:30Z."""
    from datetime import datetime

    slots = CronSchedule("44 0 * * *", "Africa/Monrovia", "run_after").slots_after(
        datetime.fromisoformat("1972-01-06T12:00:00+00:00"))
    first = next(slots)
    assert first.scheduled_for == datetime.fromisoformat("1972-01-07T00:44:30+00:00")
    assert first.fires


async def test_a_resolver_returning_nonsense_claims_nothing(db: Database) -> None:
    """A host resolver that returns None becomes bindings_invalid; the tick goes on."""
    clock = FakeClock(utc("2026-11-27T00:00:00Z"))

    async def resolver() -> Any:
        return None

    definition = ScheduleDef(id="r", cron="0 9 * * 1", zone="UTC", bindings=resolver)
    await register(db, clock, definition)
    clock.set_wall(utc("2026-11-30T09:00:01Z"))
    await tick(db, clock, Registry([definition]))
    (event,) = await db.pool.fetch("SELECT kind, reason FROM schedule_events")
    assert event["kind"] == "bindings_invalid" and "must be a list" in event["reason"]


async def test_an_internal_worker_error_fails_that_task_only(db: Database, tmp_path: Path) -> None:
    """An artifact directory that cannot be created fails the task, not the worker."""
    clock = FakeClock(utc(START))
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where a directory should be")
    await confirmed(db, clock, {**HOURLY, "output": {"kind": "artifact", "directory": "drafts",
                                                     "type": ".md"}})
    clock.advance(1)
    await tick(db, clock)
    worker = Worker(db, clock, AgentCatalog(), worker_id="w", artifact_root=blocker)
    outcome = await worker.run_once()
    assert outcome is not None and outcome.status == "failed"
    assert outcome.reason.startswith("internal error: ")


@pytest.fixture
async def second_pool(db_dsn: str) -> AsyncIterator[Database]:
    async with Database.open(db_dsn, migrate=False) as other:
        yield other


async def test_racing_first_proposals_are_a_conflict_not_a_crash(db: Database,
                                                                 second_pool: Database) -> None:
    """Two first proposals of one id at once: one wins, the other gets a Conflict."""
    clock = FakeClock(utc(START))
    await owner(db, clock)
    spec = parse_spec({"version": 1, **HOURLY})
    results: list[Any] = []

    async def go(pool: Database) -> None:
        try:
            results.append(await propose(pool, clock, tenant_id="acme", definition_id="d1",
                                         owner_user_id="alice", spec=spec, proposed_by="x"))
        except Conflict as exc:
            results.append(exc)

    async with anyio.create_task_group() as tg:
        tg.start_soon(go, db)
        tg.start_soon(go, second_pool)
    assert sorted(type(r).__name__ for r in results) in (["Conflict", "Proposal"],
                                                         ["Proposal", "Proposal"])
    assert await db.pool.fetchval("SELECT count(*) FROM definitions") == 1
