"""The tick's common case, staged straight from the locked row.

Most definitions due at one instant are in the same situation: user-confirmed, no task
of theirs still going, no task budget, exactly one slot due that fires (no DST
transition near it: :meth:`CronSchedule.quick_window`, or an interval's arithmetic),
inside its grace, and a next slot to move to. For all of them the pure rules
(:func:`triggers.decide_lateness`, :func:`triggers.decide_admission`) reach the same
verdict — admitted, for the same reason — which depends only on the lateness and
overrun policies; it is asked of those functions once per pair of policies and reused.
The row of ``wk_stage_admission`` is then built directly from the locked row and the
compiled spec, without the general planning objects (:class:`~._tick.Plan`,
:class:`~._tick.Candidate`): a third of the work per definition.

Anything else (a task going, a budget, several slots due, a DST slot, past grace,
ended) goes the general way (:func:`~._tick.plan_tick`, :func:`~._admission.apply_plans`).
``tests/test_quick_rows.py`` checks (hypothesis) that wherever this answers, the
general way stages the same row.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from watchkeeper.triggers import (
    USER_BINDING_ID,
    AdmissionVerdict,
    CompiledSpec,
    CronSchedule,
    Decision,
    IntervalSchedule,
    LatePolicy,
    OverrunPolicy,
    Slot,
    Timing,
    decide_admission,
    decide_lateness,
    jitter_offset,
)

from ..store._db import JsonText
from ._tick import epoch_us, schedule_stamp, wall_us

__all__ = ["QuickRow", "common_verdict", "quick_row"]

QuickRow = tuple[tuple[Any, ...], tuple[str, str, str, str, str]]
"""A staged row (``wk_stage_admission``'s columns, its ordinal first) and the key of its
occurrence (tenant, definition, binding, slot, kind)."""

_ZERO = timedelta(0)
_VERDICTS: dict[tuple[LatePolicy, OverrunPolicy], AdmissionVerdict] = {}
_COLUMNS: dict[tuple[LatePolicy, OverrunPolicy], tuple[str, str, bool, str]] = {}


def common_verdict(policy: LatePolicy, overrun: OverrunPolicy) -> AdmissionVerdict:
    """The verdict of a firing slot inside its grace with no task going and no budget,
    as the pure rules give it (asked once per pair of policies)."""
    verdict = _VERDICTS.get((policy, overrun))
    if verdict is None:
        probe = datetime.fromisoformat("2000-01-01T00:00:00+00:00")
        slot = Slot("probe", probe, "UTC", probe.replace(tzinfo=None))
        lateness = decide_lateness(slot, Timing(probe, probe, probe), probe, policy)
        verdict = _VERDICTS[(policy, overrun)] = decide_admission(lateness, overrun, (), None)
        assert verdict.decision is Decision.ADMITTED and not verdict.late
    return verdict


def _common_columns(policy: LatePolicy, overrun: OverrunPolicy) -> tuple[str, str, bool, str]:
    """:func:`common_verdict`'s staged columns (decision, reason, late) and the lateness
    policy's, as plain values."""
    columns = _COLUMNS.get((policy, overrun))
    if columns is None:
        verdict = common_verdict(policy, overrun)
        columns = _COLUMNS[(policy, overrun)] = (verdict.decision.value, verdict.reason,
                                                 verdict.late, policy.value)
    return columns


def quick_row(row: Any, compiled: CompiledSpec, now: datetime, index: int) -> QuickRow | None:
    """The staged row of a locked due row (``definitions_due_lock``) in the common case,
    with ordinal ``index``; ``None`` when the general way must plan it."""
    if row["busy"] or compiled.task_limit is not None:
        return None
    calendar, cursor = compiled.calendar, row["cursor_at"]
    remaining = None if compiled.after is None else max(compiled.after - row["slots_seen"], 0)
    if type(calendar) is CronSchedule:
        window = calendar.quick_window(cursor, now, until=compiled.until, remaining=remaining)
    elif type(calendar) is IntervalSchedule:
        window = calendar.window(cursor, now, until=compiled.until, remaining=remaining)
    else:
        return None
    if window is None or window.count != 1 or window.next_slot is None:
        return None
    slot = window.candidate
    assert slot is not None
    tenant_id, definition_id = row["tenant_id"], row["definition_id"]
    not_before = slot.scheduled_for
    if compiled.jitter:
        not_before += jitter_offset(compiled.jitter, definition_id, tenant_id, USER_BINDING_ID,
                                    slot.key)
    expires_at = not_before + compiled.late_grace
    if slot.skip is not None or now > expires_at:
        return None
    decision, reason, late, late_policy = _common_columns(compiled.late_policy, compiled.overrun)
    lateness = now - not_before if now > not_before else _ZERO
    revision, key, scheduled_for = row["effective_revision"], slot.key, slot.scheduled_for
    due_us = epoch_us(scheduled_for)
    staged = (
        index, tenant_id, definition_id, USER_BINDING_ID, key, "scheduled", tenant_id, revision,
        due_us, due_us if not_before is scheduled_for else epoch_us(not_before),
        epoch_us(expires_at), slot.zone, wall_us(slot.wall), slot.fold,
        decision, reason, late, lateness.total_seconds(), None, None,
        "pending", row["owner_user_id"], None, late_policy,
        compiled.deadline.total_seconds(), compiled.max_attempts,
        JsonText(schedule_stamp(definition_id, revision, key, "scheduled", scheduled_for)),
        None,
        due_us, row["slots_seen"] + 1, epoch_us(window.next_slot.scheduled_for), "active",
    )
    return staged, (tenant_id, definition_id, USER_BINDING_ID, key, "scheduled")
