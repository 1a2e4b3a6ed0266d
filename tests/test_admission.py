"""Ticks and admission against real PostgreSQL: lateness, ranges, overrun, budgets,
DST through the whole path, fences, restarts and racing supervisors."""

from __future__ import annotations

from datetime import timedelta

import anyio
import pytest
from _helpers import confirmed, decisions, definition, events, occurrences, owner, tasks, utc

from watchkeeper.runtime.engine._admission import admit
from watchkeeper.runtime.engine._agents import AgentCatalog
from watchkeeper.runtime.engine._clock import FakeClock
from watchkeeper.runtime.engine._registry import Registry
from watchkeeper.runtime.engine._scheduler import tick
from watchkeeper.runtime.engine._tick import plan_tick, read_due
from watchkeeper.runtime.engine._worker import Worker
from watchkeeper.runtime.store._db import Database
from watchkeeper.runtime.usecases import confirm, propose, review, trigger_now
from watchkeeper.triggers import jitter_offset, parse_spec

pytestmark = pytest.mark.anyio

HOURLY = {"trigger": {"type": "interval", "every": 3600}}


async def test_first_occurrence_is_at_or_after_confirmation(db: Database) -> None:
    """A schedule confirmed at 00:00:30 never produces the 00:00 slot; its first is 00:01."""
    clock = FakeClock(utc("2026-06-01T00:00:30Z"))
    await confirmed(db, clock, {"trigger": {"type": "interval", "every": 60}})
    assert (await definition(db))["next_due_at"] == utc("2026-06-01T00:01:00Z")
    clock.set_wall(utc("2026-06-01T00:00:59Z"))
    assert (await tick(db, clock)).planned == 0
    clock.set_wall(utc("2026-06-01T00:01:00Z"))
    report = await tick(db, clock)
    assert report.admitted == 1
    assert decisions(await occurrences(db)) == [("2026-06-01T00:01:00Z", "admitted")]


async def test_missed_slots_become_one_superseded_range(db: Database) -> None:
    """After 10 missed minutes only the latest is a candidate; the others are one range."""
    clock = FakeClock(utc("2026-06-01T00:00:00Z"))
    await confirmed(db, clock, {"trigger": {"type": "interval", "every": 60}})
    clock.set_wall(utc("2026-06-01T00:10:30Z"))
    report = await tick(db, clock)
    assert (report.admitted, report.ranges) == (1, 1)
    assert decisions(await occurrences(db)) == [("2026-06-01T00:10:00Z", "admitted")]
    (event,) = await events(db)
    assert (event["kind"], event["first_slot"], event["last_slot"], event["count"]) == (
        "skipped_superseded", "2026-06-01T00:00:00Z", "2026-06-01T00:09:00Z", 10)
    assert (await definition(db))["slots_seen"] == 11


@pytest.mark.parametrize(
    ("policy", "decision", "has_task", "late"),
    [("skip_expired", "skipped_expired", False, False),
     ("catch_up_once", "admitted", True, True),
     ("review_late", "review_required", False, False)],
)
async def test_lateness_policies(db: Database, policy: str, decision: str, has_task: bool,
                                 late: bool) -> None:
    """A candidate 15 min late with a 10 min grace follows its policy; lateness is 900 s."""
    clock = FakeClock(utc("2026-06-01T00:30:00Z"))
    await confirmed(db, clock, {**HOURLY, "lateness": {"policy": policy, "late_grace": 600}})
    clock.set_wall(utc("2026-06-01T01:15:00Z"))
    await tick(db, clock)
    (occ,) = await occurrences(db)
    assert (occ["slot"], occ["decision"], occ["late"]) == ("2026-06-01T01:00:00Z", decision, late)
    assert occ["lateness_seconds"] == 900.0
    assert occ["expires_at"] == utc("2026-06-01T01:10:00Z")
    assert bool(await tasks(db)) is has_task


async def test_within_grace_is_admitted_on_time(db: Database) -> None:
    """Nine minutes late with a ten-minute grace is not late: admitted, late=false."""
    clock = FakeClock(utc("2026-06-01T00:30:00Z"))
    await confirmed(db, clock, HOURLY)
    clock.set_wall(utc("2026-06-01T01:09:00Z"))
    await tick(db, clock)
    (occ,) = await occurrences(db)
    assert (occ["decision"], occ["late"], occ["lateness_seconds"]) == ("admitted", False, 540.0)


async def test_review_approve_and_skip(db: Database) -> None:
    """review_late waits for a decision: approve admits late; skip records skipped_review."""
    clock = FakeClock(utc("2026-06-01T00:30:00Z"))
    me = await confirmed(db, clock, {**HOURLY, "lateness": {"policy": "review_late"},
                                     "overrun": "allow"})
    clock.set_wall(utc("2026-06-01T02:15:00Z"))
    await tick(db, clock)
    clock.set_wall(utc("2026-06-01T03:15:00Z"))
    await tick(db, clock)
    assert [o["decision"] for o in await occurrences(db)] == ["review_required"] * 2
    assert await review(db, clock, me, "acme", "d1", "2026-06-01T02:00:00Z", approve=True) == "admitted"
    assert await review(db, clock, me, "acme", "d1", "2026-06-01T03:00:00Z", approve=False) == (
        "skipped_review")
    rows = await occurrences(db)
    assert [(o["decision"], o["late"]) for o in rows] == [("admitted", True), ("skipped_review", False)]
    (task,) = await tasks(db)
    assert (task["slot"], task["late"], task["status"]) == ("2026-06-01T02:00:00Z", True, "pending")


async def test_weekday_outage_catch_up_once(db: Database, tmp_path: object) -> None:
    """30 6-16/4 * * 1-5 UTC, down from Thursday 14:30 to Saturday 12:00: Friday's three
    slots are listed exactly; 14:30 is admitted late, 06:30 and 10:30 are one range,
    and the next regular slot is Monday 06:30."""
    clock = FakeClock(utc("2023-06-15T14:29:00Z"))
    await confirmed(db, clock, {
        "trigger": {"type": "cron", "expr": "30 6-16/4 * * 1-5", "zone": "UTC"},
        "lateness": {"policy": "catch_up_once"}})
    clock.set_wall(utc("2023-06-15T14:30:05Z"))
    await tick(db, clock)
    worker = Worker(db, clock, AgentCatalog(), worker_id="w", artifact_root=tmp_path)  # type: ignore[arg-type]
    assert (await worker.run_once()).status == "completed"  # type: ignore[union-attr]
    clock.set_wall(utc("2023-06-17T12:00:00Z"))
    report = await tick(db, clock)
    assert report.admitted == 1
    rows = await occurrences(db)
    assert [(o["slot"], o["decision"], o["late"]) for o in rows] == [
        ("2023-06-15T14:30[UTC]", "admitted", False),
        ("2023-06-16T14:30[UTC]", "admitted", True),
    ]
    (event,) = await events(db)
    assert (event["first_at"], event["last_at"], event["count"]) == (
        utc("2023-06-16T06:30Z"), utc("2023-06-16T10:30Z"), 2)
    assert (await definition(db))["next_due_at"] == utc("2023-06-19T06:30Z")


async def test_jitter_is_applied_to_the_nominal_slot_and_never_fed_back(db: Database) -> None:
    """Daily 00:00 America/Los_Angeles with 10 s jitter, run at 2022-03-13T08:00:07Z: the next
    occurrence is 2022-03-14T07:00Z (+ its own jitter), not 2022-03-15."""
    clock = FakeClock(utc("2022-03-12T12:00:00Z"))
    await confirmed(db, clock, {"trigger": {"type": "cron", "expr": "0 0 * * *",
                                            "zone": "America/Los_Angeles"}, "jitter": 10})
    clock.set_wall(utc("2022-03-13T08:00:07Z"))
    await tick(db, clock)
    (occ,) = await occurrences(db)
    offset = jitter_offset(timedelta(seconds=10), "d1", "acme", "owner", occ["slot"])
    assert timedelta(0) <= offset < timedelta(seconds=10)
    assert occ["scheduled_for"] == utc("2022-03-13T08:00:00Z")
    assert occ["not_before"] == utc("2022-03-13T08:00:00Z") + offset
    assert (await definition(db))["next_due_at"] == utc("2022-03-14T07:00:00Z")


async def test_manual_trigger_never_moves_the_schedule(db: Database) -> None:
    """A 24 h interval anchored 01:00Z, manual trigger at 06-03T11:30Z: next is 06-04T01:00Z."""
    clock = FakeClock(utc("2026-06-01T00:00:00Z"))
    me = await confirmed(db, clock, {"trigger": {"type": "interval", "every": 86400,
                                                 "anchor": "2026-06-01T01:00:00Z"},
                                     "overrun": "allow"})
    for day in ("2026-06-01T01:00:01Z", "2026-06-02T01:00:01Z", "2026-06-03T01:00:01Z"):
        clock.set_wall(utc(day))
        await tick(db, clock)
    clock.set_wall(utc("2026-06-03T11:30:00Z"))
    result = await trigger_now(db, clock, me, "acme", "d1")
    assert result.slot == "2026-06-03T11:30:00Z"
    assert result.decisions == {("acme", "owner"): "admitted"}
    assert (await definition(db))["next_due_at"] == utc("2026-06-04T01:00:00Z")
    kinds = [(o["slot"], o["kind"]) for o in await occurrences(db)]
    assert kinds[-1] == ("2026-06-03T11:30:00Z", "manual")


async def test_two_manual_triggers_600ms_apart_are_two_occurrences(db: Database) -> None:
    """Distinct instants are distinct keys; a same-instant repeat is answered duplicate."""
    clock = FakeClock(utc("2026-06-01T00:00:00Z"))
    me = await confirmed(db, clock, HOURLY)
    first = await trigger_now(db, clock, me, "acme", "d1")
    clock.advance(0.6)
    second = await trigger_now(db, clock, me, "acme", "d1")
    again = await trigger_now(db, clock, me, "acme", "d1")
    assert (first.slot, second.slot) == ("2026-06-01T00:00:00Z", "2026-06-01T00:00:00.600000Z")
    assert list(first.decisions.values()) == ["admitted"]
    assert list(second.decisions.values()) == ["admitted"]
    assert list(again.decisions.values()) == ["duplicate"]
    assert len(await tasks(db)) == 2


@pytest.mark.parametrize(
    ("overrun", "expected", "statuses"),
    [("skip", ["admitted", "skipped_overrun", "skipped_overrun"], ["pending"]),
     ("queue_one", ["admitted", "admitted", "skipped_overrun"], ["pending", "held"]),
     ("allow", ["admitted"] * 3, ["pending"] * 3),
     ("cancel_previous", ["admitted"] * 3, ["cancelled", "cancelled", "pending"])],
)
async def test_overrun_policies(db: Database, overrun: str, expected: list[str],
                                statuses: list[str]) -> None:
    """Three hourly slots while the first task never starts."""
    clock = FakeClock(utc("2026-06-01T00:30:00Z"))
    await confirmed(db, clock, {**HOURLY, "overrun": overrun})
    for hour in (1, 2, 3):
        clock.set_wall(utc(f"2026-06-01T0{hour}:00:01Z"))
        await tick(db, clock)
    assert [o["decision"] for o in await occurrences(db)] == expected
    assert [t["status"] for t in await tasks(db)] == statuses


async def test_queue_one_task_is_released_when_the_previous_ends(db: Database, tmp_path: object) -> None:
    """The task held behind a running one becomes claimable once that one has finished."""
    clock = FakeClock(utc("2026-06-01T00:30:00Z"))
    await confirmed(db, clock, {**HOURLY, "overrun": "queue_one", "limits": {"deadline": 7200}})
    worker = Worker(db, clock, AgentCatalog(), worker_id="w", artifact_root=tmp_path,  # type: ignore[arg-type]
                    lease_seconds=7200)
    clock.set_wall(utc("2026-06-01T01:00:01Z"))
    await tick(db, clock)
    running = await worker.claim()
    clock.set_wall(utc("2026-06-01T02:00:01Z"))
    await tick(db, clock)
    assert [(t["status"], t["held_behind"]) for t in await tasks(db)] == [
        ("running", None), ("held", 1)]
    assert await worker.claim() is None
    assert running is not None
    assert (await worker.execute(running)).status == "completed"
    assert [t["status"] for t in await tasks(db)] == ["completed", "pending"]
    second = await worker.run_once()
    assert second is not None and (second.task_id, second.status) == (2, "completed")


async def test_budget_denies_and_never_replenishes_within_the_period(db: Database) -> None:
    """max 2 tasks a day: the third hourly slot is denied_budget; a reconfirmed higher
    limit applies from the next day, not to the current one."""
    clock = FakeClock(utc("2026-06-01T00:30:00Z"))
    me = await confirmed(db, clock, {**HOURLY, "overrun": "allow",
                                     "limits": {"max_tasks_per_period": 2, "period": "day"}})
    for hour in (1, 2, 3):
        clock.set_wall(utc(f"2026-06-01T0{hour}:00:01Z"))
        await tick(db, clock)
    spec = parse_spec({"version": 1, **HOURLY, "overrun": "allow",
                       "limits": {"max_tasks_per_period": 5, "period": "day"}})
    proposal = await propose(db, clock, tenant_id="acme", definition_id="d1", owner_user_id="alice",
                             spec=spec, proposed_by="agent:test", based_on=1)
    await confirm(db, clock, me, definition_id="d1", revision=2, spec_hash=proposal.spec_hash)
    for when in ("2026-06-01T04:00:01Z", "2026-06-02T00:00:01Z"):
        clock.set_wall(utc(when))
        await tick(db, clock)
    assert [o["decision"] for o in await occurrences(db)] == [
        "admitted", "admitted", "denied_budget", "denied_budget", "admitted"]
    ledger = await db.pool.fetch("SELECT period_start, task_limit, used FROM budget_ledger "
                                 "ORDER BY period_start")
    assert [tuple(r) for r in ledger] == [(utc("2026-06-01T00:00Z"), 2, 2),
                                          (utc("2026-06-02T00:00Z"), 5, 1)]


async def test_reconfirm_during_a_tick_is_fenced_out(db: Database) -> None:
    """A tick planned under fence 1 meets fence 2 at admission: fenced_out, nothing admitted,
    and the new revision never fires a slot from before its confirmation."""
    clock = FakeClock(utc("2026-06-01T06:00:00Z"))
    spec = {"trigger": {"type": "cron", "expr": "0 9 * * *", "zone": "Europe/Paris"}}
    me = await confirmed(db, clock, spec)
    clock.set_wall(utc("2026-06-01T07:00:00.5Z"))  # 09:00 Paris
    due, _ = await read_due(db, clock.now(), 100, origin="user")
    plans = await plan_tick(due, clock.now(), Registry())
    clock.advance(0.5)
    edited = parse_spec({"version": 1, **spec, "instructions": "now with more care"})
    proposal = await propose(db, clock, tenant_id="acme", definition_id="d1", owner_user_id="alice",
                             spec=edited, proposed_by="agent:test", based_on=1)
    await confirm(db, clock, me, definition_id="d1", revision=2, spec_hash=proposal.spec_hash)
    report = await admit(db, plans, clock.now(), "racing-tick")
    assert (report.fenced_out, report.admitted) == (1, 0)
    replaced, fenced = await events(db)
    assert (replaced["kind"], replaced["first_slot"], replaced["revision"]) == (
        "skipped_reconfirmed", "2026-06-01T09:00[Europe/Paris]", 1)
    assert (fenced["kind"], fenced["first_slot"], fenced["revision"]) == (
        "fenced_out", "2026-06-01T09:00[Europe/Paris]", 1)
    clock.advance(1)
    assert (await tick(db, clock)).admitted == 0
    assert await occurrences(db) == []
    assert (await definition(db))["next_due_at"] == utc("2026-06-02T07:00:00Z")


async def test_a_restart_re_reads_durable_state_and_admits_nothing_twice(db_dsn: str) -> None:
    """A second process (new pool, empty caches) ticking at the same instants adds nothing."""
    clock = FakeClock(utc("2026-06-01T00:00:00Z"))
    async with Database.open(db_dsn) as first:
        await confirmed(first, clock, {"trigger": {"type": "interval", "every": 60},
                                       "overrun": "allow"})
        clock.set_wall(utc("2026-06-01T00:03:00Z"))
        assert (await tick(first, clock)).admitted == 1
    async with Database.open(db_dsn) as second:
        assert (await tick(second, clock)).planned == 0
        clock.advance(30)
        assert (await tick(second, clock)).planned == 0
        clock.advance(30)
        assert (await tick(second, clock)).admitted == 1
        assert [o["slot"] for o in await occurrences(second)] == [
            "2026-06-01T00:03:00Z", "2026-06-01T00:04:00Z"]


async def test_two_supervisors_racing_produce_exactly_one_task_each(db_dsn: str) -> None:
    """40 definitions due at once; two ticks on two pools run concurrently, three rounds:
    together they plan each due definition once (no row is planned by both: the due rows
    are locked SKIP LOCKED) and admit each slot once."""
    clock = FakeClock(utc("2026-06-01T00:00:00Z"))
    async with Database.open(db_dsn) as a, Database.open(db_dsn) as b:
        me = await owner(a, clock)
        for index in range(40):
            await confirmed(a, clock, {"overrun": "allow", "trigger": {"type": "interval",
                                                                       "every": 60}},
                            definition_id=f"d{index}", principal=me)
        for minute in (1, 2, 3):
            clock.set_wall(utc(f"2026-06-01T00:0{minute}:00Z"))
            reports = []
            async with anyio.create_task_group() as tg:
                for db in (a, b):
                    tg.start_soon(_collect, reports, db, clock)
            assert sum(r.admitted for r in reports) == 40
            assert sum(r.planned for r in reports) == 40
        counts = await a.pool.fetchrow(
            "SELECT count(*) AS tasks, count(DISTINCT idempotency_key) AS keys FROM tasks")
        assert tuple(counts) == (120, 120)


async def _collect(reports: list[object], db: Database, clock: FakeClock) -> None:
    reports.append(await tick(db, clock, actor=f"sup-{id(db)}", batch_size=7))


async def test_planned_twice_admitted_once(db_dsn: str) -> None:
    """Both replicas plan the same due definitions; concurrent admissions claim each once."""
    clock = FakeClock(utc("2026-06-01T00:00:00Z"))
    async with Database.open(db_dsn) as a, Database.open(db_dsn) as b:
        me = await owner(a, clock)
        for index in range(20):
            await confirmed(a, clock, {"trigger": {"type": "interval", "every": 60}},
                            definition_id=f"d{index}", principal=me)
        clock.set_wall(utc("2026-06-01T00:01:00Z"))
        plans = [await plan_tick((await read_due(db, clock.now(), 100, origin="user"))[0], clock.now(),
                                 Registry()) for db in (a, b)]
        results = []

        async def go(db: Database, plan: list[object]) -> None:
            results.append(await admit(db, plan, clock.now(), f"r{id(db)}"))  # type: ignore[arg-type]

        async with anyio.create_task_group() as tg:
            tg.start_soon(go, a, plans[0])
            tg.start_soon(go, b, plans[1])
        assert sum(r.admitted for r in results) == 20
        assert sum(r.lost_race for r in results) == 20
        assert await a.pool.fetchval("SELECT count(*) FROM tasks") == 20


async def test_ends_after_n_occurrences_counts_skipped_ones(db: Database) -> None:
    """ends.after = 3 with one slot missed: two tasks, one range, then completed."""
    clock = FakeClock(utc("2026-06-01T00:00:30Z"))
    await confirmed(db, clock, {"trigger": {"type": "interval", "every": 120}, "overrun": "allow",
                                "ends": {"after": 3}})
    clock.set_wall(utc("2026-06-01T00:02:00Z"))
    await tick(db, clock)
    clock.set_wall(utc("2026-06-01T00:06:00Z"))
    await tick(db, clock)
    row = await definition(db)
    assert (row["status"], row["slots_seen"], row["next_due_at"]) == ("completed", 3, None)
    assert [o["slot"] for o in await occurrences(db)] == ["2026-06-01T00:02:00Z",
                                                        "2026-06-01T00:06:00Z"]
    clock.set_wall(utc("2026-06-01T00:30:00Z"))
    assert (await tick(db, clock)).planned == 0


async def test_at_trigger_fires_once_then_completes(db: Database) -> None:
    """A one-shot at 2026-12-02T20:00 Europe/Paris fires at 19:00Z and completes."""
    clock = FakeClock(utc("2026-12-01T00:00:00Z"))
    await confirmed(db, clock, {"trigger": {"type": "at", "at": "2026-12-02T20:00",
                                            "zone": "Europe/Paris"}})
    clock.set_wall(utc("2026-12-02T19:00:00Z"))
    await tick(db, clock)
    assert decisions(await occurrences(db)) == [("2026-12-02T19:00:00Z", "admitted")]
    assert (await definition(db))["status"] == "completed"


async def test_berlin_0230_across_both_2026_changes(db: Database) -> None:
    """Through the whole path: the spring 02:30 is recorded skipped_dst_gap; the autumn
    02:30 is admitted once, at 02:30 CEST."""
    clock = FakeClock(utc("2026-03-27T00:00:00Z"))
    await confirmed(db, clock, {"trigger": {"type": "cron", "expr": "30 2 * * *",
                                            "zone": "Europe/Berlin"}, "overrun": "allow"})
    instant = utc("2026-03-27T00:00:00Z")
    while instant < utc("2026-03-31T00:00:00Z"):
        instant += timedelta(minutes=30)
        clock.set_wall(instant)
        await tick(db, clock)
    assert [(o["slot"], o["decision"], o["scheduled_for"]) for o in await occurrences(db)] == [
        ("2026-03-27T02:30[Europe/Berlin]", "admitted", utc("2026-03-27T01:30Z")),
        ("2026-03-28T02:30[Europe/Berlin]", "admitted", utc("2026-03-28T01:30Z")),
        ("2026-03-29T02:30[Europe/Berlin]", "skipped_dst_gap", utc("2026-03-29T01:00Z")),
        ("2026-03-30T02:30[Europe/Berlin]", "admitted", utc("2026-03-30T00:30Z")),
    ]
    await db.pool.execute("DELETE FROM tasks; DELETE FROM occurrences")
    instant = utc("2026-10-24T12:00:00Z")
    while instant < utc("2026-10-26T12:00:00Z"):
        instant += timedelta(minutes=30)
        clock.set_wall(instant)
        await tick(db, clock)
    rows = [o for o in await occurrences(db) if o["decision"] == "admitted"]
    assert [(o["slot"], o["scheduled_for"]) for o in rows] == [
        ("2026-10-25T02:30[Europe/Berlin]", utc("2026-10-25T00:30Z")),
        ("2026-10-26T02:30[Europe/Berlin]", utc("2026-10-26T01:30Z")),
    ]


async def test_new_york_hourly_across_fall_back(db: Database) -> None:
    """Six hourly fires from 04:00Z to 09:00Z on 2026-11-01, both 01:00s with distinct keys."""
    clock = FakeClock(utc("2026-11-01T03:30:00Z"))
    await confirmed(db, clock, {"trigger": {"type": "cron", "expr": "0 * * * *",
                                            "zone": "America/New_York"}, "overrun": "allow"})
    instant = utc("2026-11-01T03:30:00Z")
    while instant < utc("2026-11-01T09:30:00Z"):
        instant += timedelta(minutes=15)
        clock.set_wall(instant)
        await tick(db, clock)
    rows = await occurrences(db)
    assert [(o["scheduled_for"], o["slot"]) for o in rows] == [
        (utc("2026-11-01T04:00Z"), "2026-11-01T00:00[America/New_York]"),
        (utc("2026-11-01T05:00Z"), "2026-11-01T01:00[America/New_York]"),
        (utc("2026-11-01T06:00Z"), "2026-11-01T01:00[America/New_York]#fold1"),
        (utc("2026-11-01T07:00Z"), "2026-11-01T02:00[America/New_York]"),
        (utc("2026-11-01T08:00Z"), "2026-11-01T03:00[America/New_York]"),
        (utc("2026-11-01T09:00Z"), "2026-11-01T04:00[America/New_York]"),
    ]
    assert {o["fold"] for o in rows} == {0, 1}


async def test_lord_howe_thirty_minute_fold_fires_once(db: Database) -> None:
    """30 1 * * * in Australia/Lord_Howe on 2026-04-05 fires at 01:30 +11:00 only."""
    clock = FakeClock(utc("2026-04-04T12:00:00Z"))
    await confirmed(db, clock, {"trigger": {"type": "cron", "expr": "30 1 * * *",
                                            "zone": "Australia/Lord_Howe"}, "overrun": "allow"})
    instant = utc("2026-04-04T12:00:00Z")
    while instant < utc("2026-04-05T18:00:00Z"):
        instant += timedelta(minutes=10)
        clock.set_wall(instant)
        await tick(db, clock)
    assert [o["scheduled_for"] for o in await occurrences(db)] == [
        utc("2026-04-04T14:30Z"), utc("2026-04-05T15:00Z")]


async def test_review_never_decides_another_tenants_occurrence(db: Database) -> None:
    """A user (or the operator) of globex holding a definition of the same id cannot
    approve or skip acme's occurrence by naming acme's binding: not found, and acme's
    occurrence still waits for review."""
    from watchkeeper.runtime import NotFound
    from watchkeeper.runtime.usecases import OPERATOR

    clock = FakeClock(utc("2026-06-01T00:30:00Z"))
    spec = {**HOURLY, "lateness": {"policy": "review_late"}}
    await confirmed(db, clock, spec, definition_id="rv")
    bob = await confirmed(db, clock, spec, definition_id="rv",
                          principal=await owner(db, clock, tenant="globex", user="bob"))
    clock.set_wall(utc("2026-06-01T02:15:00Z"))
    await tick(db, clock)
    slot = "2026-06-01T02:00:00Z"
    for actor, tenant in ((bob, "globex"), (OPERATOR, "globex")):
        for approve in (True, False):
            with pytest.raises(NotFound):
                await review(db, clock, actor, "acme", "rv", slot, approve=approve,
                             binding_id="owner", definition_tenant_id=tenant)
    acme = [o for o in await occurrences(db, "rv") if o["tenant_id"] == "acme"]
    assert [o["decision"] for o in acme] == ["review_required"]


PAYLOAD_SPEC = {"trigger": {"type": "cron", "expr": "0 9 * * *", "zone": "Europe/Paris"},
                "instructions": "Review the holdings; say only what changed.",
                "agent": {"name": "digest", "params": {"depth": 2, "tags": ["a", "b"]}},
                "audiences": ["research"], "overrun": "allow",
                "delivery": [{"channel": "file", "destination": "n.jsonl"},
                             {"channel": "log", "destination": ""}]}


async def test_every_task_carries_its_revisions_payload(db: Database) -> None:
    """A scheduled task and a manual one of the same revision carry the spec's agent,
    instructions, params (plus the runtime's schedule stamp), deliveries and audiences,
    copied in SQL from the revision's payload; a spec with none has the defaults."""
    clock = FakeClock(utc("2026-06-01T06:00:00Z"))
    me = await confirmed(db, clock, PAYLOAD_SPEC)
    await confirmed(db, clock, {"trigger": {"type": "interval", "every": 3600}},
                    definition_id="plain", principal=me)
    clock.set_wall(utc("2026-06-01T07:00:01Z"))
    assert (await tick(db, clock)).admitted == 2
    await trigger_now(db, clock, me, "acme", "d1")
    rows = await db.pool.fetch(
        "SELECT definition_id, kind, slot, agent, message, params, delivery, audiences FROM tasks "
        "ORDER BY definition_id, kind DESC")
    spec = parse_spec({"version": 1, **PAYLOAD_SPEC})
    for row in rows[:2]:
        assert (row["agent"], row["message"], row["audiences"]) == (
            "digest", spec.instructions, ["research"])
        assert row["delivery"] == [d.model_dump(mode="json") for d in spec.delivery]
        assert row["params"] == {"depth": 2, "tags": ["a", "b"], "schedule": {
            "definition_id": "d1", "revision": 1, "slot": row["slot"], "kind": row["kind"],
            "scheduled_for": row["params"]["schedule"]["scheduled_for"]}}
    assert [r["kind"] for r in rows[:2]] == ["scheduled", "manual"]
    assert rows[0]["params"]["schedule"]["scheduled_for"] == "2026-06-01T07:00:00Z"
    plain = rows[2]
    assert (plain["agent"], plain["message"], plain["audiences"]) == ("digest", "", None)
    assert plain["delivery"] == [{"channel": "log", "destination": ""}]
    assert set(plain["params"]) == {"schedule"}


async def test_a_revision_without_a_compiled_spec_is_compiled_at_its_tick(db: Database) -> None:
    """A revision an older release wrote (no compiled spec, no payload) is admitted all the
    same: the tick compiles its stored spec once and stores the result."""
    clock = FakeClock(utc("2026-06-01T06:00:00Z"))
    await confirmed(db, clock, PAYLOAD_SPEC)
    expected = await db.pool.fetchrow("SELECT compiled, payload FROM definition_revisions")
    await db.pool.execute("UPDATE definition_revisions SET compiled = NULL, payload = NULL")
    clock.set_wall(utc("2026-06-01T07:00:01Z"))
    assert (await tick(db, clock)).admitted == 1
    stored = await db.pool.fetchrow("SELECT compiled, payload FROM definition_revisions")
    assert (stored["compiled"], stored["payload"]) == (expected["compiled"], expected["payload"])
    task = await db.pool.fetchrow("SELECT message, audiences FROM tasks")
    assert tuple(task) == (PAYLOAD_SPEC["instructions"], ["research"])


async def test_the_admission_lanes_are_shared_by_the_live_supervisors(db: Database) -> None:
    """A tick runs its lanes after the first batch: all of them with no other supervisor
    live, its share (lanes // live, at least one) with several, and a stopped or
    long-silent supervisor does not count. Every due definition is admitted each way."""
    clock = FakeClock(utc("2026-06-01T00:00:00Z"))
    me = await owner(db, clock)
    for i in range(12):
        await confirmed(db, clock, {"trigger": {"type": "interval", "every": 60},
                                    "overrun": "allow"}, definition_id=f"d{i}", principal=me)

    async def beat(name: str, at: str, status: str = "running") -> None:
        await db.execute("supervisor_upsert", name, "host", 1, utc(at), status, None,
                         {"heartbeat_seconds": 5})

    lanes = []
    for minute, beats in [
        (1, []),  # nobody: this tick's own lanes
        (2, [("a", "2026-06-01T00:02:00Z"), ("b", "2026-06-01T00:01:58Z")]),  # two live
        (3, [("b", "2026-06-01T00:02:58Z", "stopped"),  # b stopped, a silent for 60 s
             ("c", "2026-06-01T00:03:00Z")]),
        (4, [("a", "2026-06-01T00:04:00Z"), ("b", "2026-06-01T00:04:00Z"),
             ("c", "2026-06-01T00:03:59Z")]),  # three live: still one lane each
    ]:
        for beat_args in beats:
            await beat(*beat_args)
        clock.set_wall(utc(f"2026-06-01T00:0{minute}:00Z"))
        report = await tick(db, clock, batch_size=3, lanes=4)
        assert report.admitted == 12
        lanes.append(report.lanes)
    assert lanes == [4, 2, 4, 1]


@pytest.mark.parametrize("other_status", ["draining", "clock_uncertain"])
async def test_a_supervisor_that_does_not_admit_takes_no_share_of_the_lanes(
        db: Database, other_status: str) -> None:
    """A draining or clock-uncertain supervisor admits nothing: the running one keeps
    all its lanes (found by a review: a rolling deploy's drain halved them)."""
    clock = FakeClock(utc("2026-06-01T00:00:00Z"))
    me = await owner(db, clock)
    for i in range(12):
        await confirmed(db, clock, {"trigger": {"type": "interval", "every": 60},
                                    "overrun": "allow"}, definition_id=f"d{i}", principal=me)
    for name, status in (("me", "running"), ("other", other_status)):
        await db.execute("supervisor_upsert", name, "host", 1, utc("2026-06-01T00:01:00Z"),
                         status, None, {"heartbeat_seconds": 5})
    clock.set_wall(utc("2026-06-01T00:01:00Z"))
    report = await tick(db, clock, batch_size=3, lanes=4)
    assert report.admitted == 12
    assert report.lanes == 4
