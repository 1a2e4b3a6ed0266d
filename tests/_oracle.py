"""An independent, deliberately naive cron oracle for the property tests.

It parses 5-field Vixie expressions itself (no croniter) and finds firing instants
by walking every UTC minute of a window and looking at the local wall time, which
is slow but obviously right. DESIGN's rule, restated for the oracle:

- wildcard expression: every UTC minute whose local wall time matches fires;
- fixed-time expression: a matching wall time fires at its first instant only
  (``fold == 0``); a matching wall time inside a gap is skipped, or with
  ``run_after`` fires once at the transition instant, unless the wall time of the
  transition instant itself matches (it fires anyway) or its local date never
  happened at all (no minute before or after the jump carries that date: skipped).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

_MONTHS = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
_DAYS = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"]
_BOUNDS = [(0, 59), (0, 23), (1, 31), (1, 12), (0, 7)]


def _value(token: str, index: int) -> int:
    if token.isdigit():
        return int(token)
    if index == 3:
        return _MONTHS.index(token.lower()) + 1
    return _DAYS.index(token.lower())


def _field(text: str, index: int) -> set[int]:
    low, high = _BOUNDS[index]
    values: set[int] = set()
    for item in text.split(","):
        span, _, step_text = item.partition("/")
        step = int(step_text) if step_text else 1
        if span == "*":
            start, stop = low, high
        elif "-" in span:
            a, b = span.split("-")
            start, stop = _value(a, index), _value(b, index)
        else:
            start = _value(span, index)
            stop = high if step_text else start
        values.update(range(start, stop + 1, step))
    if index == 4 and 7 in values:
        values.add(0)
    return values


class Oracle:
    """Matcher for one expression."""

    def __init__(self, expr: str) -> None:
        fields = expr.split()
        self.sets = [_field(f, i) for i, f in enumerate(fields)]
        self.fixed = not (fields[0].startswith("*") or fields[1].startswith("*"))
        self.day_or = not (fields[2].startswith("*") or fields[4].startswith("*"))

    def matches(self, wall: datetime) -> bool:
        """Does the naive wall time match?"""
        minute, hour, dom, month, dow = self.sets
        if wall.minute not in minute or wall.hour not in hour or wall.month not in month:
            return False
        weekday = (wall.weekday() + 1) % 7
        if self.day_or:
            return wall.day in dom or weekday in dow
        return wall.day in dom and weekday in dow

    def fires(self, zone: str, start: datetime, end: datetime, run_after: bool) -> list[datetime]:
        """Firing instants in ``(start, end]`` (UTC, minute resolution)."""
        tz = ZoneInfo(zone)
        out: list[datetime] = []
        t = start.replace(second=0, microsecond=0) + timedelta(minutes=1)
        previous_offset = (t - timedelta(minutes=1)).astimezone(tz).utcoffset()
        while t <= end:
            local = t.astimezone(tz)
            offset = local.utcoffset()
            assert offset is not None and previous_offset is not None
            if self.fixed and run_after and offset > previous_offset:
                out.extend(self._after_gap(t, tz, previous_offset, offset))
            wall = local.replace(tzinfo=None)
            fires = self.matches(wall) and (not self.fixed or local.fold == 0)
            if fires and (not out or out[-1] != t):
                out.append(t)
            previous_offset = offset
            t += timedelta(minutes=1)
        return out

    def gap_skips(self, zone: str, start: datetime, end: datetime,
                  run_after: bool = False) -> list[datetime]:
        """Transition instants in ``(start, end]`` where a fixed expression loses a wall
        time (with ``run_after``, only the wall times of dates that never happened)."""
        if not self.fixed:
            return []
        tz = ZoneInfo(zone)
        out = []
        t = start.replace(second=0, microsecond=0) + timedelta(minutes=1)
        previous = (t - timedelta(minutes=1)).astimezone(tz).utcoffset()
        while t <= end:
            offset = t.astimezone(tz).utcoffset()
            assert offset is not None and previous is not None
            if offset > previous:
                missing = self._missing(t, tz, previous, offset)
                if run_after:
                    missing = [w for w in missing if not self._date_happened(w, t, tz)]
                out.extend(t for _ in missing)
            previous = offset
            t += timedelta(minutes=1)
        return out

    def _missing(self, t: datetime, tz: ZoneInfo, before: timedelta, after: timedelta) -> list[datetime]:
        gap_start = (t + before).replace(tzinfo=None)
        gap_end = (t + after).replace(tzinfo=None)
        walls = []
        w = gap_start
        while w < gap_end:
            if self.matches(w):
                walls.append(w)
            w += timedelta(minutes=1)
        return walls

    @staticmethod
    def _date_happened(wall: datetime, t: datetime, tz: ZoneInfo) -> bool:
        """Whether ``wall``'s date is the local date of the minute before the jump at
        ``t`` or of ``t`` itself (a date between the two never happened)."""
        around = {(t - timedelta(minutes=1)).astimezone(tz).date(), t.astimezone(tz).date()}
        return wall.date() in around

    def _after_gap(self, t: datetime, tz: ZoneInfo, before: timedelta, after: timedelta) -> list[datetime]:
        missing = [w for w in self._missing(t, tz, before, after) if self._date_happened(w, t, tz)]
        if not missing:
            return []
        if self.matches(t.astimezone(tz).replace(tzinfo=None)):
            return []  # the wall time at the transition fires on its own
        return [t]


def utc(y: int, mo: int, d: int, h: int = 0, mi: int = 0) -> datetime:
    """Shorthand for an aware UTC datetime."""
    return datetime(y, mo, d, h, mi, tzinfo=UTC)
