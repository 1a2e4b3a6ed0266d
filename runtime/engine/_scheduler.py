"""One tick: walk every due definition once, plan, admit in batches; then run the
claimed ``run``-terminal occurrences.

A tick only touches definitions whose stored ``next_due_at`` has come, so its cost
grows with due work, not with the number of definitions (DESIGN "Calendar triggers").
"""

from __future__ import annotations

import contextlib
import logging
from datetime import UTC, datetime

import anyio

from watchkeeper.triggers import tzdata_version

from ..store._db import Database, Pooler
from ._admission import STAGE_COLUMNS, RunUnit, TickReport, admit, admit_due
from ._clock import Clock
from ._fleet import LIVE_HEARTBEATS
from ._lanes import lanes as in_lanes
from ._registry import Registry, RunContext
from ._tick import FIRST_KEY, DueKey, plan_tick, read_due

__all__ = ["execute_run", "reconcile_stale_runs", "tick", "warm_tick"]

log = logging.getLogger("watchkeeper.scheduler")

FIRST_BATCH = 100
"""Definitions in a tick's first admission transaction: small, so the first tasks of a
due instant commit within milliseconds; later batches take ``batch_size``."""


async def tick(db: Database, clock: Clock, registry: Registry | None = None, *,
               actor: str = "tick", batch_size: int = 1000, execute_runs: bool = True,
               now: datetime | None = None, lanes: int = 2) -> TickReport:
    """Run one tick at ``now`` (default ``clock.now()``).

    Args:
        registry: operator definitions available in this process (resolvers and
            ``run`` callables); definitions it lacks are left to a process that has them.
        actor: recorded as ``decided_by`` (a supervisor id).
        batch_size: definitions per admission transaction (the first one takes at most
            :data:`FIRST_BATCH`, so the first tasks of a due instant commit at once).
        execute_runs: await claimed ``run`` callables before returning (the CLI's
            one-shot tick); the supervisor runs them in the background instead.
        lanes: admission transactions in flight at once, each on its own connection,
            once more is due than the first batch took: while PostgreSQL writes one
            batch this process plans the next. They split the due rows as replicas do
            (``SKIP LOCKED``), so no row is planned twice. The lanes are the fleet's:
            with several running supervisors (live heartbeats with status ``running``,
            :mod:`._fleet`; a draining one admits nothing) each runs
            ``lanes // running`` of them, at least one, so that two supervisors on one
            server do not write twice as many batches at once as one would (on a
            2-core machine that made two supervisors slower than one).

    Raises:
        DatabaseUnavailable: PostgreSQL is unreachable (the tick may be retried:
            every claim is keyed, so a retry admits nothing twice).
    """
    registry = registry or Registry()
    now = clock.now() if now is None else now
    total = TickReport()
    earliest = await db.fetchval("next_due")  # one index probe: is anything due at all?
    if earliest is None or earliest > now:
        total.idle_until = earliest  # the due phases would only plan their queries
    else:
        await _admit_phases(db, now, registry, actor, batch_size, lanes, total)
    await reconcile_stale_runs(db, clock)
    await db.execute("tasks_release_orphaned_holds")
    if execute_runs:
        for unit in total.runs:
            await execute_run(db, clock, registry, unit)
    return total


async def warm_tick(db: Database, connections: int = 3) -> None:
    """Prepare the statements of a due instant on ``connections`` pooled connections (the
    first batch and the lanes of :func:`tick`), so that a supervisor that has just
    started commits its first task at the due instant as fast as one that has been
    running: each connection parses and plans the lock, staging and admission
    statements in a transaction that is rolled back (nothing is written, no notice is
    sent). Behind a transaction pooler nothing is kept between transactions: nothing
    to do.

    Raises:
        DatabaseUnavailable: the server cannot be reached (warming is an optimisation:
            callers may ignore it).
    """
    if db.pooler is Pooler.TRANSACTION:
        return
    async with contextlib.AsyncExitStack() as stack:
        held = [await stack.enter_async_context(db.connection()) for _ in range(connections)]
        for conn in held:
            with contextlib.suppress(_RolledBack):
                async with conn.transaction():
                    await conn.fetchval("next_due")
                    await conn.execute("admission_planner")
                    await conn.fetch("definitions_due_lock", _NEVER, 1, *FIRST_KEY)
                    await conn.stage("wk_stage_admission", STAGE_COLUMNS, [])
                    await conn.fetchval("admission_write", tzdata_version(), _NEVER, "warm-up")
                    raise _RolledBack


class _RolledBack(Exception):
    """Ends :func:`warm_tick`'s transactions (rolled back)."""


_NEVER = datetime.min.replace(tzinfo=UTC)


async def _admit_phases(db: Database, now: datetime, registry: Registry, actor: str,
                        batch_size: int, lanes: int, total: TickReport) -> None:
    """Phase A (user-confirmed definitions, planned under their row locks, in lanes),
    then phase B (operator-registered ones: resolvers may do I/O), into ``total``."""
    report, after = await admit_due(db, now, min(batch_size, FIRST_BATCH), FIRST_KEY, actor,
                                    registry)
    total.merge(report)
    if after is not None:
        if lanes > 1:  # the lanes are the fleet's: each running supervisor runs its share
            fleet = await db.fetchval("supervisors_live_count", now, float(LIVE_HEARTBEATS))
            lanes = max(1, lanes // max(fleet, 1))
        total.lanes = max(lanes, 1)
        async with in_lanes() as tg:  # an outage reaches the loop as DatabaseUnavailable
            for _ in range(total.lanes):
                tg.start_soon(_lane, db, now, batch_size, after, actor, registry, total)
    position: DueKey | None = FIRST_KEY
    while position is not None:
        due, position = await read_due(db, now, batch_size, position)
        if due:
            plans = await plan_tick(due, now, registry)
            total.merge(await admit(db, plans, now, actor))


async def _lane(db: Database, now: datetime, batch_size: int, after: DueKey, actor: str,
                registry: Registry, total: TickReport) -> None:
    """Admit batch after batch of due user-confirmed definitions from ``after`` on, until
    none is left that another lane or replica does not hold."""
    position: DueKey | None = after
    while position is not None:
        report, position = await admit_due(db, now, batch_size, position, actor, registry)
        total.merge(report)


async def execute_run(db: Database, clock: Clock, registry: Registry, unit: RunUnit) -> bool:
    """Await a claimed ``run`` callable and record its outcome on the occurrence.

    Returns True on success. A failure is recorded (``run_status = failed``), logged
    and never retried: the next occurrence is the next chance.
    """
    definition = registry.get(unit.definition_id)
    error: str | None = None
    if definition is None or definition.run is None:
        error = "the run callable is not registered in this process"
    else:
        tenant = None if unit.binding_id == "*" else unit.tenant_id
        try:
            await definition.run(RunContext(unit.definition_id, tenant, unit.slot,
                                            unit.scheduled_for))
        except Exception as exc:  # noqa: BLE001 - a host callable's failure is data, not a crash
            log.exception("run %s %s failed", unit.definition_id, unit.slot)
            error = f"{type(exc).__name__}: {exc}"
    with anyio.CancelScope(shield=True):  # an outcome, once known, is recorded
        await db.execute("occurrence_run_finished", unit.tenant_id, unit.definition_id,
                         unit.binding_id, unit.slot, "failed" if error else "ok", clock.now(),
                         error)
    return error is None


async def reconcile_stale_runs(db: Database, clock: Clock) -> int:
    """Mark ``run`` occurrences whose claim outlived ``stale_claim_after`` as ``stale``."""
    rows = await db.fetch("occurrences_run_stale", clock.now())
    for row in rows:
        log.warning("run %s %s went stale (its process died or overran)", row["definition_id"],
                    row["slot"])
    return len(rows)
