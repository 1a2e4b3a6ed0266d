"""Interval and at schedules, ends, and the window of due slots.

Boundaries come from the declared cadence, never from when a worker arrived:
an interval's occurrence n is ``anchor + n * every`` for n = 0, 1, 2, ...
(DESIGN "Calendar triggers"; seed 002 "Do not let catch-up create cadence drift").
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple, Protocol

from ._errors import NonAdvancingScheduleError
from ._slots import Slot, utc_slot_key

__all__ = ["AtSchedule", "Calendar", "DueWindow", "IntervalSchedule", "SlotRange", "due_window"]


class Calendar(Protocol):
    """Anything that enumerates slots in order."""

    def slots_after(self, after: datetime) -> Iterator[Slot]:
        """Slots strictly after the aware instant ``after``, in increasing order."""
        ...


class IntervalSchedule:
    """A fixed elapsed duration anchored at a UTC instant; unaffected by DST.

    Args:
        every: the period, > 0 (the minimum resolution is checked at proposal).
        anchor: aware instant of occurrence 0.

    Raises:
        ValueError: ``every`` is not positive or ``anchor`` is naive.
    """

    def __init__(self, every: timedelta, anchor: datetime) -> None:
        if every <= timedelta(0):
            raise ValueError("every must be positive")
        if anchor.tzinfo is None:
            raise ValueError("anchor must be aware")
        self.every = every
        self.anchor = anchor.astimezone(UTC)
        self._slots: dict[int, Slot] = {}  # slot n, made once (a poll's next is the next's last)

    def __repr__(self) -> str:
        return f"IntervalSchedule(every={self.every!r}, anchor={self.anchor.isoformat()})"

    def slots_after(self, after: datetime) -> Iterator[Slot]:
        """Yield ``anchor + n * every`` for every n >= 0 with the instant > ``after``."""
        for n in itertools.count(self._first_after(after)):
            yield self._slot(n)

    def _first_after(self, instant: datetime) -> int:
        """The smallest n >= 0 with ``anchor + n * every > instant``."""
        instant = instant.astimezone(UTC)
        return 0 if instant < self.anchor else (instant - self.anchor) // self.every + 1

    def _slot(self, n: int) -> Slot:
        slot = self._slots.get(n)
        if slot is None:
            if len(self._slots) >= 4096:
                self._slots.clear()
            instant = self.anchor + n * self.every
            slot = self._slots[n] = Slot(utc_slot_key(instant), instant, "UTC",
                                         instant.replace(tzinfo=None))
        return slot

    def window(self, cursor: datetime, now: datetime, *, until: datetime | None = None,
               remaining: int | None = None) -> DueWindow:
        """:func:`due_window` by arithmetic: exact counts in O(1) for any outage."""
        first = self._first_after(cursor)
        stop = self._first_after(now)  # first index after now
        if until is not None:
            stop = min(stop, self._first_after(until))
            end = self._first_after(until)
        else:
            end = None
        if remaining is not None:
            stop = min(stop, first + remaining)
            end = first + remaining if end is None else min(end, first + remaining)
        count = max(stop - first, 0)
        nxt = max(stop, first)
        next_slot = None if end is not None and nxt >= end else self._slot(nxt)
        if count == 0:
            return DueWindow(0, None, None, None, None, next_slot)
        last = self._slot(stop - 1)
        before = SlotRange(self._slot(first), self._slot(stop - 2), count - 1) if count > 1 else None
        return DueWindow(count, last, last, before, None, next_slot)


class AtSchedule:
    """One instant.

    Args:
        instant: aware instant (UTC or not; stored as UTC).
        zone: the IANA zone it was given in (kept for display).
        wall: the local wall time as given, if it was given as one.
        note: a remark made when it was resolved (e.g. a repeated wall time).
    """

    def __init__(self, instant: datetime, zone: str = "UTC", note: str | None = None) -> None:
        if instant.tzinfo is None:
            raise ValueError("instant must be aware")
        self.instant = instant.astimezone(UTC)
        self.zone = zone
        self.note = note

    def __repr__(self) -> str:
        return f"AtSchedule({self.instant.isoformat()}, zone={self.zone!r})"

    def slots_after(self, after: datetime) -> Iterator[Slot]:
        """Yield the single slot if it lies after ``after``."""
        if self.instant > after:
            yield Slot(utc_slot_key(self.instant), self.instant, self.zone,
                       self.instant.replace(tzinfo=None), note=self.note)


class SlotRange(NamedTuple):
    """Consecutive slots recorded as one range: first, last and how many."""

    first: Slot
    last: Slot
    count: int


class DueWindow(NamedTuple):
    """What a tick sees of one schedule, without keeping every missed slot in memory.

    Attributes:
        count: how many slots are due in ``(cursor, now]`` (within the ends).
        last: the last due slot (the new cursor), or ``None``.
        candidate: the occurrence to decide: the latest due slot that fires, else the
            latest due slot (a skipped DST-gap slot).
        superseded: the due slots before the candidate, as one range.
        gaps_after: skipped DST-gap slots after the candidate, as one range.
        next_slot: the first slot after ``now`` within the ends, ``None`` once ended.
    """

    count: int
    last: Slot | None
    candidate: Slot | None
    superseded: SlotRange | None
    gaps_after: SlotRange | None
    next_slot: Slot | None

    @property
    def ended(self) -> bool:
        """True when the schedule has no slot after this window."""
        return self.next_slot is None

    @property
    def due(self) -> bool:
        """True when at least one slot is due."""
        return self.count > 0

    @property
    def span(self) -> SlotRange | None:
        """All the due slots as one range (first, last, count), or ``None``."""
        if not self.count or self.last is None:
            return None
        first = self.superseded.first if self.superseded else self.candidate
        assert first is not None
        return SlotRange(first, self.last, self.count)


class _Summary:
    """Streams due slots into a :class:`DueWindow` (O(1) memory)."""

    def __init__(self) -> None:
        self.count = 0
        self.last: Slot | None = None
        self.last_fire: Slot | None = None
        self.candidate: Slot | None = None
        self.before: list[Any] = [None, None, 0]  # first, last, count before the candidate
        self.gaps: list[Any] = [None, None, 0]  # non-firing slots after the candidate

    def add(self, slot: Slot) -> None:
        if slot.fires and self.last_fire is not None and (
            slot.scheduled_for <= self.last_fire.scheduled_for
        ):
            raise NonAdvancingScheduleError(f"{slot.key} repeats {self.last_fire.key}")
        if slot.fires:
            self.last_fire = slot
        self.count += 1
        self.last = slot
        if self.candidate is None:
            self.candidate = slot
        elif slot.fires or not self.candidate.fires:
            self._push_before(self.candidate)
            if self.gaps[2]:
                self._push_before(self.gaps[0], self.gaps[1], self.gaps[2])
                self.gaps = [None, None, 0]
            self.candidate = slot
        else:  # a gap slot after a firing candidate
            self.gaps = [self.gaps[0] or slot, slot, self.gaps[2] + 1]

    def _push_before(self, first: Slot, last: Slot | None = None, count: int = 1) -> None:
        self.before = [self.before[0] or first, last or first, self.before[2] + count]

    def window(self, next_slot: Slot | None) -> DueWindow:
        before = SlotRange(*self.before) if self.before[2] else None
        gaps = SlotRange(*self.gaps) if self.gaps[2] else None
        return DueWindow(self.count, self.last, self.candidate, before, gaps, next_slot)


def due_window(
    calendar: Calendar,
    cursor: datetime,
    now: datetime,
    *,
    until: datetime | None = None,
    remaining: int | None = None,
) -> DueWindow:
    """Summarize the slots due after ``cursor`` up to ``now``, and find the next one.

    Args:
        calendar: the schedule.
        cursor: aware instant; slots at or before it were already handled.
        now: aware instant of the tick (injected, never read here).
        until: optional aware end; slots after it do not exist.
        remaining: optional count of occurrences left before the schedule ends
            ("after N occurrences", counting skipped ones); 0 means ended.

    Every missed slot is counted by enumeration (an interval by arithmetic), never
    extrapolated from an assumed spacing. The cost is linear in the missed slots of a
    cron schedule; callers run long windows off the event loop.

    Raises:
        NonAdvancingScheduleError: the calendar repeated an instant.
    """
    if isinstance(calendar, IntervalSchedule):
        return calendar.window(cursor, now, until=until, remaining=remaining)
    summary = _Summary()
    budget = remaining
    for slot in calendar.slots_after(cursor):
        if (until is not None and slot.scheduled_for > until) or budget == 0:
            return summary.window(None)
        if slot.scheduled_for > now:
            return summary.window(slot)
        summary.add(slot)
        if budget is not None:
            budget -= 1
    return summary.window(None)
