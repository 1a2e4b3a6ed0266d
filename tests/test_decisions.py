"""Pure decisions: lateness, overrun, budgets and their composition (hypothesis)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given
from hypothesis import strategies as st

from watchkeeper.triggers import (
    ActiveTask,
    BudgetState,
    Decision,
    LatePolicy,
    OverrunPolicy,
    Period,
    Slot,
    budget_period,
    decide_admission,
    decide_lateness,
    decide_overrun,
    occurrence_timing,
)

T0 = datetime(2026, 6, 1, 9, tzinfo=UTC)
SLOT = Slot("2026-06-01T09:00:00Z", T0, "UTC", T0.replace(tzinfo=None))


@given(st.integers(-3600, 86_400), st.integers(0, 7200), st.sampled_from(list(LatePolicy)))
def test_lateness_table(late_s: int, grace_s: int, policy: LatePolicy) -> None:
    """Within grace always admits on time; past grace follows the policy; lateness is
    never negative and is separate from the decision."""
    timing = occurrence_timing(SLOT, jitter=timedelta(0), late_grace=timedelta(seconds=grace_s),
                               key_parts=())
    now = T0 + timedelta(seconds=late_s)
    verdict = decide_lateness(SLOT, timing, now, policy)
    assert verdict.lateness == max(timedelta(seconds=late_s), timedelta(0))
    if late_s <= grace_s:
        assert (verdict.decision, verdict.late) == (Decision.ADMITTED, False)
    else:
        expected = {LatePolicy.SKIP_EXPIRED: (Decision.SKIPPED_EXPIRED, False),
                    LatePolicy.CATCH_UP_ONCE: (Decision.ADMITTED, True),
                    LatePolicy.REVIEW_LATE: (Decision.REVIEW_REQUIRED, False)}[policy]
        assert (verdict.decision, verdict.late) == expected


statuses = st.sampled_from(["pending", "held", "running", "suspended"])


@given(st.sampled_from(list(OverrunPolicy)),
       st.lists(st.tuples(st.integers(1, 50), statuses), max_size=4, unique_by=lambda t: t[0]))
def test_overrun_table(policy: OverrunPolicy, raw: list[tuple[int, str]]) -> None:
    """No active task: admit. Otherwise skip / queue once / allow / cancel all active."""
    active = [ActiveTask(i, s) for i, s in raw]
    verdict = decide_overrun(policy, active)
    if not active:
        assert verdict.admit and verdict.held_behind is None and verdict.cancel == ()
    elif policy is OverrunPolicy.SKIP:
        assert not verdict.admit
    elif policy is OverrunPolicy.ALLOW:
        assert verdict.admit and verdict.cancel == ()
    elif policy is OverrunPolicy.CANCEL_PREVIOUS:
        assert verdict.admit and verdict.cancel == tuple(sorted(i for i, _ in raw))
    else:
        held = any(s == "held" for _, s in raw)
        assert verdict.admit is not held
        if not held:
            assert verdict.held_behind == max(i for i, _ in raw)


def test_a_suspended_task_counts_as_running() -> None:
    """A task waiting on a human blocks the next occurrence under overrun=skip."""
    verdict = decide_overrun(OverrunPolicy.SKIP, [ActiveTask(7, "suspended")])
    assert not verdict.admit and "still suspended" in verdict.reason


@given(st.integers(0, 5), st.integers(0, 5))
def test_budget_is_consumed_only_by_an_admission(limit: int, used: int) -> None:
    """An exhausted budget denies; a denial by lateness or overrun consumes nothing."""
    timing = occurrence_timing(SLOT, jitter=timedelta(0), late_grace=timedelta(minutes=10),
                               key_parts=())
    on_time = decide_lateness(SLOT, timing, T0, LatePolicy.SKIP_EXPIRED)
    budget = BudgetState(limit, min(used, limit))
    verdict = decide_admission(on_time, OverrunPolicy.SKIP, [], budget)
    fits = budget.used < budget.limit
    assert verdict.decision is (Decision.ADMITTED if fits else Decision.DENIED_BUDGET)
    assert verdict.consumes_budget is fits
    blocked = decide_admission(on_time, OverrunPolicy.SKIP, [ActiveTask(1, "running")], budget)
    assert (blocked.decision, blocked.consumes_budget) == (Decision.SKIPPED_OVERRUN, False)


@pytest.mark.parametrize(
    ("instant", "period", "zone", "start", "end"),
    [("2026-06-03T12:00Z", Period.DAY, "Europe/Paris", "2026-06-02T22:00Z", "2026-06-03T22:00Z"),
     ("2026-06-03T12:00Z", Period.WEEK, "Europe/Paris", "2026-05-31T22:00Z", "2026-06-07T22:00Z"),
     ("2026-02-15T12:00Z", Period.MONTH, "UTC", "2026-02-01T00:00Z", "2026-03-01T00:00Z"),
     # America/Santiago: 2026-09-06 00:00 does not exist; the day starts at 01:00 -03
     ("2026-09-06T12:00Z", Period.DAY, "America/Santiago", "2026-09-06T04:00Z",
      "2026-09-07T03:00Z")],
)
def test_budget_periods_follow_the_local_calendar(instant: str, period: Period, zone: str,
                                                  start: str, end: str) -> None:
    """Accounting periods are local days, ISO weeks and months, DST included."""
    got = budget_period(datetime.fromisoformat(instant), period, ZoneInfo(zone))
    assert got == (datetime.fromisoformat(start), datetime.fromisoformat(end))
