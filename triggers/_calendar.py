"""Interval and at schedules, ends, and the window of due slots.

Boundaries come from the declared cadence, never from when a worker arrived:
an interval's occurrence n is ``anchor + n * every`` for n = 0, 1, 2, ...
(DESIGN "Calendar triggers"; seed 002 "Do not let catch-up create cadence drift").
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Protocol

from ._errors import NonAdvancingScheduleError
from ._slots import Slot, utc_slot_key

__all__ = ["AtSchedule", "Calendar", "DueWindow", "IntervalSchedule", "due_window"]


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

    def __repr__(self) -> str:
        return f"IntervalSchedule(every={self.every!r}, anchor={self.anchor.isoformat()})"

    def slots_after(self, after: datetime) -> Iterator[Slot]:
        """Yield ``anchor + n * every`` for every n >= 0 with the instant > ``after``."""
        after = after.astimezone(UTC)
        first = 0 if after < self.anchor else (after - self.anchor) // self.every + 1
        for n in itertools.count(first):
            instant = self.anchor + n * self.every
            yield Slot(utc_slot_key(instant), instant, "UTC", instant.replace(tzinfo=None))


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


@dataclass(frozen=True, slots=True)
class DueWindow:
    """What a tick sees of one schedule.

    Attributes:
        due: every slot in ``(cursor, now]``, oldest first, within the ends.
        next_slot: the first slot after ``now`` within the ends, or ``None`` when the
            schedule has ended.
        ended: True when no slot remains after ``due`` (ends reached or a one-shot passed).
    """

    due: tuple[Slot, ...]
    next_slot: Slot | None

    @property
    def ended(self) -> bool:
        """True when the schedule has no slot after this window."""
        return self.next_slot is None


def due_window(
    calendar: Calendar,
    cursor: datetime,
    now: datetime,
    *,
    until: datetime | None = None,
    remaining: int | None = None,
) -> DueWindow:
    """Enumerate the slots due after ``cursor`` up to ``now`` and the next one.

    Args:
        calendar: the schedule.
        cursor: aware instant; slots at or before it were already handled.
        now: aware instant of the tick (injected, never read here).
        until: optional aware end; slots after it do not exist.
        remaining: optional count of occurrences left before the schedule ends
            ("after N occurrences", counting skipped ones); 0 means ended.

    Every missed slot is listed (never extrapolated from an assumed spacing).

    Raises:
        NonAdvancingScheduleError: the calendar repeated an instant.
    """
    due: list[Slot] = []
    budget = remaining
    for slot in calendar.slots_after(cursor):
        if (until is not None and slot.scheduled_for > until) or budget == 0:
            return DueWindow(tuple(due), None)
        if slot.scheduled_for > now:
            return DueWindow(tuple(due), slot)
        if due and slot.fires and due[-1].fires and slot.scheduled_for <= due[-1].scheduled_for:
            raise NonAdvancingScheduleError(f"{slot.key} repeats {due[-1].key}")
        due.append(slot)
        if budget is not None:
            budget -= 1
    return DueWindow(tuple(due), None)
