"""The bit-mask stepper of cron wall times agrees with croniter's own stepping.

``CronExpression.walls_from`` enumerates matching naive wall times from the fields
croniter expanded at parse time; croniter's ``get_next`` on naive datetimes (the way
this project used it before the masks) is the oracle: same expressions, same starts,
same sequence. Day-of-month/day-of-week OR (Vixie) versus AND is passed to croniter
as ``day_or`` exactly as the expression computes it.
"""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta

from croniter import croniter
from hypothesis import example, given, settings
from hypothesis import strategies as st

from watchkeeper.triggers import CronExpression

MINUTE = ["*", "*/15", "*/45", "0", "30", "0,30", "59", "5/20", "10-20/5", "5-5", "58-58/4",
          "1,2,3,58", "*/7", "0-59/13"]
HOUR = ["*", "*/3", "0", "1", "2", "23", "1-3", "0-23/2", "22-23", "9,17", "*/5", "13-13/2"]
DOM = ["*", "1", "15", "*/2", "1-7", "31", "29", "30", "13-13", "*/10", "28-31", "5,20"]
MONTH = ["*", "1-12", "2", "3,4,9,10,11", "*/2", "feb", "jan,mar", "12", "2-2", "*/5"]
DOW = ["*", "1-5", "0", "5", "6,0", "mon", "sat-sat", "1-1,3", "1/6", "7", "0-7/2", "5-7",
       "sun", "*/3"]


def croniter_walls(expr: CronExpression, start: datetime, count: int) -> list[datetime]:
    """The oracle: croniter stepping over naive wall times from ``start`` (inclusive)."""
    base = start.replace(second=0, microsecond=0) - timedelta(minutes=1)
    if start.second or start.microsecond:
        base += timedelta(minutes=1)
    it = croniter(expr.text, base, day_or=expr.day_or, max_years_between_matches=100)
    return [it.get_next(datetime) for _ in range(count)]


@st.composite
def expressions(draw: st.DrawFn) -> CronExpression:
    """A valid Vixie expression built from field shapes peers' suites use."""
    fields = [draw(st.sampled_from(f)) for f in (MINUTE, HOUR, DOM, MONTH, DOW)]
    try:
        return CronExpression.parse(" ".join(fields))
    except ValueError:  # a day that never exists in its months (e.g. 31 in feb)
        return CronExpression.parse("0 0 * * *")


starts = st.datetimes(min_value=datetime(1990, 1, 1), max_value=datetime(2090, 12, 31))


@settings(max_examples=400, deadline=None)
@given(expressions(), starts, st.integers(1, 40))
@example(CronExpression.parse("0 0 29 2 *"), datetime(2026, 3, 1), 3)
@example(CronExpression.parse("0 0 29 2 1"), datetime(2026, 3, 1), 2)
@example(CronExpression.parse("*/45 23 31 12 *"), datetime(2026, 12, 31, 23, 44, 59), 4)
@example(CronExpression.parse("0 12 13 * 5"), datetime(2026, 2, 12, 12, 0, 1), 5)
def test_walls_agree_with_croniter(expr: CronExpression, start: datetime, count: int) -> None:
    """The first ``count`` matching wall times from ``start`` are croniter's."""
    ours = list(itertools.islice(expr.walls_from(start), count))
    assert ours == croniter_walls(expr, start, count)


@settings(max_examples=300, deadline=None)
@given(expressions(), starts)
def test_matches_agrees_with_croniter(expr: CronExpression, wall: datetime) -> None:
    """``matches`` is croniter's ``match`` for the same expression and day rule."""
    minute = wall.replace(second=0, microsecond=0)
    assert expr.matches(minute) == croniter.match(expr.text, minute, day_or=expr.day_or)


def test_masks_hold_the_expanded_fields() -> None:
    """Each mask has exactly the values croniter expands (Sunday as 0 and 7 alike)."""
    expr = CronExpression.parse("*/20 9-11 1,15 jan,jul 0-7/7")
    minute, hour, dom, month, dow = expr.masks
    assert [b for b in range(60) if minute >> b & 1] == [0, 20, 40]
    assert [b for b in range(24) if hour >> b & 1] == [9, 10, 11]
    assert [b for b in range(32) if dom >> b & 1] == [1, 15]
    assert [b for b in range(13) if month >> b & 1] == [1, 7]
    assert [b for b in range(7) if dow >> b & 1] == [0]


def test_walls_stop_at_the_last_representable_day() -> None:
    """Stepping ends after 9999-12-31 instead of overflowing."""
    expr = CronExpression.parse("0 12 * * *")
    assert list(expr.walls_from(datetime(9999, 12, 30, 13, 0))) == [datetime(9999, 12, 31, 12, 0)]
