"""Tick, phase 2: one short, set-based admission transaction per batch of plans.

In one transaction (no network I/O inside): hold the planned definitions' row locks
(``SKIP LOCKED``: another replica's rows are left to it) — taken by the read itself
for user-confirmed definitions (:func:`admit_due`: they are planned inside the
transaction), or taken now and rechecked for plans computed outside it (:func:`admit`:
a plan whose fence changed is discarded and recorded ``fenced_out``) — read overrun
state (only for a definition with a task still going) and budget state, decide each
candidate with the pure :func:`triggers.decide_admission`, then one statement
(``admission_write``) claims the occurrences (``INSERT ... ON CONFLICT DO NOTHING`` on
the key: the primary key is the at-most-once mechanism), inserts the tasks of the
claimed admissions and advances each definition's cursor and ``next_due_at``; budgets,
cancellations and ranges follow only when there are any.

If the COMMIT acknowledgement is lost, the outcome is read back by key
(:func:`_recover`); nothing is retried under a new identity.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from watchkeeper.triggers import (
    ActiveTask,
    AdmissionVerdict,
    Binding,
    BudgetState,
    CompiledSpec,
    Decision,
    EventKind,
    budget_period,
    decide_admission,
    load_zone,
    tzdata_version,
)

from .._errors import CommitOutcomeUnknown
from ..store._db import Connection, Database, JsonText
from ._gc import gc_paused
from ._quick import QuickRow, quick_row
from ._registry import Registry
from ._tick import (
    Candidate,
    DueDefinition,
    DueKey,
    Owner,
    Plan,
    delivery_json,
    due_definition,
    epoch_us,
    lock_due,
    plan_tick,
    schedule_stamp,
    trusted_schedule,
    wall_us,
)

__all__ = ["NOT_READ", "RunUnit", "TickReport", "active_tasks", "admit", "admit_due", "apply_plans",
           "budget_states", "insert_tasks", "task_row"]

log = logging.getLogger("watchkeeper.admission")


@dataclass(frozen=True, slots=True)
class RunUnit:
    """A claimed occurrence of a ``run`` terminal, to execute after the commit."""

    definition_id: str
    tenant_id: str
    binding_id: str
    slot: str
    scheduled_for: datetime


NOT_READ = object()
""":attr:`TickReport.idle_until` of a tick that had work to plan."""


@dataclass
class TickReport:
    """What one tick did (a frozen-in-spirit statistics record for tests and logs).

    Attributes:
        planned: definitions planned.
        decisions: count per occurrence decision claimed in this tick.
        fenced_out: plans discarded because the fence changed.
        lost_race: plans another replica held or had already applied.
        ranges: superseded ranges recorded.
        runs: ``run``-terminal occurrences claimed, to execute.
        recovered: the COMMIT acknowledgement was lost and the outcome was read back.
        idle_until: when the tick found nothing due, the earliest ``next_due_at`` it read
            then (``None``: nothing scheduled); unset (:data:`NOT_READ`) when it planned.
        lanes: the admission lanes the tick ran after its first batch (0: the first
            batch took everything due); its share of the fleet's lanes.
    """

    planned: int = 0
    decisions: Counter[str] = field(default_factory=Counter)
    fenced_out: int = 0
    lost_race: int = 0
    ranges: int = 0
    runs: list[RunUnit] = field(default_factory=list)
    recovered: bool = False
    idle_until: datetime | None | object = field(default_factory=lambda: NOT_READ)
    lanes: int = 0

    @property
    def admitted(self) -> int:
        """Occurrences admitted in this tick."""
        return self.decisions[Decision.ADMITTED.value]

    def merge(self, other: TickReport) -> None:
        """Add another batch's figures to this one."""
        self.planned += other.planned
        self.decisions.update(other.decisions)
        self.fenced_out += other.fenced_out
        self.lost_race += other.lost_race
        self.ranges += other.ranges
        self.runs.extend(other.runs)
        self.recovered = self.recovered or other.recovered


async def admit(db: Database, plans: Sequence[Plan], now: datetime, actor: str, *,
                wait: bool = False) -> TickReport:
    """Lock the planned definitions, recheck the fence and cursor each plan was computed
    under, and apply the plans that still hold, in one transaction; return what happened.

    Args:
        wait: wait for row locks instead of skipping rows another replica holds
            (a manual trigger waits; a tick skips).

    Raises:
        DatabaseUnavailable: the connection failed before COMMIT (nothing committed).
    """
    report = TickReport(planned=len(plans))
    if not plans:
        return report
    writes: list[Plan] = []
    try:
        async with db.transaction() as tx:
            await tx.execute("admission_planner")
            kept, fenced = await _lock(tx, plans, report, wait)
            writes = kept
            await apply_plans(tx, kept, fenced, now, actor, report)
    except CommitOutcomeUnknown as lost:
        log.warning("COMMIT acknowledgement lost for a tick batch; settling, then reading back")
        await db.settle(lost)
        return await _recover(db, writes, report, actor, now)
    return report


async def admit_due(db: Database, now: datetime, limit: int, after: DueKey, actor: str,
                    registry: Registry) -> tuple[TickReport, DueKey | None]:
    """Phase A of a tick: in one transaction, lock up to ``limit`` due user-confirmed
    definitions after ``after`` (:func:`lock_due`), plan them under those locks and apply
    the plans; return what happened and the keyset position to continue from (``None``
    after the last page).

    Raises:
        DatabaseUnavailable: the connection failed before COMMIT (nothing committed).
    """
    with gc_paused():  # engine/_gc.py: the batch's objects die by reference counting
        return await _admit_due(db, now, limit, after, actor, registry)


async def _admit_due(db: Database, now: datetime, limit: int, after: DueKey, actor: str,
                     registry: Registry) -> tuple[TickReport, DueKey | None]:
    report = TickReport()
    plans: list[Plan] = []
    quick: list[QuickRow] = []
    position: DueKey | None = None
    try:
        async with db.transaction() as tx:
            await tx.execute("admission_planner")
            rows, compiled, position = await lock_due(tx, now, limit, after)
            quick, due = split_quick(rows, compiled, now)
            plans = await plan_tick(due, now, registry)
            report.planned = len(rows)
            await apply_plans(tx, plans, (), now, actor, report, quick)
    except CommitOutcomeUnknown as lost:
        log.warning("COMMIT acknowledgement lost for a tick batch; settling, then reading back")
        await db.settle(lost)
        keys = [key for _, key in quick]
        return await _recover(db, plans, report, actor, now, keys), position
    return report, position


def split_quick(rows: Sequence[Any], compiled: dict[str, CompiledSpec], now: datetime
                ) -> tuple[list[QuickRow], list[DueDefinition]]:
    """The locked rows in the common case, staged (:mod:`._quick`); the others as due
    definitions for the general planning."""
    quick: list[QuickRow] = []
    due: list[DueDefinition] = []
    for row in rows:
        spec = compiled[row["spec_hash"]]
        staged = quick_row(row, spec, now, len(quick))
        if staged is not None:
            quick.append(staged)
        else:
            due.append(due_definition(row, spec))
    return quick, due


async def apply_plans(tx: Connection, kept: Sequence[Plan], fenced: Sequence[Plan],
                      now: datetime, actor: str, report: TickReport,
                      quick: Sequence[QuickRow] = ()) -> None:
    """Decide and write ``kept`` (plans whose definitions ``tx`` holds locked, under the
    fence and cursor they were computed with) with the ``quick`` rows staged already
    (their ordinals first), and record ``fenced`` as fenced out."""
    kept = await _require_real_owners(tx, kept)
    verdicts = await _decide(tx, kept)
    claimed = await _write(tx, kept, verdicts, now, actor, quick)
    await _after_claims(tx, claimed, verdicts, now, report, len(quick))
    await _record_events(tx, kept, fenced, now, actor, report)


async def _lock(tx: Connection, plans: Sequence[Plan], report: TickReport,
                wait: bool) -> tuple[list[Plan], list[Plan]]:
    rows = await tx.fetch("definitions_lock_batch_wait" if wait else "definitions_lock_batch",
                          [p.due.tenant_id for p in plans], [p.due.definition_id for p in plans])
    locked = {(r["tenant_id"], r["definition_id"]): r for r in rows}
    kept, fenced = [], []
    for plan in plans:
        row = locked.get((plan.due.tenant_id, plan.due.definition_id))
        if row is None:
            report.lost_race += 1
        elif row["fence"] != plan.due.fence or (row["status"] != "active" and not plan.manual):
            fenced.append(plan)
            report.fenced_out += 1
        elif row["cursor_at"] != plan.due.cursor_at and not plan.manual:
            report.lost_race += 1
        else:
            kept.append(plan)
    return kept, fenced


_Key = tuple[str, str, str]


async def _require_real_owners(tx: Connection, plans: Sequence[Plan]) -> Sequence[Plan]:
    """Operator bindings must name real users (no synthetic actor, seed 001): a plan
    with an unknown owner claims nothing and records why."""
    wanted = {(c.tenant_id, c.binding.owner_user_id) for p in plans if p.due.origin == "operator"
              for c in p.candidates if isinstance(c.binding, Binding)}
    if not wanted:
        return plans
    pairs = sorted(wanted)
    rows = await tx.fetch("users_existing", [t for t, _ in pairs], [u for _, u in pairs])
    missing = wanted - {(r["tenant_id"], r["user_id"]) for r in rows}
    if not missing:
        return plans
    out = []
    for plan in plans:
        unknown = sorted({(c.tenant_id, c.binding.owner_user_id) for c in plan.candidates
                          if isinstance(c.binding, Binding)} & missing)
        if unknown:
            names = ", ".join(f"{t}/{u}" for t, u in unknown)
            plan = plan._replace(candidates=(), bindings_error=f"owner user(s) {names} do not exist")
        out.append(plan)
    return out


Verdicts = list[tuple[Plan, Candidate, AdmissionVerdict, Any]]
"""Each candidate with its plan, final verdict and budget period (or ``None``), in plan
order: the order of the rows of ``admission_write``."""


async def _decide(tx: Connection, plans: Sequence[Plan]) -> Verdicts:
    """Final verdict per candidate: lateness, then overrun (the active tasks are read only
    for a definition that may have one), then the task budget."""
    wanted = [(p, c) for p in plans for c in p.candidates
              if c.lateness.decision is Decision.ADMITTED]
    active = await active_tasks(tx, [(p, c) for p, c in wanted if p.due.busy is not False])
    budgets, periods = await budget_states(tx, wanted)
    verdicts: Verdicts = []
    for plan, cand in plans_candidates(plans):
        key = (cand.tenant_id, plan.due.definition_id, cand.binding_id)
        verdict = decide_admission(cand.lateness, plan.due.compiled.overrun,
                                   active.get(key, _NONE), budgets.get(key),
                                   bypass_overrun=plan.manual)
        verdicts.append((plan, cand, verdict, periods.get(key)))
    return verdicts


_NONE: list[ActiveTask] = []


def plans_candidates(plans: Sequence[Plan]) -> list[tuple[Plan, Candidate]]:
    """Every (plan, candidate) pair, in plan order."""
    return [(p, c) for p in plans for c in p.candidates]


async def active_tasks(tx: Connection, wanted: list[tuple[Plan, Candidate]]) -> dict[_Key, list[ActiveTask]]:
    """The tasks that have not ended of each wanted (tenant, definition, binding), share-
    locked so none can end (and miss releasing one held behind it) meanwhile."""
    if not wanted:
        return {}
    rows = await tx.fetch("tasks_active_for", [c.tenant_id for _, c in wanted],
                          [p.due.definition_id for p, _ in wanted], [c.binding_id for _, c in wanted])
    active: dict[_Key, list[ActiveTask]] = {}
    for r in rows:
        key = (r["tenant_id"], r["definition_id"], r["binding_id"])
        active.setdefault(key, []).append(ActiveTask(r["task_id"], r["status"]))
    return active


async def budget_states(tx: Connection, wanted: list[tuple[Plan, Candidate]]
                   ) -> tuple[dict[_Key, BudgetState], dict[_Key, tuple[datetime, datetime, int]]]:
    """The task budget of each wanted candidate whose spec has one, and the accounting
    period (start, end, limit) its admission would be charged to."""
    periods: dict[_Key, tuple[datetime, datetime, int]] = {}
    for plan, cand in wanted:
        compiled = plan.due.compiled
        if compiled.task_limit is None:
            continue
        zone = load_zone(compiled.zone)
        start, end = budget_period(cand.slot.scheduled_for, compiled.period, zone)
        periods[(cand.tenant_id, plan.due.definition_id, cand.binding_id)] = (
            start, end, compiled.task_limit)
    if not periods:
        return {}, periods
    keys = list(periods)
    rows = await tx.fetch("budget_for", [k[0] for k in keys], [k[1] for k in keys],
                          [k[2] for k in keys], [periods[k][0] for k in keys])
    found = {(r["tenant_id"], r["definition_id"], r["binding_id"]): r for r in rows}
    budgets = {}
    for key, (_, _, limit) in periods.items():
        row = found.get(key)
        budgets[key] = BudgetState(row["task_limit"], row["used"]) if row else BudgetState(limit, 0)
    return budgets, periods


async def _write(tx: Connection, plans: Sequence[Plan], verdicts: Verdicts, now: datetime,
                 actor: str, quick: Sequence[QuickRow]) -> list[int]:
    """Stage the batch (:data:`STAGE_COLUMNS`: the quick rows, then the plans') and run
    ``admission_write``: claim, insert tasks, advance; the ordinals of the claimed
    occurrences (quick rows first, then indexes into ``verdicts`` after them)."""
    rows = [staged for staged, _ in quick]
    rows += _stage_rows(plans, verdicts, now, len(quick))
    if not rows:
        return []
    await tx.stage("wk_stage_admission", STAGE_COLUMNS, rows)
    return list(await tx.fetchval("admission_write", tzdata_version(), now, actor))


def _stage_rows(plans: Sequence[Plan], verdicts: Verdicts, now: datetime,
                offset: int = 0) -> list[tuple[Any, ...]]:
    """The staged rows of ``plans``, their ordinals ``offset`` + index into ``verdicts``."""
    rows: list[tuple[Any, ...]] = []
    index = 0
    for plan in plans:
        advance = _NO_ADVANCE if plan.manual else (
            epoch_us(plan.new_cursor), plan.due.slots_seen + plan.window.count,
            None if plan.failure else epoch_us(plan.next_due_at),
            "failed" if plan.failure else "completed" if plan.window.ended else "active")
        if not plan.candidates:
            if not plan.manual:
                rows.append((None, plan.due.tenant_id, plan.due.definition_id, *_NO_CANDIDATE,
                             *advance))
            continue
        for cand in plan.candidates:
            _, _, verdict, _ = verdicts[index]
            rows.append((offset + index, *_candidate_columns(plan, cand, verdict, now),
                         *advance))
            advance = _NO_ADVANCE
            index += 1
    return rows


STAGE_COLUMNS = (
    "n", "tenant_id", "definition_id", "binding_id", "slot", "kind", "definition_tenant_id",
    "revision", "scheduled_for_us", "not_before_us", "expires_at_us", "zone", "local_wall_us",
    "fold", "decision", "reason", "late", "lateness_seconds", "run_status", "run_deadline_us",
    "task_status", "owner_user_id", "held_behind", "late_policy", "deadline_seconds",
    "max_attempts", "params", "payload", "cursor_us", "slots_seen", "next_due_us", "status",
)
"""The columns of ``wk_stage_admission``, staged for ``admission_write`` (instants as
:func:`~._tick.epoch_us`, the wall time as :func:`~._tick.wall_us`)."""
_NO_ADVANCE = (None, None, None, None)
_ADMITTED = Decision.ADMITTED.value
_NO_CANDIDATE = (None,) * 25


def _candidate_columns(plan: Plan, cand: Candidate, verdict: AdmissionVerdict,
                       now: datetime) -> tuple[Any, ...]:
    """A candidate's columns of :data:`STAGE_COLUMNS`, from ``tenant_id`` to ``payload``."""
    due, slot, timing = plan.due, cand.slot, cand.timing
    decision = verdict.decision
    binding = cand.binding
    runs = binding is None and decision is Decision.ADMITTED
    run_deadline = None
    if runs:
        stale_after = float((due.registration or {}).get("stale_claim_after", 120))
        run_deadline = now + timedelta(seconds=stale_after)
    params: Any = None
    payload: Any = None
    owner: str | None = None
    task = decision is Decision.ADMITTED and binding is not None
    if task:
        if isinstance(binding, Owner):
            owner = binding.user_id
            params = JsonText(schedule_stamp(due.definition_id, due.revision, slot.key, cand.kind,
                                             slot.scheduled_for))
        else:
            assert binding is not None
            owner = binding.owner_user_id
            stamp = trusted_schedule(due.definition_id, due.revision, slot.key, cand.kind,
                                     slot.scheduled_for)
            params = JsonText(json.dumps({**binding.params, "schedule": stamp}))
            payload = JsonText(json.dumps(_binding_payload(binding)))
    compiled = due.compiled
    return (
        cand.tenant_id, due.definition_id, cand.binding_id, slot.key, cand.kind, due.tenant_id,
        due.revision, epoch_us(slot.scheduled_for), epoch_us(timing.not_before),
        epoch_us(timing.expires_at), slot.zone, wall_us(slot.wall), slot.fold, decision.value,
        verdict.reason, verdict.late, cand.lateness.lateness.total_seconds(),
        "running" if runs else None, epoch_us(run_deadline),
        ("held" if verdict.held_behind is not None else "pending") if task else None, owner,
        verdict.held_behind, compiled.late_policy.value, compiled.deadline.total_seconds(),
        compiled.max_attempts, params, payload,
    )


async def _after_claims(tx: Connection, claimed: list[int], verdicts: Verdicts, now: datetime,
                        report: TickReport, quick: int = 0) -> None:
    """Count the claimed decisions (ordinals below ``quick`` are quick rows: admitted, with
    no budget, cancellation or ``run`` unit); consume budgets and cancel previous tasks
    for the claimed admissions; collect the claimed ``run`` units."""
    budget_rows, cancels = [], []
    for ordinal in claimed:
        if ordinal < quick:
            report.decisions[_ADMITTED] += 1
            continue
        plan, cand, verdict, period = verdicts[ordinal - quick]
        report.decisions[verdict.decision.value] += 1
        if verdict.decision is not Decision.ADMITTED:
            continue
        if cand.binding is None:
            report.runs.append(RunUnit(plan.due.definition_id, cand.tenant_id, cand.binding_id,
                                       cand.slot.key, cand.slot.scheduled_for))
            continue
        if verdict.consumes_budget and period is not None:
            budget_rows.append((cand.tenant_id, plan.due.definition_id, cand.binding_id,
                                period[0], period[1], period[2]))
        cancels.extend((cand.tenant_id, task_id) for task_id in verdict.cancel)
    if budget_rows:
        await tx.execute("budget_consume", *[list(c) for c in zip(*budget_rows, strict=True)])
    if cancels:
        await tx.execute("tasks_cancel_previous", [c[0] for c in cancels], [c[1] for c in cancels],
                         "cancelled: a newer occurrence was admitted (cancel_previous)", now)


TASK_COLUMNS = (
    "tenant_id", "definition_tenant_id", "definition_id", "binding_id", "slot", "kind", "revision",
    "owner_user_id", "agent", "message", "params", "delivery", "audiences", "status",
    "status_reason", "late", "late_policy", "scheduled_for", "not_before", "expires_at",
    "deadline_seconds", "max_attempts", "held_behind",
)


async def insert_tasks(tx: Connection, rows: Sequence[tuple[Any, ...]], now: datetime) -> None:
    """Insert task rows (in :data:`TASK_COLUMNS` order, from :func:`task_row`) admitted at
    ``now``, one at a time or a few (a condition's fire, a review's approval)."""
    await tx.stage("wk_stage_tasks", TASK_COLUMNS, rows)
    await tx.execute("tasks_insert", now)


def task_row(plan: Plan, cand: Candidate, verdict: AdmissionVerdict) -> tuple[Any, ...]:
    """The task columns (:data:`TASK_COLUMNS` order) of an admitted candidate. A user-
    confirmed definition's agent, message, delivery and audiences are left NULL and its
    params hold only what the runtime stamps: ``tasks_insert`` takes the rest from the
    revision's payload, as ``admission_write`` does."""
    binding = cand.binding
    assert binding is not None
    compiled, due = plan.due.compiled, plan.due
    schedule = trusted_schedule(due.definition_id, due.revision, cand.slot.key, cand.kind,
                                cand.slot.scheduled_for)
    if isinstance(binding, Owner):
        owner, agent, message, params = binding.user_id, None, None, {"schedule": schedule}
        delivery = audiences = None
    else:
        owner, agent, message = binding.owner_user_id, binding.agent, binding.message
        params = {**binding.params, "schedule": schedule}
        payload = _binding_payload(binding)
        delivery, audiences = JsonText(json.dumps(payload["delivery"])), None
        if payload["audiences"] is not None:
            audiences = JsonText(json.dumps(payload["audiences"]))
    return (
        cand.tenant_id, due.tenant_id, due.definition_id, cand.binding_id, cand.slot.key,
        cand.kind, due.revision, owner, agent, message, params, delivery, audiences,
        "held" if verdict.held_behind is not None else "pending", verdict.reason, verdict.late,
        compiled.late_policy.value, cand.slot.scheduled_for, cand.timing.not_before,
        cand.timing.expires_at, compiled.deadline.total_seconds(), compiled.max_attempts,
        verdict.held_behind,
    )


_PAYLOADS: dict[int, tuple[Binding, dict[str, Any]]] = {}


def _binding_payload(binding: Binding) -> dict[str, Any]:
    """An operator binding's task payload (:func:`triggers.user_payload`'s shape), built
    once per binding object."""
    cached = _PAYLOADS.get(id(binding))
    if cached is None or cached[0] is not binding:
        if len(_PAYLOADS) > 65_536:
            _PAYLOADS.clear()
        payload = {"agent": binding.agent, "message": binding.message,
                   "params": dict(binding.params), "delivery": delivery_json(binding.delivery),
                   "audiences": None if binding.audiences is None else list(binding.audiences)}
        cached = _PAYLOADS[id(binding)] = (binding, payload)
    return cached[1]


async def _record_events(tx: Connection, kept: Sequence[Plan], fenced: Sequence[Plan],
                         now: datetime, actor: str, report: TickReport) -> None:
    rows: list[tuple[Any, ...]] = []
    for plan in kept:
        if plan.failure is not None or plan.bindings_error is not None or (
                plan.window.superseded is not None or plan.window.gaps_after is not None):
            rows.extend(_plan_events(plan, report))
    for plan in fenced:
        for cand in plan.candidates:
            rows.append((cand.tenant_id, plan.due.definition_id, cand.binding_id,
                         plan.due.revision, EventKind.FENCED_OUT.value, cand.slot.key,
                         cand.slot.key, cand.slot.scheduled_for, cand.slot.scheduled_for, 1,
                         f"computed under fence {plan.due.fence}; the definition changed "
                         "(confirm, pause, resume or cancel) before admission"))
    if rows:
        await tx.execute("events_insert", *[list(c) for c in zip(*rows, strict=True)], now, actor)


def _plan_events(plan: Plan, report: TickReport) -> list[tuple[Any, ...]]:
    """The ranges a kept plan records once: refused binding sets, superseded slots, and
    DST-gap slots after the candidate."""
    window, rev, definition_id = plan.window, plan.due.revision, plan.due.definition_id
    rows: list[tuple[Any, ...]] = []
    if plan.failure is not None:
        at = plan.due.cursor_at
        rows.append((plan.due.tenant_id, definition_id, "*", rev, EventKind.PLANNING_FAILED.value,
                     None, None, at, at, 0, f"cannot be scheduled, so it stopped: {plan.failure}; "
                     "propose a corrected revision"))
        return rows
    if plan.bindings_error is not None and window.due:
        first = window.superseded.first if window.superseded else window.candidate
        assert first is not None and window.last is not None
        rows.append((plan.due.tenant_id, definition_id, "*", rev, EventKind.BINDINGS_INVALID.value,
                     first.key, window.last.key, first.scheduled_for, window.last.scheduled_for,
                     window.count, plan.bindings_error))
        return rows
    ranges = []
    if window.superseded is not None:
        assert window.candidate is not None
        ranges.append((EventKind.SKIPPED_SUPERSEDED, window.superseded,
                       f"only the latest due occurrence ({window.candidate.key}) is a candidate"))
    if window.gaps_after is not None:
        ranges.append((EventKind.SKIPPED_DST_GAP, window.gaps_after,
                       "local times that do not exist (DST gap) after the candidate"))
    for kind, span, reason in ranges:
        for tenant_id, binding_id in plan.units:
            report.ranges += 1
            rows.append((tenant_id, definition_id, binding_id, rev, kind.value, span.first.key,
                         span.last.key, span.first.scheduled_for, span.last.scheduled_for,
                         span.count, reason))
    return rows


async def _recover(db: Database, writes: Sequence[Plan], report: TickReport, actor: str,
                   now: datetime, quick: Sequence[tuple[str, str, str, str, str]] = ()
                   ) -> TickReport:
    """After a lost (and settled) COMMIT: the batch committed iff its occurrence rows exist
    with this tick's ``decided_by`` and ``decided_at``. Cursors are no evidence: another
    replica may have moved them since."""
    report.recovered = True
    keys = [*quick, *((c.tenant_id, p.due.definition_id, c.binding_id, c.slot.key, c.kind)
                      for p in writes for c in p.candidates)]
    if not keys:
        return report  # nothing was claimed: only idempotent cursor moves, if anything
    rows = await db.fetch("occurrences_by_keys", *[list(col) for col in zip(*keys, strict=True)])
    committed = any(r["decided_by"] == actor and r["decided_at"] == now for r in rows)
    if not committed:
        report.decisions.clear()
        report.runs.clear()
        report.ranges = 0
    log.warning("lost COMMIT acknowledgement: the tick batch %s", "committed" if committed else
                "did not commit; the next tick redoes it under the same keys")
    return report
