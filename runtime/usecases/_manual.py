"""Operator and owner actions on occurrences: trigger-now and review decisions.

* ``trigger_now`` claims a ``manual`` occurrence at the invocation instant: a key
  distinct from any scheduled one, so both stay attributable (seed 001). It bypasses
  pause and overrun by design but never the task budget, and never moves the
  schedule's cursor: a manual run at 11:30 leaves the next scheduled slot where it was.
  Two triggers 600 ms apart are two occurrences; a same-instant duplicate loses the
  claim and is answered ``duplicate``. A lost COMMIT acknowledgement is resolved by
  reading the occurrence back by its key, never by retrying under a new slot.
* ``review`` takes the authorized decision a ``review_late`` occurrence (or a task
  that reached a worker after its ``expires_at``) waits for.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from watchkeeper.triggers import (
    OPERATOR_TENANT,
    USER_BINDING_ID,
    Decision,
    DueWindow,
    LatenessVerdict,
    Slot,
    Timing,
    decide_admission,
    occurrence_timing,
    utc_slot_key,
)

from .._errors import Conflict, NotFound
from ..engine._admission import active_tasks, admit, budget_states, insert_tasks, task_row
from ..engine._clock import Clock
from ..engine._registry import Registry
from ..engine._tick import Candidate, DueDefinition, Plan, units_of
from ..store._db import Connection, Database
from ..store._specs import spec_from_row
from ._input import check_input
from ._principals import Actor, UserPrincipal

__all__ = ["TriggerResult", "review", "trigger_now"]


@dataclass(frozen=True, slots=True)
class TriggerResult:
    """The answer to a trigger-now.

    Attributes:
        slot: the manual occurrence's slot key (the invocation instant, UTC, µs).
        decisions: per (tenant_id, binding_id), the decision recorded by this call,
            or ``"duplicate"`` when that key had already been claimed.
        recovered: the COMMIT acknowledgement was lost and the outcome was read back.
    """

    slot: str
    decisions: dict[tuple[str, str], str]
    recovered: bool = False


async def _load(db: Database, actor: Actor, tenant_id: str, definition_id: str) -> DueDefinition:
    row = await db.fetchrow("definition_get", tenant_id, definition_id)
    if row is None:
        raise NotFound(f"no definition {tenant_id}/{definition_id}")
    if isinstance(actor, UserPrincipal) and (actor.tenant_id, actor.user_id) != (
        tenant_id, row["owner_user_id"]
    ):
        raise NotFound(f"no definition {tenant_id}/{definition_id}")
    if row["status"] == "cancelled":
        raise Conflict(f"definition {definition_id} is cancelled")
    if row["effective_revision"] is None:
        raise Conflict(f"definition {definition_id} has no confirmed revision yet")
    return DueDefinition(row["tenant_id"], row["definition_id"], row["origin"],
                         row["owner_user_id"], row["fence"], row["effective_revision"],
                         row["spec_hash"], row["cursor_at"], row["slots_seen"],
                         spec_from_row(row).compiled, row["registration"])


async def trigger_now(db: Database, clock: Clock, actor: Actor, tenant_id: str,
                      definition_id: str, *, binding: tuple[str, str] | None = None,
                      registry: Registry | None = None) -> TriggerResult:
    """Claim a manual occurrence now for every binding (or one ``(tenant, binding)``).

    Raises:
        NotFound: as for any definition action (also a user who is not the owner).
        Conflict: cancelled or unconfirmed definition; an unknown binding; bindings
            that cannot be resolved here; the definition changed while triggering
            (recorded ``fenced_out``; nothing admitted).
    """
    item = await _load(db, actor, tenant_id, definition_id)
    units = await units_of(item, registry or Registry())
    if units is None or isinstance(units, str):
        raise Conflict(f"cannot resolve the bindings of {definition_id}: "
                       f"{units or 'not registered in this process'}")
    if binding is not None:
        units = [u for u in units if (u[0], u[1]) == binding]
        if not units:
            raise Conflict(f"{definition_id} has no binding {binding[0]}/{binding[1]}")
    now = clock.now()
    slot = _manual_slot(now, item.compiled.zone)
    lateness = LatenessVerdict(Decision.ADMITTED, False, timedelta(0),
                               f"manual trigger by {actor.label}")
    candidates = tuple(
        Candidate(unit_binding, unit_tenant, binding_id, slot,
                  occurrence_timing(slot, jitter=timedelta(0),
                                    late_grace=item.compiled.late_grace, key_parts=()),
                  lateness, kind="manual")
        for unit_tenant, binding_id, unit_binding in units
    )
    plan = Plan(item, DueWindow(1, slot, slot, None, None, None), candidates,
                tuple((t, b) for t, b, _ in units), manual=True)
    report = await admit(db, [plan], now, actor.label, wait=True)
    if report.fenced_out:
        raise Conflict(f"{definition_id} changed while it was being triggered; nothing admitted")
    claimed = sum(report.decisions.values())
    decisions = await _read_back(db, plan)
    if claimed == 0 and not report.recovered:
        decisions = {k: "duplicate" for k in decisions}
    return TriggerResult(slot.key, decisions, report.recovered)


def _manual_slot(now: datetime, zone: str) -> Slot:
    """The slot of a manual occurrence at the aware instant ``now``: keyed by the UTC
    instant (microseconds included: two triggers 600 ms apart are two occurrences), read
    in the definition's ``zone`` as a scheduled occurrence is (its local wall time and
    fold there), so history shows it in that zone, not in UTC."""
    local = now.astimezone(ZoneInfo(zone))
    return Slot(utc_slot_key(now), now, zone, local.replace(tzinfo=None), local.fold)


async def _read_back(db: Database, plan: Plan) -> dict[tuple[str, str], str]:
    out = {}
    for cand in plan.candidates:
        row = await db.fetchrow("occurrence_get", cand.tenant_id, plan.due.definition_id,
                                cand.binding_id, cand.slot.key, "manual")
        out[(cand.tenant_id, cand.binding_id)] = row["decision"] if row else "not admitted"
    return out


async def review(db: Database, clock: Clock, actor: Actor, tenant_id: str, definition_id: str,
                 slot: str, *, approve: bool, binding_id: str = "owner",
                 definition_tenant_id: str | None = None) -> str:
    """Approve or skip an occurrence (or a task) waiting in ``review_required``.

    Approval goes through the overrun and budget rules like any admission and admits
    the task marked late; skipping records ``skipped_review``. Returns the decision.

    Raises:
        SpecError: ``slot`` or ``binding_id`` holds a NUL or a lone surrogate.
        NotFound: nothing of that slot waits for review.
    """
    check_input({"slot": slot, "binding": binding_id})
    try:
        item = await _load(db, actor, definition_tenant_id or tenant_id, definition_id)
    except NotFound as missing:
        if definition_tenant_id is not None:
            raise
        # a registered definition's occurrence is under the binding's tenant
        try:
            item = await _load(db, actor, OPERATOR_TENANT, definition_id)
        except NotFound:
            raise missing from None
    _same_owner(item, tenant_id, binding_id, slot)
    now = clock.now()
    async with db.transaction() as tx:
        await tx.fetch("definitions_lock_batch_wait", [item.tenant_id], [definition_id])
        task = await tx.fetchrow("task_review_get", tenant_id, definition_id, binding_id, slot,
                                 item.tenant_id)
        if task is not None:
            status = "pending" if approve else "expired"
            await tx.execute("task_review_decide", tenant_id, task["task_id"], status,
                             f"review: {'approved' if approve else 'skipped'} by {actor.label}", now)
            if not approve:
                await tx.execute("tasks_release_held", tenant_id, task["task_id"])
            return Decision.ADMITTED.value if approve else Decision.SKIPPED_REVIEW.value
        occ = await tx.fetchrow("occurrence_get", tenant_id, definition_id, binding_id, slot,
                                "scheduled")
        if (occ is None or occ["decision"] != Decision.REVIEW_REQUIRED.value
                or occ["definition_tenant_id"] != item.tenant_id):
            raise NotFound(f"no occurrence {slot} of {definition_id} waits for review")
        if not approve:
            await tx.execute("occurrence_review_decide", tenant_id, definition_id, binding_id,
                             slot, Decision.SKIPPED_REVIEW.value, f"skipped by {actor.label}",
                             False, now, actor.label)
            return Decision.SKIPPED_REVIEW.value
        return await _approve(tx, item, occ, now, actor.label)


def _same_owner(item: DueDefinition, tenant_id: str, binding_id: str, slot: str) -> None:
    """A user-confirmed definition's occurrences live in its own tenant, under its one
    binding; an occurrence named in another tenant does not exist for it.

    Raises:
        NotFound: naming the definition (never the other tenant's work).
    """
    if item.origin == "user" and (tenant_id, binding_id) != (item.tenant_id, USER_BINDING_ID):
        raise NotFound(f"no occurrence {slot} of {item.definition_id} waits for review")


async def _approve(tx: Connection, item: DueDefinition, occ: Any, now: datetime,
                   label: str) -> str:
    if occ["revision"] != item.revision:
        raise Conflict(f"{item.definition_id} was reconfirmed (revision {occ['revision']} -> "
                       f"{item.revision}) since this occurrence waited for review; the new revision "
                       "decides: skip it, or trigger the definition now")
    units = await units_of(item, Registry())
    unit = next((u for u in units or [] if not isinstance(u, str)
                 and (u[0], u[1]) == (occ["tenant_id"], occ["binding_id"])), None)
    if unit is None:
        raise Conflict(f"binding {occ['binding_id']} of {item.definition_id} cannot be resolved")
    slot = Slot(occ["slot"], occ["scheduled_for"], occ["zone"], occ["local_wall"], occ["fold"])
    timing = Timing(occ["scheduled_for"], occ["not_before"], occ["expires_at"])
    lateness = LatenessVerdict(Decision.ADMITTED, True,
                               max(now - occ["not_before"], timedelta(0)), f"approved by {label}")
    cand = Candidate(unit[2], unit[0], unit[1], slot, timing, lateness)
    plan = Plan(item, DueWindow(1, slot, slot, None, None, None), (cand,), ((unit[0], unit[1]),),
                manual=False)
    key = (cand.tenant_id, item.definition_id, cand.binding_id)
    active = (await active_tasks(tx, [(plan, cand)])).get(key, [])
    budgets, periods = await budget_states(tx, [(plan, cand)])
    verdict = decide_admission(lateness, item.compiled.overrun, active, budgets.get(key))
    await tx.execute("occurrence_review_decide", cand.tenant_id, item.definition_id,
                     cand.binding_id, slot.key, verdict.decision.value, verdict.reason,
                     verdict.late, now, label)
    if verdict.decision is Decision.ADMITTED:
        await insert_tasks(tx, [task_row(plan, cand, verdict)], now)
        if verdict.consumes_budget and key in periods:
            start, end, limit = periods[key]
            await tx.execute("budget_consume", [key[0]], [key[1]], [key[2]], [start], [end], [limit])
        if verdict.cancel:
            await tx.execute("tasks_cancel_previous", [cand.tenant_id] * len(verdict.cancel),
                             list(verdict.cancel),
                             "cancelled: a newer occurrence was admitted (cancel_previous)", now)
    return verdict.decision.value
