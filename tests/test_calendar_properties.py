"""Property tests (hypothesis) for the calendars, against an independent oracle."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from _oracle import Oracle, utc
from hypothesis import example, given, settings
from hypothesis import strategies as st

from watchkeeper.triggers import (
    CronSchedule,
    IntervalSchedule,
    Slot,
    due_window,
    jitter_offset,
)

ZONES = [
    "Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Antarctica/Troll",
    "America/Santiago", "Asia/Beirut", "Pacific/Apia", "Europe/London", "UTC", "Asia/Kolkata",
    "Pacific/Kwajalein", "Asia/Singapore",
]
YEARS = {"Pacific/Apia": 2011, "Pacific/Kwajalein": 1993, "Asia/Singapore": 1981}
"""Zones studied in the year of a whole missing day (Apia, Kwajalein) or of a gap across
midnight of a day that did happen (Singapore); the others in 2026."""
MINUTES = ["*", "*/15", "*/45", "0", "30", "0,30", "15", "5/20", "10-20/5", "59", "5-5", "58-58/4"]
HOURS = ["*", "*/3", "0", "1", "2", "3", "1-3", "0-23/2", "23", "12", "22-23"]
DOMS = ["*", "*", "*", "1", "15", "*/2", "1-7", "31", "29", "13-13"]
MONTHS = ["*", "*", "1-12", "3,4,9,10,11", "*/2"]
DOWS = ["*", "*", "1-5", "0", "5", "6,0", "mon", "sat-sat", "1-1,3", "1/6", "7"]


def _transitions(zone: str, year: int) -> list[datetime]:
    tz = ZoneInfo(zone)
    t = datetime(year, 1, 1, tzinfo=UTC)
    previous = t.astimezone(tz).utcoffset()
    found = []
    while t.year == year:
        t += timedelta(hours=1)
        offset = t.astimezone(tz).utcoffset()
        if offset != previous:
            found.append(t)
        previous = offset
    return found


TRANSITIONS = {z: _transitions(z, YEARS.get(z, 2026)) for z in ZONES}


@st.composite
def windows(draw: st.DrawFn) -> tuple[str, datetime, datetime]:
    """A zone and a (start, end] window of up to 2 days near one of its transitions."""
    zone = draw(st.sampled_from(ZONES))
    points = TRANSITIONS[zone] or [datetime(2026, 6, 1, tzinfo=UTC)]
    centre = draw(st.sampled_from(points))
    start = centre - timedelta(minutes=draw(st.integers(0, 30 * 60)))
    start += timedelta(seconds=draw(st.sampled_from([0, 0, 1, 59])))
    end = start + timedelta(minutes=draw(st.integers(1, 48 * 60)))
    return zone, start, end


expressions = st.builds(
    lambda *f: " ".join(f),
    st.sampled_from(MINUTES), st.sampled_from(HOURS), st.sampled_from(DOMS),
    st.sampled_from(MONTHS), st.sampled_from(DOWS),
)


def _slots(schedule: CronSchedule, start: datetime, end: datetime) -> list[Slot]:
    return list(itertools.takewhile(lambda s: s.scheduled_for <= end, schedule.slots_after(start)))


@settings(max_examples=150, deadline=None)
@given(expressions, windows(), st.booleans())
@example("0 12 * * *", ("Pacific/Apia", utc(2011, 12, 29), utc(2011, 12, 31, 23)), True)
@example("0 0 * * *", ("Pacific/Kwajalein", utc(1993, 8, 20), utc(1993, 8, 22)), True)
@example("30 23 * * *", ("Asia/Singapore", utc(1981, 12, 31), utc(1982, 1, 1, 12)), True)
def test_cron_fires_exactly_where_the_oracle_does(
    expr: str, window: tuple[str, datetime, datetime], run_after: bool
) -> None:
    """Every firing instant matches the minute-by-minute oracle, in both DST modes."""
    zone, start, end = window
    schedule = CronSchedule(expr, zone, "run_after" if run_after else "skip")
    slots = _slots(schedule, start, end)
    oracle = Oracle(expr)
    assert [s.scheduled_for for s in slots if s.fires] == oracle.fires(zone, start, end, run_after)
    skipped = [s.scheduled_for for s in slots if not s.fires]
    assert skipped == oracle.gap_skips(zone, start, end, run_after)


@settings(max_examples=150, deadline=None)
@given(expressions, windows())
def test_cron_is_strictly_increasing_and_matches_its_wall_time(
    expr: str, window: tuple[str, datetime, datetime]
) -> None:
    """Firing instants strictly increase; every firing slot's local time matches."""
    zone, start, end = window
    slots = _slots(CronSchedule(expr, zone), start, end)
    fires = [s for s in slots if s.fires]
    assert all(a.scheduled_for < b.scheduled_for for a, b in itertools.pairwise(fires))
    oracle = Oracle(expr)
    assert all(oracle.matches(s.local.replace(tzinfo=None)) for s in fires)
    assert all(s.wall == s.local.replace(tzinfo=None) for s in fires)
    assert len({s.key for s in slots}) == len(slots)


@settings(max_examples=150, deadline=None)
@given(expressions, windows(), st.integers(1, 47 * 60))
def test_resuming_from_any_cursor_loses_and_repeats_nothing(
    expr: str, window: tuple[str, datetime, datetime], split_minutes: int
) -> None:
    """Enumerating to a cursor then from it equals enumerating in one go (restart safety)."""
    zone, start, end = window
    mid = min(start + timedelta(minutes=split_minutes, seconds=7), end)
    schedule = CronSchedule(expr, zone)
    whole = _slots(schedule, start, end)
    first = [s for s in whole if s.scheduled_for <= mid]
    assert first + _slots(schedule, mid, end) == whole


@settings(max_examples=300, deadline=None)
@given(
    st.integers(1, 86_400 * 3),
    st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2040, 1, 1), timezones=st.just(UTC)),
    st.integers(-10**6, 10**9),
)
def test_interval_never_drifts(every_s: int, anchor: datetime, offset_s: int) -> None:
    """Every interval slot is anchor + n * every; the first is the smallest after the cursor."""
    every = timedelta(seconds=every_s)
    schedule = IntervalSchedule(every, anchor)
    cursor = anchor + timedelta(seconds=offset_s)
    slots = list(itertools.islice(schedule.slots_after(cursor), 5))
    for slot in slots:
        n, remainder = divmod(slot.scheduled_for - anchor, every)
        assert remainder == timedelta(0) and n >= 0
    assert slots[0].scheduled_for > cursor
    assert slots[0].scheduled_for - every <= cursor or slots[0].scheduled_for == anchor
    assert all(b.scheduled_for - a.scheduled_for == every for a, b in itertools.pairwise(slots))


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 3600), st.integers(0, 500), st.integers(0, 500), st.integers(1, 20))
def test_due_windows_partition_the_calendar(every_s: int, a: int, b: int, limit: int) -> None:
    """Successive windows (tick, tick, ...) cover every slot once, within the ends; an
    interval's arithmetic window equals the enumerated one."""
    every = timedelta(seconds=every_s)
    anchor = datetime(2026, 1, 1, tzinfo=UTC)
    schedule = IntervalSchedule(every, anchor)
    cursor = anchor - timedelta(seconds=1)
    ticks = sorted({anchor + every * a // 7, anchor + every * b // 3, anchor + every * 200})
    seen: list[Slot] = []
    remaining = limit
    for now in ticks:
        window = due_window(schedule, cursor, now, remaining=remaining)
        assert window == _enumerated_window(schedule, cursor, now, remaining)
        if window.span is not None:
            seen.extend([window.span.first, window.span.last][: window.span.count])
            assert window.candidate == window.last == window.span.last
        remaining -= window.count
        if window.last is not None:
            cursor = window.last.scheduled_for
    expected = list(itertools.islice(schedule.slots_after(anchor - timedelta(seconds=1)), limit))
    expected = [s for s in expected if s.scheduled_for <= ticks[-1]]
    assert len(expected) == limit - remaining
    assert {s.key for s in seen} <= {s.key for s in expected}


class _Plain:
    """The same schedule without its arithmetic fast path."""

    def __init__(self, inner: IntervalSchedule) -> None:
        self.inner = inner

    def slots_after(self, after: datetime) -> Any:
        return self.inner.slots_after(after)


def _enumerated_window(schedule: IntervalSchedule, cursor: datetime, now: datetime,
                       remaining: int) -> Any:
    return due_window(_Plain(schedule), cursor, now, remaining=remaining)


@given(st.integers(0, 3_600_000_000), st.text(max_size=20), st.text(max_size=20))
def test_jitter_is_deterministic_and_bounded(span_us: int, a: str, b: str) -> None:
    """Jitter depends only on the key and lies in [0, jitter)."""
    jitter = timedelta(microseconds=span_us)
    first = jitter_offset(jitter, a, b)
    assert first == jitter_offset(jitter, a, b)
    assert timedelta(0) <= first <= max(jitter - timedelta(microseconds=1), timedelta(0))
