"""A lost COMMIT acknowledgement, produced for real (DESIGN "Admission": "If COMMIT's
acknowledgement is lost, the outcome is unknown: recover by reading the durable receipt
by its key; never retry under a new identity").

Every test talks to a real PostgreSQL through :class:`tests._pgproxy.PgProxy`, which
forwards bytes and, when armed, breaks exactly one COMMIT: ``DROP_ACK`` lets the server
commit and closes the client connection before the reply; ``DROP_COMMIT`` closes it
without forwarding (the server rolls back); ``HOLD_COMMIT`` closes the client while the
COMMIT is still held back, to land later. What committed is then read from the real
database through a direct connection (the ``db`` fixture), never through the proxy.

The fake clock starts at 2026-06-01T00:00:00Z; the definition is an hourly interval
anchored there, confirmed at that instant, so its first slot is due at once.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from _pgproxy import Fault, PgProxy

from watchkeeper.runtime._errors import DatabaseUnavailable
from watchkeeper.runtime.engine._agents import AgentCatalog
from watchkeeper.runtime.engine._clock import FakeClock
from watchkeeper.runtime.engine._scheduler import tick
from watchkeeper.runtime.engine._worker import Worker
from watchkeeper.runtime.store._db import Database
from watchkeeper.runtime.usecases import UserPrincipal, add_user, authenticate, confirm, propose, trigger_now
from watchkeeper.triggers import parse_spec

pytestmark = pytest.mark.anyio

START = datetime(2026, 6, 1, tzinfo=UTC)  # the clock fixture's start
SLOT = "2026-06-01T00:00:00Z"  # the first (scheduled) slot of the hourly definition
KEY = f"hourly/owner/{SLOT}/scheduled"  # its task's idempotency key


async def confirmed_hourly(db: Database, clock: FakeClock, *, definition_id: str = "hourly",
                           principal: UserPrincipal | None = None) -> UserPrincipal:
    """acme/alice (new unless ``principal``) owns ``definition_id`` (interval PT1H from
    START), confirmed at START."""
    alice = principal or await authenticate(db, await add_user(db, clock, "acme", "alice"))
    spec = parse_spec({
        "version": 1,
        "trigger": {"type": "interval", "every": "PT1H", "anchor": "2026-06-01T00:00:00Z"},
        "title": "hourly digest",
    })
    proposal = await propose(db, clock, tenant_id="acme", definition_id=definition_id,
                             owner_user_id="alice", spec=spec, proposed_by="agent:test")
    await confirm(db, clock, alice, definition_id=definition_id, revision=proposal.revision,
                  spec_hash=proposal.spec_hash)
    return alice


def committed_through(proxy: PgProxy) -> tuple[int, int]:
    """(COMMITs the proxy saw, faults it injected)."""
    stats = proxy.statistics()
    return stats.commits, stats.faults


async def occurrences(db: Database) -> list[tuple[Any, ...]]:
    """Every occurrence of ``hourly``, read directly: (slot, kind, decision)."""
    rows = await db.pool.fetch(
        "SELECT slot, kind, decision FROM occurrences WHERE definition_id = 'hourly' "
        "ORDER BY slot, kind")
    return [tuple(r) for r in rows]


async def tasks(db: Database) -> list[tuple[Any, ...]]:
    """Every task of ``hourly``, read directly: (idempotency_key, status)."""
    rows = await db.pool.fetch(
        "SELECT idempotency_key, status FROM tasks WHERE definition_id = 'hourly' "
        "ORDER BY task_id")
    return [tuple(r) for r in rows]


async def schedule(db: Database) -> tuple[Any, ...]:
    """The definition's (cursor_at, slots_seen, next_due_at), read directly."""
    row = await db.pool.fetchrow(
        "SELECT cursor_at, slots_seen, next_due_at FROM definitions "
        "WHERE tenant_id = 'acme' AND definition_id = 'hourly'")
    assert row is not None
    return tuple(row)


# --------------------------------------------------------------------------- tick


async def test_tick_reads_back_a_committed_admission(
    db: Database, proxied_db: Database, proxy: PgProxy, clock: FakeClock
) -> None:
    """A tick whose COMMIT ack is lost after the server committed reports recovered=True
    and one admission; the database holds one admitted occurrence and one pending task
    for 2026-06-01T00:00:00Z, and a second tick admits nothing more."""
    await confirmed_hourly(db, clock)
    proxy.arm(Fault.DROP_ACK)

    report = await tick(proxied_db, clock)

    assert committed_through(proxy) == (1, 1)
    assert (report.recovered, report.planned, dict(report.decisions)) == (
        True, 1, {"admitted": 1})
    assert await occurrences(db) == [(SLOT, "scheduled", "admitted")]
    assert await tasks(db) == [(KEY, "pending")]
    assert await schedule(db) == (START, 1, START + timedelta(hours=1))

    clock.advance(30)
    again = await tick(db, clock)

    assert (again.recovered, again.planned, again.admitted) == (False, 0, 0)
    assert await occurrences(db) == [(SLOT, "scheduled", "admitted")]
    assert await tasks(db) == [(KEY, "pending")]


async def test_an_outage_in_an_admission_lane_is_an_outage_not_a_crash(
    db: Database, proxied_db: Database, proxy: PgProxy, clock: FakeClock
) -> None:
    """Five definitions due, two a batch: the first batch commits, then the server goes
    away as a lane's COMMIT is sent (dropped: rolled back). The tick raises
    DatabaseUnavailable itself, which a supervisor's loop retries (not an exception
    group, which would end the supervisor); once the server is back, the next tick
    admits every slot exactly once."""
    alice = await confirmed_hourly(db, clock)
    for n in range(4):
        await confirmed_hourly(db, clock, definition_id=f"hourly{n}", principal=alice)
    proxy.arm(Fault.DROP_COMMIT, after=1, then_down=True)

    with pytest.raises(DatabaseUnavailable):
        await tick(proxied_db, clock, batch_size=2)

    proxy.go_up()
    clock.advance(30)
    await tick(proxied_db, clock, batch_size=2)
    rows = await db.pool.fetch("SELECT definition_id, count(*) AS n FROM tasks GROUP BY 1 ORDER BY 1")
    assert [(r["definition_id"], r["n"]) for r in rows] == [
        ("hourly", 1), ("hourly0", 1), ("hourly1", 1), ("hourly2", 1), ("hourly3", 1)]


async def test_tick_whose_commit_never_arrived_is_redone_under_the_same_key(
    db: Database, proxied_db: Database, proxy: PgProxy, clock: FakeClock
) -> None:
    """A tick whose COMMIT never reached the server reports recovered=True and no
    decision; nothing is stored; the next tick admits 2026-06-01T00:00:00Z exactly once,
    under the same key."""
    await confirmed_hourly(db, clock)
    proxy.arm(Fault.DROP_COMMIT)

    report = await tick(proxied_db, clock)

    assert committed_through(proxy) == (1, 1)
    assert (report.recovered, report.planned, dict(report.decisions), report.runs) == (
        True, 1, {}, [])
    assert await occurrences(db) == []
    assert await tasks(db) == []
    assert await schedule(db) == (START - timedelta(microseconds=1), 0, START)

    clock.advance(30)
    again = await tick(db, clock)

    assert (again.recovered, again.planned, dict(again.decisions)) == (False, 1, {"admitted": 1})
    assert await occurrences(db) == [(SLOT, "scheduled", "admitted")]
    assert await tasks(db) == [(KEY, "pending")]
    assert await schedule(db) == (START, 1, START + timedelta(hours=1))


async def test_tick_report_matches_a_commit_still_in_flight(
    db: Database, proxied_db: Database, proxy: PgProxy, clock: FakeClock
) -> None:
    """When the ack is lost while COMMIT is still in flight (it lands after the read-back),
    the tick's recovered report admits exactly as many occurrences as the database holds."""
    await confirmed_hourly(db, clock)
    proxy.arm(Fault.HOLD_COMMIT)

    report = await tick(proxied_db, clock)
    await proxy.release_held()  # the in-flight COMMIT reaches the server only now

    stored = [row for row in await occurrences(db) if row[2] == "admitted"]
    assert (report.recovered, report.admitted) == (True, len(stored))


# ------------------------------------------------------------------ manual trigger


async def test_trigger_now_reads_back_a_committed_manual_occurrence(
    db: Database, proxied_db: Database, proxy: PgProxy, clock: FakeClock
) -> None:
    """trigger_now whose COMMIT ack is lost after the server committed answers slot
    2026-06-01T00:01:30Z, decision 'admitted', recovered=True; exactly one manual
    occurrence and one pending task exist for it, and the schedule's cursor is untouched."""
    alice = await confirmed_hourly(db, clock)
    clock.advance(90)
    before = await schedule(db)
    proxy.arm(Fault.DROP_ACK)

    result = await trigger_now(proxied_db, clock, alice, "acme", "hourly")

    assert committed_through(proxy) == (1, 1)
    assert (result.slot, result.decisions, result.recovered) == (
        "2026-06-01T00:01:30Z", {("acme", "owner"): "admitted"}, True)
    assert await occurrences(db) == [("2026-06-01T00:01:30Z", "manual", "admitted")]
    assert await tasks(db) == [("hourly/owner/2026-06-01T00:01:30Z/manual", "pending")]
    assert await schedule(db) == before


async def test_trigger_now_whose_commit_never_arrived_admits_nothing(
    db: Database, proxied_db: Database, proxy: PgProxy, clock: FakeClock
) -> None:
    """trigger_now whose COMMIT never reached the server answers slot
    2026-06-01T00:01:30Z, 'not admitted', recovered=True, and nothing is stored."""
    alice = await confirmed_hourly(db, clock)
    clock.advance(90)
    proxy.arm(Fault.DROP_COMMIT)

    result = await trigger_now(proxied_db, clock, alice, "acme", "hourly")

    assert committed_through(proxy) == (1, 1)
    assert (result.slot, result.decisions, result.recovered) == (
        "2026-06-01T00:01:30Z", {("acme", "owner"): "not admitted"}, True)
    assert await occurrences(db) == []
    assert await tasks(db) == []


async def test_trigger_now_answer_matches_a_commit_still_in_flight(
    db: Database, proxied_db: Database, proxy: PgProxy, clock: FakeClock
) -> None:
    """When the ack is lost while COMMIT is still in flight (it lands after the read-back),
    trigger_now's answer for 2026-06-01T00:01:30Z equals what the database finally holds."""
    alice = await confirmed_hourly(db, clock)
    clock.advance(90)
    proxy.arm(Fault.HOLD_COMMIT)

    result = await trigger_now(proxied_db, clock, alice, "acme", "hourly")
    await proxy.release_held()  # the in-flight COMMIT reaches the server only now

    stored = {(slot, kind): decision for slot, kind, decision in await occurrences(db)}
    final = stored.get(("2026-06-01T00:01:30Z", "manual"), "not admitted")
    assert (result.recovered, result.decisions) == (True, {("acme", "owner"): final})


# ------------------------------------------------------------------ report commit


async def admitted_and_claimed(db: Database, clock: FakeClock, tmp_path: Path) -> Any:
    """Admit the 00:00 slot and claim its task as worker w1 (token 1), directly."""
    await confirmed_hourly(db, clock)
    assert (await tick(db, clock)).admitted == 1
    task = await Worker(db, clock, AgentCatalog(), worker_id="w1",
                        artifact_root=tmp_path).claim()
    assert task is not None
    return task


async def finished(db: Database) -> tuple[Any, ...]:
    """(task statuses, run outcomes, report count, delivery rows), read directly."""
    return (
        [tuple(r) for r in await db.pool.fetch("SELECT status FROM tasks ORDER BY task_id")],
        [tuple(r) for r in await db.pool.fetch(
            "SELECT attempt, worker, outcome FROM runs ORDER BY run_id")],
        await db.pool.fetchval("SELECT count(*) FROM reports"),
        [tuple(r) for r in await db.pool.fetch(
            "SELECT channel, destination, status FROM deliveries ORDER BY delivery_id")],
    )


@pytest.mark.parametrize("fault", [Fault.DROP_ACK, Fault.DROP_COMMIT])
async def test_report_commit_with_a_lost_ack_completes_once(
    db: Database, proxied_db: Database, proxy: PgProxy, clock: FakeClock, tmp_path: Path,
    fault: Fault,
) -> None:
    """A worker whose report-commit ack is lost (committed or not) ends 'completed' with
    exactly one report, task 'completed', run 'succeeded' and one pending log delivery."""
    task = await admitted_and_claimed(db, clock, tmp_path)
    worker = Worker(proxied_db, clock, AgentCatalog(), worker_id="w1", artifact_root=tmp_path)
    proxy.arm(fault)  # the report commit is the only COMMIT of execute()

    outcome = await worker.execute(task)

    commits = 1 if fault is Fault.DROP_ACK else 2  # DROP_COMMIT: the receipt is rewritten
    assert committed_through(proxy) == (commits, 1)
    assert (outcome.status, outcome.attempt) == ("completed", 1)
    assert await finished(db) == (
        [("completed",)], [(1, "w1", "succeeded")], 1, [("log", "", "pending")])
