"""``CronSchedule.quick_window`` (the tick's common case) equals the general enumeration
(``due_window``) wherever it answers, near DST transitions of every studied zone, and it
does answer in the common case."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

from hypothesis import example, given, settings
from hypothesis import strategies as st
from test_calendar_properties import TRANSITIONS, ZONES, expressions, windows

from watchkeeper.triggers import CronSchedule, due_window, parse_spec


def utc(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)


@settings(max_examples=400, deadline=None)
@given(expressions, windows(), st.booleans(), st.sampled_from([None, 1, 2, 3, 50]),
       st.sampled_from([None, 0, 30, 600, 3000]))
@example("30 2 * * *", ("Europe/Berlin", utc(2026, 3, 28, 1, 30), utc(2026, 3, 29, 1, 0)), False,
         None, None)
@example("*/15 1 * * *", ("America/New_York", utc(2026, 11, 1, 5, 30), utc(2026, 11, 1, 6, 10)),
         False, None, None)
@example("0 12 * * 5", ("Pacific/Apia", utc(2011, 12, 22, 22), utc(2011, 12, 30, 22)), True, None,
         None)
def test_quick_window_is_the_general_window(expr: str, window: tuple[str, datetime, datetime],
                                            run_after: bool, remaining: int | None,
                                            until_minutes: int | None) -> None:
    """Same count, slots (key, instant, wall, fold, skip, note), ranges and next slot."""
    zone, cursor, now = window
    schedule = CronSchedule(expr, zone, "run_after" if run_after else "skip")
    until = None if until_minutes is None else now + timedelta(minutes=until_minutes)
    quick = schedule.quick_window(cursor, now, until=until, remaining=remaining)
    if quick is not None:
        assert quick == due_window(schedule, cursor, now, until=until, remaining=remaining)


@settings(max_examples=200, deadline=None)
@given(expressions, st.sampled_from(ZONES), st.integers(0, 365 * 24 * 60))
def test_quick_window_follows_a_schedule_tick_by_tick(expr: str, zone: str, minute: int) -> None:
    """A tick one second after each slot, the cursor moved to the window's last slot as the
    tick moves it: the quick path equals the general one wherever it answers, and the
    windows count every slot once."""
    schedule = CronSchedule(expr, zone)
    cursor = utc(2026, 1, 1) + timedelta(minutes=minute, seconds=-1)
    first = [s for s, _ in zip(schedule.slots_after(cursor), range(8), strict=False)]
    limit = first[-1].scheduled_for + timedelta(seconds=1)
    expected = list(itertools.takewhile(lambda s: s.scheduled_for <= limit,
                                        schedule.slots_after(cursor)))
    counted = 0
    for now in sorted({s.scheduled_for + timedelta(seconds=1) for s in expected}):
        quick = schedule.quick_window(cursor, now)
        general = due_window(schedule, cursor, now)
        assert quick is None or quick == general
        counted += general.count
        if general.last is not None:
            cursor = general.last.scheduled_for
    assert counted == len(expected)


def test_the_common_case_is_quick() -> None:
    """A daily 09:00 Paris job one second after its slot: one due, the next tomorrow, read
    off the quick path (no DST near)."""
    schedule = CronSchedule("0 9 * * *", "Europe/Paris")
    cursor, now = utc(2026, 11, 30, 7, 59, 30), utc(2026, 11, 30, 8, 0, 1)
    quick = schedule.quick_window(cursor, now)
    assert quick is not None and quick.count == 1
    assert quick.candidate is not None and quick.candidate.key == "2026-11-30T09:00[Europe/Paris]"
    assert quick.next_slot is not None
    assert quick.next_slot.scheduled_for == utc(2026, 12, 1, 8, 0)


def test_near_a_transition_the_general_enumeration_decides() -> None:
    """The 02:30 Berlin slot of 2026-03-29 does not exist: the quick path steps aside and
    the window (from the spec, as the tick reads it) records the skipped DST-gap slot."""
    assert TRANSITIONS["Europe/Berlin"]
    schedule = CronSchedule("30 2 * * *", "Europe/Berlin")
    cursor, now = utc(2026, 3, 28, 1, 30), utc(2026, 3, 29, 1, 0, 1)
    assert schedule.quick_window(cursor, now) is None
    spec = parse_spec({"version": 1, "trigger": {"type": "cron", "expr": "30 2 * * *",
                                                 "zone": "Europe/Berlin"}})
    window = spec.window(cursor, now)
    assert window.candidate is not None and not window.candidate.fires
    assert window.candidate.key == "2026-03-29T02:30[Europe/Berlin]"
