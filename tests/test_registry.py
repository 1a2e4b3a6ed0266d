"""Operator-registered definitions: fan-out over bindings, re-registration replaces,
binding sets validated as a whole, and the ``run`` terminal."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from _helpers import confirmed, utc

from watchkeeper.runtime._errors import Conflict, NotFound
from watchkeeper.runtime.engine._clock import FakeClock
from watchkeeper.runtime.engine._registry import Registry, RunContext, ScheduleDef, register
from watchkeeper.runtime.engine._scheduler import tick
from watchkeeper.runtime.store._db import Database
from watchkeeper.runtime.usecases import OPERATOR, add_user, trigger_now
from watchkeeper.triggers import Binding, BindingSetError, SpecError

pytestmark = pytest.mark.anyio


def rank_check(**changes: Any) -> ScheduleDef:
    """The seed's weekly rank check, fanned out to two tenants."""
    fields: dict[str, Any] = dict(
        id="seo.weekly-rank-check", cron="0 9 * * 1", zone="Europe/London",
        jitter=timedelta(seconds=30), overrun="skip",
        bindings=[
            Binding(tenant_id="org_acme", binding_id="acme", owner_user_id="user_acme_owner",
                    agent="digest", message="Run this week's rank check."),
            Binding(tenant_id="org_globex", binding_id="globex",
                    owner_user_id="user_globex_owner", agent="digest",
                    message="Run this week's rank check."),
        ])
    fields.update(changes)
    return ScheduleDef(**fields)


async def owners(db: Database, clock: FakeClock) -> None:
    """The binding owners of the rank check: real users in their tenants."""
    await add_user(db, clock, "org_acme", "user_acme_owner")
    await add_user(db, clock, "org_globex", "user_globex_owner")


async def test_one_cadence_fans_out_to_every_binding(db: Database) -> None:
    """Monday 09:00 London: one occurrence and one task per (tenant, binding), each owned
    by its real user, each with its own deterministic jitter."""
    clock = FakeClock(utc("2026-11-27T00:00:00Z"))
    await owners(db, clock)
    assert await register(db, clock, rank_check()) == 1
    clock.set_wall(utc("2026-11-30T09:01:00Z"))
    report = await tick(db, clock)
    assert report.admitted == 2
    rows = await db.pool.fetch("SELECT tenant_id, binding_id, owner_user_id, slot, definition_tenant_id,"
                               " not_before - scheduled_for AS jitter FROM tasks ORDER BY tenant_id")
    assert [(r["tenant_id"], r["binding_id"], r["owner_user_id"], r["slot"]) for r in rows] == [
        ("org_acme", "acme", "user_acme_owner", "2026-11-30T09:00[Europe/London]"),
        ("org_globex", "globex", "user_globex_owner", "2026-11-30T09:00[Europe/London]"),
    ]
    assert {r["definition_tenant_id"] for r in rows} == {"_operator"}
    assert all(timedelta(0) <= r["jitter"] < timedelta(seconds=30) for r in rows)


async def test_registering_again_replaces_and_never_duplicates(db: Database) -> None:
    """Same definition: same revision, no fence change; changed cron: a new revision."""
    clock = FakeClock(utc("2026-11-27T00:00:00Z"))
    await owners(db, clock)
    assert await register(db, clock, rank_check()) == 1
    assert await register(db, clock, rank_check()) == 1
    assert await register(db, clock, rank_check(cron="0 10 * * 1")) == 2
    assert await db.pool.fetchval("SELECT count(*) FROM definitions") == 1
    row = await db.pool.fetchrow("SELECT fence, effective_revision FROM definitions")
    assert tuple(row) == (2, 2)


@pytest.mark.parametrize(
    ("changes", "field"),
    [({"every": timedelta(minutes=15)}, "cron"),
     ({"cron": None}, "cron"),
     ({"run": None, "bindings": None}, "bindings"),
     ({"zone": None}, "zone"),
     ({"zone": "EST"}, "zone"),
     ({"late_policy": "sometimes"}, "late_policy"),
     ({"cron": None, "every": timedelta(seconds=30)}, "every")],
)
def test_registration_errors_name_the_field(changes: dict[str, Any], field: str) -> None:
    """Both or neither cadence or terminal, a missing or refused zone, a bad lateness
    policy, an interval under 60 s: each named by the ScheduleDef field."""
    with pytest.raises(SpecError) as info:
        rank_check(**changes)
    assert info.value.field == field


def test_a_run_terminal_beside_bindings_is_refused() -> None:
    """Declaring both terminals is an error at registration."""
    async def sweep(ctx: RunContext) -> None:
        return None

    with pytest.raises(SpecError, match="exactly one terminal"):
        rank_check(run=sweep)


@pytest.mark.parametrize(
    "bad",
    [[{"tenant_id": "a", "binding_id": "x", "owner_user_id": "u"},
      {"tenant_id": "a", "binding_id": "x", "owner_user_id": "v"}],
     [{"tenant_id": "a", "binding_id": " ", "owner_user_id": "u"}],
     [{"tenant_id": "a", "binding_id": "x", "owner_user_id": "u", "params": {"schedule": 1}}]],
)
def test_static_binding_sets_are_validated_as_a_whole(bad: list[dict[str, Any]]) -> None:
    """Duplicate pairs, empty values and the reserved 'schedule' param are refused."""
    with pytest.raises(BindingSetError):
        rank_check(bindings=bad)


async def test_a_bad_resolved_set_claims_nothing(db: Database) -> None:
    """A resolver returning a duplicate pair fails the whole tick contribution: no
    occurrence, one bindings_invalid event, and the slot is not retried every tick."""
    clock = FakeClock(utc("2026-11-27T00:00:00Z"))

    async def resolver() -> list[dict[str, str]]:
        return [{"tenant_id": "org_acme", "binding_id": "acme", "owner_user_id": "u1"},
                {"tenant_id": "org_acme", "binding_id": "acme", "owner_user_id": "u2"},
                {"tenant_id": "org_globex", "binding_id": "globex", "owner_user_id": "u3"}]

    definition = rank_check(bindings=resolver)
    registry = Registry([definition])
    await register(db, clock, definition)
    clock.set_wall(utc("2026-11-30T09:01:00Z"))
    report = await tick(db, clock, registry)
    assert sum(report.decisions.values()) == 0
    assert await db.pool.fetchval("SELECT count(*) FROM occurrences") == 0
    kinds = await db.pool.fetch("SELECT kind, reason FROM schedule_events")
    assert [r["kind"] for r in kinds] == ["bindings_invalid"]
    assert "duplicate binding org_acme/acme (2 times)" in kinds[0]["reason"]
    clock.advance(60)
    assert (await tick(db, clock, registry)).planned == 0


async def test_a_process_without_the_resolver_leaves_the_definition_alone(db: Database) -> None:
    """A supervisor that lacks the host's resolver neither claims nor advances it."""
    clock = FakeClock(utc("2026-11-27T00:00:00Z"))

    async def resolver() -> list[Binding]:
        return []

    await register(db, clock, rank_check(bindings=resolver))
    clock.set_wall(utc("2026-11-30T09:01:00Z"))
    assert (await tick(db, clock)).planned == 0
    next_due = await db.pool.fetchval("SELECT next_due_at FROM definitions")
    assert next_due == utc("2026-11-30T09:00:00Z")


async def test_run_terminal_is_claimed_per_occurrence_and_executed(db: Database) -> None:
    """A 15-minute housekeeping run per tenant: no user, no agent, no task."""
    clock = FakeClock(utc("2026-06-01T00:05:00Z"))
    calls: list[RunContext] = []

    async def sweep(ctx: RunContext) -> None:
        calls.append(ctx)
        if ctx.tenant_id == "org_globex":
            raise RuntimeError("disk full")

    definition = ScheduleDef(id="mcp.session-cleanup", every=timedelta(minutes=15), run=sweep,
                             tenants=["org_acme", "org_globex"])
    registry = Registry([definition])
    await register(db, clock, definition)
    clock.set_wall(utc("2026-06-01T00:15:00Z"))
    await tick(db, clock, registry)
    assert sorted((c.tenant_id, c.slot) for c in calls) == [
        ("org_acme", "2026-06-01T00:15:00Z"), ("org_globex", "2026-06-01T00:15:00Z")]
    rows = await db.pool.fetch("SELECT tenant_id, decision, run_status, run_error FROM occurrences "
                               "ORDER BY tenant_id")
    assert [tuple(r) for r in rows] == [
        ("org_acme", "admitted", "ok", None),
        ("org_globex", "admitted", "failed", "RuntimeError: disk full")]
    assert await db.pool.fetchval("SELECT count(*) FROM tasks") == 0
    clock.advance(60)
    await tick(db, clock, registry)
    assert len(calls) == 2


async def test_a_run_claim_that_outlives_its_stale_after_is_marked_stale(db: Database) -> None:
    """A run claimed by a process that died is reconciled to stale after stale_claim_after."""
    clock = FakeClock(utc("2026-06-01T00:05:00Z"))

    async def sweep(ctx: RunContext) -> None:
        return None

    definition = ScheduleDef(id="sweep", every=timedelta(minutes=15), run=sweep,
                             stale_claim_after=timedelta(minutes=2))
    registry = Registry([definition])
    await register(db, clock, definition)
    clock.set_wall(utc("2026-06-01T00:15:00Z"))
    await tick(db, clock, registry, execute_runs=False)  # claimed, then the process "dies"
    clock.set_wall(utc("2026-06-01T00:17:30Z"))
    await tick(db, clock, registry)
    assert await db.pool.fetchval("SELECT run_status FROM occurrences") == "stale"


async def test_manual_trigger_reaches_one_binding(db: Database) -> None:
    """trigger-now on one (tenant, binding) of a registered definition claims only it."""
    clock = FakeClock(utc("2026-11-27T00:00:00Z"))
    await owners(db, clock)
    await register(db, clock, rank_check())
    result = await trigger_now(db, clock, OPERATOR, "_operator", "seo.weekly-rank-check",
                               binding=("org_globex", "globex"))
    assert result.decisions == {("org_globex", "globex"): "admitted"}
    with pytest.raises(Conflict, match="no binding"):
        await trigger_now(db, clock, OPERATOR, "_operator", "seo.weekly-rank-check",
                          binding=("org_acme", "globex"))


async def test_user_and_operator_ids_never_collide(db: Database) -> None:
    """An operator id that a user definition already uses is refused."""
    clock = FakeClock(utc("2026-11-27T00:00:00Z"))
    await confirmed(db, clock, {"trigger": {"type": "interval", "every": 3600}},
                    definition_id="seo.weekly-rank-check")
    with pytest.raises(Conflict, match="already a user definition id"):
        await register(db, clock, rank_check())


async def test_bindings_must_name_real_owner_users(db: Database) -> None:
    """A static binding with an unknown owner is refused at registration; a resolved one
    claims nothing and records why."""
    clock = FakeClock(utc("2026-11-27T00:00:00Z"))
    with pytest.raises(NotFound, match="users add org_acme user_acme_owner"):
        await register(db, clock, rank_check())
    await add_user(db, clock, "org_acme", "user_acme_owner")

    async def resolver() -> list[dict[str, str]]:
        return [{"tenant_id": "org_acme", "binding_id": "acme", "owner_user_id": "user_acme_owner"},
                {"tenant_id": "org_acme", "binding_id": "ghost", "owner_user_id": "nobody"}]

    definition = rank_check(bindings=resolver)
    await register(db, clock, definition)
    clock.set_wall(utc("2026-11-30T09:01:00Z"))
    await tick(db, clock, Registry([definition]))
    assert await db.pool.fetchval("SELECT count(*) FROM occurrences") == 0
    reason = await db.pool.fetchval("SELECT reason FROM schedule_events")
    assert reason == "owner user(s) org_acme/nobody do not exist"
