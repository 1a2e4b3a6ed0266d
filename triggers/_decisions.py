"""Pure decisions taken for an occurrence: timing, lateness, overrun, budget.

Sources: DESIGN "Lateness", "Overrun", "Admission"; seed 002 (lateness policies,
"a late run is not a failed run"); seed 001 (``skip-missed`` is fresh-only,
``now <= due + lateGrace``; a suspended run reads as running).
Every function takes the instant ``now`` as an argument and reads no clock.
"""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import NamedTuple
from zoneinfo import ZoneInfo

from ._slots import Slot

__all__ = [
    "ActiveTask",
    "AdmissionVerdict",
    "decide_admission",
    "BudgetState",
    "Decision",
    "EventKind",
    "LatePolicy",
    "LatenessVerdict",
    "OverrunPolicy",
    "OverrunVerdict",
    "Period",
    "Timing",
    "budget_period",
    "decide_budget",
    "decide_lateness",
    "decide_overrun",
    "jitter_offset",
    "occurrence_timing",
]


class LatePolicy(enum.StrEnum):
    """What happens to a run that could not start before ``expires_at`` (its scheduled
    time plus ``late_grace``): skip it, run it once anyway, or wait for the owner."""

    SKIP_EXPIRED = "skip_expired"
    CATCH_UP_ONCE = "catch_up_once"
    REVIEW_LATE = "review_late"


class OverrunPolicy(enum.StrEnum):
    """What a new occurrence does while the previous task is still going."""

    SKIP = "skip"
    QUEUE_ONE = "queue_one"
    ALLOW = "allow"
    CANCEL_PREVIOUS = "cancel_previous"


class Decision(enum.StrEnum):
    """The decision recorded on an occurrence row (the row's key is the claim)."""

    ADMITTED = "admitted"
    SKIPPED_EXPIRED = "skipped_expired"
    REVIEW_REQUIRED = "review_required"
    SKIPPED_REVIEW = "skipped_review"
    SKIPPED_OVERRUN = "skipped_overrun"
    DENIED_BUDGET = "denied_budget"
    SKIPPED_DST_GAP = "skipped_dst_gap"


class EventKind(enum.StrEnum):
    """Decisions that do not claim an occurrence key, recorded once each."""

    SKIPPED_SUPERSEDED = "skipped_superseded"
    SKIPPED_PAUSED = "skipped_paused"
    SKIPPED_DST_GAP = "skipped_dst_gap"
    SKIPPED_RECONFIRMED = "skipped_reconfirmed"
    FENCED_OUT = "fenced_out"
    CLOCK_UNCERTAIN = "clock_uncertain"
    BINDINGS_INVALID = "bindings_invalid"
    PLANNING_FAILED = "planning_failed"
    SCHEDULE_ENDED = "schedule_ended"


class Timing(NamedTuple):
    """The eligibility window of one occurrence, all aware UTC instants.

    ``not_before = scheduled_for + jitter``; ``expires_at = not_before + late_grace``;
    "within grace" means ``now <= expires_at``.
    """

    scheduled_for: datetime
    not_before: datetime
    expires_at: datetime


_ZERO = timedelta(0)
_MICROSECOND = timedelta(microseconds=1)


def jitter_offset(jitter: timedelta, *key_parts: str) -> timedelta:
    """A deterministic offset in ``[0, jitter)`` from a hash of the occurrence key.

    Every replica computes the same value; it is applied to the nominal slot and
    never fed back into the cadence. ``jitter <= 0`` gives zero. Resolution 1 µs.
    """
    if jitter <= _ZERO:
        return _ZERO
    span = jitter // _MICROSECOND
    digest = hashlib.sha256("\x1f".join(key_parts).encode()).digest()
    return timedelta(microseconds=(int.from_bytes(digest[:8], "big") * span) >> 64)


def occurrence_timing(
    slot: Slot, *, jitter: timedelta, late_grace: timedelta, key_parts: Sequence[str]
) -> Timing:
    """Timing of ``slot`` for one binding; ``key_parts`` identify the occurrence."""
    not_before = slot.scheduled_for
    if jitter:
        not_before += jitter_offset(jitter, *key_parts)
    return Timing(slot.scheduled_for, not_before, not_before + late_grace)


class LatenessVerdict(NamedTuple):
    """Outcome of the lateness rule for a candidate occurrence.

    Attributes:
        decision: ``ADMITTED`` (may still be refused by overrun or budget),
            ``SKIPPED_EXPIRED``, ``REVIEW_REQUIRED`` or ``SKIPPED_DST_GAP``.
        late: True when admitted past ``expires_at`` (``catch_up_once``).
        lateness: ``now - not_before``, never negative; a separate field from the outcome.
        reason: one human sentence.
    """

    decision: Decision
    late: bool
    lateness: timedelta
    reason: str


def decide_lateness(slot: Slot, timing: Timing, now: datetime, policy: LatePolicy) -> LatenessVerdict:
    """Apply the lateness table of DESIGN "Lateness" to a candidate occurrence."""
    lateness = max(now - timing.not_before, timedelta(0))
    if not slot.fires:
        return LatenessVerdict(Decision.SKIPPED_DST_GAP, False, lateness, slot.note or "DST gap")
    if now <= timing.expires_at:
        return LatenessVerdict(Decision.ADMITTED, False, lateness, "due within grace")
    past = _human(now - timing.expires_at)
    if policy is LatePolicy.CATCH_UP_ONCE:
        return LatenessVerdict(
            Decision.ADMITTED, True, lateness, f"admitted late, {past} past expires_at (catch_up_once)"
        )
    if policy is LatePolicy.REVIEW_LATE:
        return LatenessVerdict(
            Decision.REVIEW_REQUIRED, False, lateness,
            f"{past} past expires_at; waiting for an authorized approve or skip (review_late)",
        )
    return LatenessVerdict(
        Decision.SKIPPED_EXPIRED, False, lateness,
        f"{past} past expires_at {timing.expires_at:%Y-%m-%dT%H:%M:%SZ} (skip_expired)",
    )


class ActiveTask(NamedTuple):
    """A task of the same definition and binding that has not ended.

    ``status`` is one of ``pending``, ``held``, ``running``, ``suspended`` (a task
    waiting on a human counts as running).
    """

    task_id: int
    status: str


class OverrunVerdict(NamedTuple):
    """Outcome of the overrun rule.

    Attributes:
        admit: whether the new task may be admitted.
        held_behind: the task the new one waits for (``queue_one``), else ``None``.
        cancel: tasks whose cancellation is requested (``cancel_previous``).
        reason: one human sentence.
    """

    admit: bool
    held_behind: int | None
    cancel: tuple[int, ...]
    reason: str


_NOTHING_RUNNING = OverrunVerdict(True, None, (), "no previous task running")


def decide_overrun(policy: OverrunPolicy, active: Sequence[ActiveTask]) -> OverrunVerdict:
    """Apply the overrun policy given the binding's tasks that have not ended."""
    if not active:
        return _NOTHING_RUNNING
    latest = max(active, key=lambda t: t.task_id)
    still = f"task {latest.task_id} of a previous occurrence is still {latest.status}"
    if policy is OverrunPolicy.ALLOW:
        return OverrunVerdict(True, None, (), f"{still}; overlap allowed")
    if policy is OverrunPolicy.CANCEL_PREVIOUS:
        ids = tuple(sorted(t.task_id for t in active))
        return OverrunVerdict(True, None, ids, f"{still}; cancellation requested (cancel_previous)")
    if policy is OverrunPolicy.QUEUE_ONE:
        held = [t for t in active if t.status == "held"]
        if held:
            return OverrunVerdict(
                False, None, (), f"task {held[0].task_id} is already queued (queue_one)"
            )
        return OverrunVerdict(True, latest.task_id, (), f"{still}; queued behind it (queue_one)")
    return OverrunVerdict(False, None, (), f"{still} (overrun=skip)")


class Period(enum.StrEnum):
    """Budget accounting periods, in the definition's zone."""

    DAY = "day"
    WEEK = "week"
    MONTH = "month"


def budget_period(instant: datetime, period: Period, zone: ZoneInfo) -> tuple[datetime, datetime]:
    """The accounting period ``[start, end)`` containing ``instant``, as UTC instants.

    Days start at local midnight, weeks on Monday (ISO 8601), months on the 1st.
    A local midnight that does not exist resolves to the first instant after it.
    """
    local = instant.astimezone(zone).replace(tzinfo=None)
    day = local.replace(hour=0, minute=0, second=0, microsecond=0)
    if period is Period.DAY:
        start, end = day, day + timedelta(days=1)
    elif period is Period.WEEK:
        start = day - timedelta(days=day.weekday())
        end = start + timedelta(days=7)
    else:
        start = day.replace(day=1)
        end = (start + timedelta(days=32)).replace(day=1)
    return _instant(start, zone), _instant(end, zone)


def _instant(wall: datetime, zone: ZoneInfo) -> datetime:
    return wall.replace(tzinfo=zone).astimezone(UTC)


@dataclass(frozen=True, slots=True)
class BudgetState:
    """A definition's task budget in the current accounting period.

    ``limit`` is fixed when the period opens: raising the definition's limit later
    does not replenish the current period (seed 004).
    """

    limit: int
    used: int


def decide_budget(state: BudgetState | None) -> tuple[bool, str]:
    """Whether one more task fits; ``None`` means the definition has no budget."""
    if state is None:
        return True, "no task budget"
    if state.used < state.limit:
        return True, f"budget {state.used + 1} of {state.limit}"
    return False, f"task budget exhausted: {state.used} of {state.limit} used in this period"


class AdmissionVerdict(NamedTuple):
    """The final decision for a candidate occurrence (DESIGN "Admission").

    Attributes:
        decision: what the occurrence row records.
        reason: one human sentence.
        late: admitted past ``expires_at``.
        held_behind: ``queue_one``: the task the new one waits for.
        cancel: ``cancel_previous``: tasks whose cancellation is requested.
        consumes_budget: whether one unit of the period's task budget is used.
    """

    decision: Decision
    reason: str
    late: bool = False
    held_behind: int | None = None
    cancel: tuple[int, ...] = ()
    consumes_budget: bool = False


def decide_admission(
    lateness: LatenessVerdict,
    overrun: OverrunPolicy,
    active: Sequence[ActiveTask],
    budget: BudgetState | None,
    *,
    bypass_overrun: bool = False,
) -> AdmissionVerdict:
    """Lateness first, then overrun, then the task budget (consumed only on admission).

    ``bypass_overrun`` is for an explicit manual trigger-now, which starts beside a
    running task by design (seed 001, ``triggerNow``); the budget still applies.
    """
    if lateness.decision is not Decision.ADMITTED:
        return AdmissionVerdict(lateness.decision, lateness.reason)
    verdict = OverrunVerdict(True, None, (), "manual trigger") if bypass_overrun else (
        decide_overrun(overrun, active))
    if not verdict.admit:
        return AdmissionVerdict(Decision.SKIPPED_OVERRUN, verdict.reason)
    fits, why = decide_budget(budget)
    if not fits:
        return AdmissionVerdict(Decision.DENIED_BUDGET, why)
    reason = lateness.reason if lateness.late else verdict.reason
    return AdmissionVerdict(Decision.ADMITTED, reason, lateness.late, verdict.held_behind,
                            verdict.cancel, budget is not None)


def _human(delta: timedelta) -> str:
    seconds = int(delta.total_seconds())
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{delta.total_seconds():.1f}s"

