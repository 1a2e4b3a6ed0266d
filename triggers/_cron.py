"""Cron schedules in an IANA zone, with the DST rule of DESIGN "Calendar triggers".

croniter parses and expands the expression once (validation); the expanded fields
are kept as bit masks and the *local wall times* that match are enumerated from them
(:meth:`CronExpression.walls_from`: pure calendar arithmetic on naive wall times of the
definition's zone, no DST handling of its own; tests/test_cron_masks.py checks it
against croniter's own stepping). This module maps each wall time to instants:

* fixed-time expressions (neither the minute nor the hour field starts with ``*``):
  a nonexistent wall time is skipped (``skipped_dst_gap``) or, with
  ``dst_gap="run_after"``, runs once at the first instant after the gap; a repeated
  wall time fires once, at its first instant. A wall time on a local *date* that
  does not exist at all (Pacific/Apia's 2011-12-30) has no run under either rule:
  ``run_after`` moves a time within a day that happened, never onto another day
  for a day that never was (DESIGN: "a Friday-noon job has no occurrence that
  week"). It is recorded ``skipped_dst_gap`` like any skipped gap time.
* wildcard expressions: every real instant whose local time matches fires, so a
  repeated hour runs in both folds and a nonexistent hour has no run.

This is Vixie cron's rule (``cron.c``, "DST handling" since 3.0). croniter 7 fires
a fixed 01:30 twice on a fall-back day and, like cronsim, fires a Friday-noon
Pacific/Apia job on Saturday 2011-12-31; neither happens here.
"""

from __future__ import annotations

import calendar
import contextlib
import functools
import re
import zoneinfo
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from typing import Any, Literal, NamedTuple

from croniter import CroniterBadCronError, CroniterError, croniter

from ._calendar import DueWindow
from ._errors import NonAdvancingScheduleError, NoOccurrenceError, SpecError, SpecProblems
from ._slots import Slot, SlotSkip, cron_slot_key
from ._zones import WallKind, WallTime, _known_zones, classify_wall, load_zone

__all__ = ["CronExpression", "CronSchedule", "DstGap"]

DstGap = Literal["skip", "run_after"]

_FIELD_NAMES = ("minute", "hour", "day-of-month", "month", "day-of-week")
_NUMERIC = re.compile(r"[0-9*,/\-]+")  # matched whole (fullmatch)
_NAMED = re.compile(r"[0-9A-Za-z*,/\-]+")
_MONTHS = {m.lower() for m in calendar.month_abbr if m}
_DAYS = {d.lower() for d in calendar.day_abbr}
_FIELD = "trigger.expr"


class CronExpression(NamedTuple):
    """A validated 5-field cron expression (minute hour day-of-month month day-of-week).

    Attributes:
        text: the expression, fields separated by one space.
        fixed_time: True when neither the minute nor the hour field starts with ``*``.
        day_or: True when day-of-month and day-of-week are both restricted (neither
            starts with ``*``), which means OR, as in Vixie cron; otherwise AND.
        masks: the expanded fields as bit masks (bit ``n`` set when value ``n``
            matches): minute (0-59), hour (0-23), day of month (1-31), month (1-12),
            day of week (0-6, Sunday 0). Expanded once, by croniter, when the text is
            parsed; stepping through matching wall times is bit arithmetic on them
            (:meth:`walls_from`), with no parsing on the hot path.
    """

    text: str
    fixed_time: bool
    day_or: bool
    masks: tuple[int, int, int, int, int]

    @classmethod
    def parse(cls, text: str, field: str = _FIELD) -> CronExpression:
        """Validate ``text``.

        Raises:
            SpecError: not 5 fields, a character or extension Vixie cron does not
                have (``L``, ``W``, ``#``, ``?``, ``H``, seconds), or an out-of-range value.
            NoOccurrenceError: the expression can never match (e.g. ``0 0 31 2 *``).
        """
        fields = text.split()
        if len(fields) != 5:
            raise SpecError(
                field,
                f"{text!r} has {len(fields)} field{'' if len(fields) == 1 else 's'}; a cron "
                "expression has exactly 5 "
                "(minute hour day-of-month month day-of-week).",
                "write e.g. '0 9 * * 1' for 09:00 every Monday; seconds, years and "
                "@nicknames are not supported.",
            )
        found = SpecProblems()
        for index, value in enumerate(fields):  # every bad field at once
            with found.check():
                _check_field(index, value, field)
        found.raise_if_any()
        normal = " ".join(_vixie(index, value) for index, value in enumerate(fields))
        try:
            expanded, _ = croniter.expand(normal)
        except (CroniterBadCronError, CroniterError, ValueError) as exc:
            raise SpecError(
                field, f"{text!r} is not a valid cron expression ({exc}).", _RANGES_FIX
            ) from exc
        day_or = not (fields[2].startswith("*") or fields[4].startswith("*"))
        _require_some_day(expanded, day_or, text, field)
        fixed = not (fields[0].startswith("*") or fields[1].startswith("*"))
        return cls(normal, fixed, day_or, _masks(expanded))

    def matches(self, wall: datetime) -> bool:
        """Whether the naive local wall time ``wall`` (seconds ignored) matches."""
        minutes, hours = self.masks[0], self.masks[1]
        return bool((minutes >> wall.minute) & (hours >> wall.hour) & 1) and self._day(wall)

    def _day(self, day: date | datetime) -> bool:
        _, _, doms, months, dows = self.masks
        if not (months >> day.month) & 1:
            return False
        dom = (doms >> day.day) & 1
        dow = (dows >> _CRON_WEEKDAY[day.weekday()]) & 1
        return bool(dom | dow if self.day_or else dom & dow)

    def walls_from(self, start: datetime) -> Iterator[datetime]:
        """Matching naive wall times at or after the naive ``start`` (minute resolution:
        a ``start`` with seconds begins at the next minute), increasing, up to the last
        day :class:`datetime` can hold. Pure calendar arithmetic: no zone, no DST."""
        if start.second or start.microsecond:
            start = start.replace(second=0, microsecond=0) + _ONE_MINUTE
        wall = self.first_wall(start)
        while wall is not None:
            yield wall
            if wall.hour == 23 and wall.minute == 59 and wall.date() == date.max:
                return
            wall = self.first_wall(wall + _ONE_MINUTE)

    def first_wall(self, start: datetime) -> datetime | None:
        """The first matching wall time at or after the naive, minute-aligned ``start``;
        ``None`` past the last day :class:`datetime` can hold."""
        minutes, hours = self.masks[0], self.masks[1]
        day: date | None = start.date()
        hour, minute = start.hour, start.minute
        while day is not None:
            if self._day(day):
                h = _next_bit(hours, hour)
                while h >= 0:
                    m = _next_bit(minutes, minute if h == hour else 0)
                    if m >= 0:
                        return datetime(day.year, day.month, day.day, h, m)  # noqa: DTZ001 - a wall
                    h = _next_bit(hours, h + 1)
            if day == date.max:
                return None
            day, hour, minute = self._next_day(day + _ONE_DAY), 0, 0
        return None

    def _next_day(self, day: date) -> date | None:
        """The first day at or after ``day`` in a month of the expression (``None``
        past :attr:`date.max`): whole months without a match are skipped at once."""
        months = self.masks[3]
        year, month = day.year, day.month
        if (months >> month) & 1:
            return day
        while True:
            month += 1
            if month > 12:
                year, month = year + 1, 1
                if year > date.max.year:
                    return None
            if (months >> month) & 1:
                return date(year, month, 1)


_ONE_DAY = timedelta(days=1)
_ZONES: dict[str, zoneinfo.ZoneInfo] = {}
"""Zones already loaded by name (loading checks the name against the tz database)."""


def stored_zone(name: str) -> zoneinfo.ZoneInfo:
    """The zone of a schedule read back from the store: its name was checked when the
    spec was proposed, so it is loaded without listing the tz database again (which
    :func:`~triggers._zones.load_zone` does once per process: 25 ms, at the first due
    instant of a supervisor otherwise). Remembered for :class:`CronSchedule`.

    Raises:
        zoneinfo.ZoneInfoNotFoundError: the tz database no longer has ``name``.
    """
    zone = _ZONES.get(name)
    if zone is None:
        zone = _ZONES[name] = zoneinfo.ZoneInfo(name)
    return zone


def preload_zones() -> int:
    """Load every zone of the tz database (:func:`stored_zone`) and return how many are
    loaded: a supervisor does this once as it starts, so that its first due instant
    does not read zone files (a few hundred distinct zones cost some 15 ms of CPU,
    spent otherwise between the due instant and the first tasks). About 600 zones."""
    for name in sorted(_known_zones()):
        with contextlib.suppress(zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
            stored_zone(name)
    return len(_ZONES)
_CRON_WEEKDAY = (1, 2, 3, 4, 5, 6, 0)
"""Python's ``date.weekday()`` (Monday 0) -> cron's day of week (Sunday 0)."""
_FULL = {0: (0, 59), 1: (0, 23), 2: (1, 31), 3: (1, 12), 4: (0, 6)}


def _masks(expanded: list[list[object]]) -> tuple[int, int, int, int, int]:
    """croniter's expanded fields (lists of ints, or ``['*']``) as bit masks."""
    masks = []
    for index, values in enumerate(expanded[:5]):
        low, high = _FULL[index]
        numbers = range(low, high + 1) if values == ["*"] else [int(str(v)) for v in values]
        mask = 0
        for number in numbers:
            mask |= 1 << (0 if index == 4 and number == 7 else number)
        masks.append(mask)
    return masks[0], masks[1], masks[2], masks[3], masks[4]


def _next_bit(mask: int, start: int) -> int:
    """The smallest set bit of ``mask`` at or above ``start``, or -1."""
    rest = mask >> start
    if not rest:
        return -1
    return start + (rest & -rest).bit_length() - 1


_RANGES_FIX = (
    "use minute 0-59, hour 0-23, day-of-month 1-31, month 1-12 or jan-dec, "
    "day-of-week 0-7 or sun-sat, with '*', ',', '-' and '/'."
)


def _check_field(index: int, value: str, field: str) -> None:
    name = _FIELD_NAMES[index]
    allowed = _NAMED if index in (3, 4) else _NUMERIC
    words = set(re.findall(r"[A-Za-z]+", value))
    known = _MONTHS if index == 3 else _DAYS
    if not allowed.fullmatch(value) or (words and not {w.lower() for w in words} <= known):
        raise SpecError(
            field,
            f"the {name} field {value!r} uses syntax that 5-field Vixie cron does not have "
            "(L, W, #, ?, H and the like are extensions).",
            _RANGES_FIX,
        )
    for low, high in re.findall(r"([0-9A-Za-z]+)-([0-9A-Za-z]+)", value):
        if _number(low, index) > _number(high, index):
            raise SpecError(
                field,
                f"the {name} field {value!r} has the reversed range {low}-{high}.",
                "write ranges low-high; list wrapping values instead (e.g. '22,23,0-2').",
            )


def _vixie(index: int, value: str) -> str:
    """Rewrite a field so croniter reads it as Vixie cron does.

    croniter reads an equal-ended range (``5-5``, ``sat-sat``, ``13-13/2``) as a full
    wrap-around; Vixie reads it as the single value. In day-of-week, Vixie's maximum is
    7 (Sunday again), so ``a/n`` means ``a-7/n``; croniter stops at 6.
    """
    tokens = []
    for token in value.split(","):
        match = re.fullmatch(r"([0-9A-Za-z]+)-([0-9A-Za-z]+)(/\d+)?", token)
        if match and _number(match.group(1), index) == _number(match.group(2), index):
            token = match.group(1)
        elif index == 4 and re.fullmatch(r"[0-9A-Za-z]+/\d+", token):
            start, step = token.split("/")
            token = f"{start}-7/{step}"
        tokens.append(token)
    return ",".join(tokens)


def _number(token: str, index: int) -> int:
    if token.isdigit():
        return int(token)
    names = [m.lower() for m in calendar.month_abbr] if index == 3 else _DAY_ORDER
    return names.index(token.lower())


_DAY_ORDER = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"]


def _require_some_day(expanded: list[list[object]], day_or: bool, text: str, field: str) -> None:
    """Reject expressions whose (month, day-of-month) pairs never exist.

    With OR semantics any restricted day-of-week matches some day of every month,
    so only the AND case (or an unrestricted day-of-week) can be empty. Every valid
    (month, day) date falls on every weekday within 28 years, so a restricted
    day-of-week never empties a non-empty date set.
    """
    doms, months = expanded[2], expanded[3]
    if day_or or doms == ["*"]:
        return
    month_list = range(1, 13) if months == ["*"] else [int(str(m)) for m in months]
    longest = {m: calendar.monthrange(2000, m)[1] for m in month_list}  # 2000: Feb has 29
    if any(isinstance(d, int) and d <= longest[m] for m in month_list for d in doms):
        return
    raise NoOccurrenceError(
        field,
        f"{text!r} never fires: none of its days of month exists in its months.",
        "pick a day that exists in one of the months (February has at most 29 days; "
        "April, June, September and November have 30).",
    )


class CronSchedule:
    """Occurrences of a cron expression in an IANA zone.

    Args:
        expr: a :class:`CronExpression` (or its text, validated here).
        zone: IANA zone name; required.
        dst_gap: what a fixed-time slot in a spring-forward gap does:
            ``"skip"`` (default) or ``"run_after"``.

    Raises:
        SpecError: bad expression or zone.
    """

    __slots__ = ("dst_gap", "expr", "zone", "zone_name")

    def __init__(self, expr: CronExpression | str, zone: str, dst_gap: DstGap = "skip") -> None:
        self.expr = expr if isinstance(expr, CronExpression) else CronExpression.parse(expr)
        self.zone_name = zone
        zones = _ZONES.get(zone)
        self.zone = zones if zones is not None else load_zone(zone, "trigger.zone")
        _ZONES.setdefault(zone, self.zone)
        self.dst_gap = dst_gap

    def __repr__(self) -> str:
        return f"CronSchedule({self.expr.text!r}, {self.zone_name!r}, dst_gap={self.dst_gap!r})"

    def slots_after(self, after: datetime) -> Iterator[Slot]:
        """Yield the slots strictly after the aware instant ``after``, in order.

        Firing slots have strictly increasing ``scheduled_for``; a skipped DST-gap
        slot may share its instant with the slot that follows the gap.

        Raises:
            NonAdvancingScheduleError: the underlying enumeration repeated itself.
        """
        after = after.astimezone(UTC)
        walls = _walls_from(self.expr, self._start_wall(after))
        yield from _emit_after(self._slots_in_wall_order(walls), after)

    def quick_window(self, cursor: datetime, now: datetime, *, until: datetime | None = None,
                     remaining: int | None = None) -> DueWindow | None:
        """:func:`~triggers.due_window` of this schedule in its common case, in a few
        microseconds; ``None`` when the general enumeration must decide.

        The common case: the cursor's wall time and the next two matching wall times
        each belong to exactly one instant (no DST transition touches them), at most one
        slot is due, and the ends are not near. Then the slots are plain (fold 0, no skip,
        no note) and lie in wall order, so the window is read off two steps of the masks.
        ``tests/test_cron_quick.py`` checks (hypothesis) that it equals the general
        enumeration wherever it answers, DST zones included.
        """
        if remaining is not None and remaining < 2:
            return None
        zone, name = self.zone, self.zone_name
        start = _minute_after(cursor, zone, name)
        if start is None:
            return None
        expr = self.expr
        wall = expr.first_wall(start)
        if wall is None:
            return None
        first = _plain_slot(wall, zone, name)
        if first is None:
            return None
        if first.scheduled_for > now:
            if until is not None and first.scheduled_for > until:
                return None
            return DueWindow(0, None, None, None, None, first)
        after = expr.first_wall(wall + _ONE_MINUTE)
        second = None if after is None else _plain_slot(after, zone, name)
        if second is None or second.scheduled_for <= now or (
                until is not None and second.scheduled_for > until):
            return None
        return DueWindow(1, first, first, None, None, second)

    def _start_wall(self, after: datetime) -> datetime:
        """The earliest wall time whose instants can lie after ``after``.

        If ``after`` is the first copy of a repeated wall time, the second copies of
        the earlier wall times of that fold still lie ahead: look back by the fold.
        """
        local = after.astimezone(self.zone)
        wall = local.replace(tzinfo=None, fold=0)
        if local.fold == 0:
            classified = classify_wall(wall, self.zone)
            if classified.kind is WallKind.AMBIGUOUS:
                return wall - (classified.instants[1] - classified.instants[0])
        return wall

    def _slots_in_wall_order(self, walls: Iterator[datetime]) -> Iterator[Slot]:
        """Map wall times to slots, holding back second fold copies until the fold ends."""
        held: list[Slot] = []
        for wall in walls:
            classified = classify_wall(wall, self.zone)
            if classified.kind is not WallKind.AMBIGUOUS:
                yield from held
                held.clear()
            for slot in self._slots_of(classified):
                if slot.fold == 1:
                    held.append(slot)
                else:
                    yield slot

    def _slots_of(self, wt: WallTime) -> list[Slot]:
        key = functools.partial(cron_slot_key, wt.wall, self.zone_name)
        if wt.kind is WallKind.UNIQUE:
            return [Slot(key(0), wt.instants[0], self.zone_name, wt.wall)]
        if wt.kind is WallKind.AMBIGUOUS:
            return self._fold_slots(wt, key(0), key(1))
        if not self.expr.fixed_time:
            return []  # a wildcard expression simply has no run in a missing hour
        assert wt.gap_end is not None
        note = self._gap_note(wt)
        if self.dst_gap == "run_after" and self._day_missing(wt):
            return [Slot(key(0), wt.gap_end, self.zone_name, wt.wall, skip=SlotSkip.DST_GAP,
                         note=note + _NO_DAY)]
        if self.dst_gap == "run_after":
            after_gap = wt.gap_end.astimezone(self.zone).replace(tzinfo=None)
            if after_gap.second == 0 and after_gap.microsecond == 0 and self.expr.matches(after_gap):
                return []  # the first instant after the gap is a slot of its own
            return [Slot(key(0), wt.gap_end, self.zone_name, wt.wall, note=note + _RUN_AFTER)]
        return [Slot(key(0), wt.gap_end, self.zone_name, wt.wall, skip=SlotSkip.DST_GAP,
                     note=note + "; skipped (dst_gap=skip).")]

    def _fold_slots(self, wt: WallTime, first_key: str, second_key: str) -> list[Slot]:
        first, second = wt.instants
        shown = f"{wt.wall:%H:%M} on {wt.wall:%Y-%m-%d} occurs twice in {self.zone_name}"
        first_off, second_off = _offset(first, self.zone), _offset(second, self.zone)
        if self.expr.fixed_time:
            note = f"{shown}; a fixed-time schedule fires once, at the first ({first_off})."
            return [Slot(first_key, first, self.zone_name, wt.wall, note=note)]
        return [
            Slot(first_key, first, self.zone_name, wt.wall,
                 note=f"{shown}; this is the first ({first_off})."),
            Slot(second_key, second, self.zone_name, wt.wall, fold=1,
                 note=f"{shown}; this is the second ({second_off})."),
        ]

    def _gap_walls(self, wt: WallTime) -> tuple[datetime, datetime]:
        """The local wall times the clocks jump from and to (the gap is [from, to))."""
        assert wt.gap_end is not None
        before = (wt.gap_end - timedelta(microseconds=1)).astimezone(self.zone)
        before += timedelta(microseconds=1)  # wall arithmetic: the local time the gap starts at
        return before, wt.gap_end.astimezone(self.zone)

    def _day_missing(self, wt: WallTime) -> bool:
        """Whether no instant at all has ``wt``'s local date (the gap covers the whole
        day, as Pacific/Apia's 2011-12-30)."""
        before, after = (w.replace(tzinfo=None) for w in self._gap_walls(wt))
        midnight = datetime.combine(wt.wall.date(), datetime.min.time())
        return before <= midnight and after >= midnight + timedelta(days=1)

    def _gap_note(self, wt: WallTime) -> str:
        before, after = self._gap_walls(wt)
        shape = "%H:%M" if before.date() == after.date() else "%Y-%m-%d %H:%M"
        return (
            f"{wt.wall:%H:%M} does not exist on {wt.wall:%Y-%m-%d} in {self.zone_name} "
            f"(clocks jump from {before:{shape}} to {after:{shape}}{_fmt_offset(after)})"
        )


_ONE_MINUTE = timedelta(minutes=1)


def _plain_slot(wall: datetime, zone: zoneinfo.ZoneInfo, zone_name: str) -> Slot | None:
    """The slot of a matching naive ``wall`` if exactly one instant has it (it reads the
    same in both folds, PEP 495), else ``None``. Remembered per (zone, wall): definitions
    due at one instant share their zones' wall times, and a slot is an immutable value."""
    key = (zone_name, wall)
    found = _PLAIN.get(key, _UNSEEN)
    if found is not _UNSEEN:
        return found  # type: ignore[return-value]
    offset = zone.utcoffset(wall)
    year, month, day, hour, minute = wall.year, wall.month, wall.day, wall.hour, wall.minute
    slot = None
    if offset is not None and offset == zone.utcoffset(
            datetime(year, month, day, hour, minute, fold=1)):  # noqa: DTZ001 - a wall time
        slot = Slot(f"{wall.isoformat(timespec='minutes')}[{zone_name}]",
                    datetime(year, month, day, hour, minute, 0, 0, UTC) - offset, zone_name, wall)
    _remember(_PLAIN, key, slot)
    return slot


def _minute_after(cursor: datetime, zone: zoneinfo.ZoneInfo, zone_name: str) -> datetime | None:
    """The naive local minute after the aware ``cursor``'s wall time in ``zone``, when
    exactly one instant has that wall time (else ``None``). Remembered per (zone, cursor):
    the definitions of one due instant share their cursors."""
    key = (zone_name, cursor)
    found = _MINUTES.get(key, _UNSEEN)
    if found is not _UNSEEN:
        return found  # type: ignore[return-value]
    local = cursor.astimezone(zone)
    start = None
    if not local.fold and zone.utcoffset(datetime(  # noqa: DTZ001 - the wall, second fold
            local.year, local.month, local.day, local.hour, local.minute, local.second,
            local.microsecond, fold=1)) == local.utcoffset():
        start = datetime(  # noqa: DTZ001 - a wall time
            local.year, local.month, local.day, local.hour, local.minute) + _ONE_MINUTE
    _remember(_MINUTES, key, start)
    return start


_UNSEEN = object()
_PLAIN: dict[tuple[str, datetime], Slot | None] = {}
_MINUTES: dict[tuple[str, datetime], datetime | None] = {}
_REMEMBERED = 65_536
"""Entries kept in each of those two memories (then it starts over): a few MiB."""


def _remember(memory: dict[Any, Any], key: Any, value: Any) -> None:
    if len(memory) >= _REMEMBERED:
        memory.clear()
    memory[key] = value


_RUN_AFTER = "; runs once at the first instant after the gap (dst_gap=run_after)."
_NO_DAY = ("; the whole day does not exist, so it has no run (dst_gap=run_after moves a time "
           "only within a day that happened).")


def _offset(instant: datetime, zone: zoneinfo.ZoneInfo) -> str:
    return _fmt_offset(instant.astimezone(zone))


def _fmt_offset(local: datetime) -> str:
    text = local.strftime("%z")
    return f"{text[:3]}:{text[3:]}"


def _walls_from(expr: CronExpression, start: datetime) -> Iterator[datetime]:
    """Matching naive wall times at or after ``start`` (minute resolution), increasing.

    Raises:
        NonAdvancingScheduleError: the enumeration returned a wall time not after the last.
    """
    previous: datetime | None = None
    for wall in expr.walls_from(start):
        if previous is not None and wall <= previous:
            raise NonAdvancingScheduleError(
                f"cron {expr.text!r} returned {wall.isoformat()} after {previous.isoformat()}"
            )
        previous = wall
        yield wall


def _emit_after(slots: Iterator[Slot], after: datetime) -> Iterator[Slot]:
    """Drop slots at or before ``after``; merge run_after slots that share an instant;
    guard monotonicity."""
    last_fire: datetime | None = None
    last_any = after
    for slot in slots:
        if slot.scheduled_for <= after:
            continue
        merged = slot.fires and last_fire is not None and slot.scheduled_for == last_fire
        if merged and slot.note and slot.note.endswith(_RUN_AFTER):
            continue  # several nonexistent times mapped to one instant fire once
        if slot.scheduled_for < last_any or (
            slot.fires and last_fire is not None and slot.scheduled_for <= last_fire
        ):
            raise NonAdvancingScheduleError(
                f"slot {slot.key} at {slot.scheduled_for.isoformat()} does not advance "
                f"past {max(last_any, last_fire or last_any).isoformat()}"
            )
        last_any = slot.scheduled_for
        if slot.fires:
            last_fire = slot.scheduled_for
        yield slot
