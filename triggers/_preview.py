"""Preview: the next N occurrences of a schedule, with a note where DST affects one."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from ._calendar import Calendar
from ._errors import NoOccurrenceError
from ._slots import Slot, format_utc

__all__ = ["PreviewItem", "preview"]


@dataclass(frozen=True, slots=True)
class PreviewItem:
    """One previewed occurrence.

    Attributes:
        slot: the slot.
        note: the slot's own DST note, or a note that the UTC offset changed since the
            previous occurrence, or ``None``.
    """

    slot: Slot
    note: str | None

    def to_json(self) -> dict[str, Any]:
        """The stable JSON form: ``scheduled_for`` (UTC, ``Z``), ``local`` (ISO 8601
        with offset), ``slot``, ``note``, and ``runs`` (false for a skipped slot)."""
        return {
            "scheduled_for": format_utc(self.slot.scheduled_for),
            "local": self.slot.local.isoformat(),
            "slot": self.slot.key,
            "note": self.note,
            "runs": self.slot.fires,
        }


def preview(calendar: Calendar, after: datetime, count: int) -> list[PreviewItem]:
    """The first ``count`` slots strictly after the aware instant ``after``; fewer when
    the next would fall past the last date Python represents (9999-12-31), which no
    schedule reaches in practice but 1,000 slots of a 10-year interval do.

    Raises:
        NoOccurrenceError: the schedule has no occurrence after ``after``.
        ValueError: ``count`` < 1.
    """
    if count < 1:
        raise ValueError("count must be at least 1")
    slots: list[Slot] = []
    try:
        for slot in itertools.islice(calendar.slots_after(after), count):
            slots.append(slot)
    except OverflowError:
        pass  # the slots before the one past year 9999 were kept
    if not slots:
        raise NoOccurrenceError(
            "trigger", f"the schedule has no occurrence after {format_utc(after)}.",
            "choose a later time or an earlier --after.",
        )
    items = []
    previous = after.astimezone(UTC)
    for slot in slots:
        items.append(PreviewItem(slot, slot.note or _offset_note(previous, slot)))
        previous = slot.scheduled_for
    return items


def _offset_note(previous: datetime, slot: Slot) -> str | None:
    zone = ZoneInfo(slot.zone)
    before = previous.astimezone(zone).utcoffset() or timedelta(0)
    now = slot.scheduled_for.astimezone(zone).utcoffset() or timedelta(0)
    if before == now:
        return None
    shift = now - before
    direction = "earlier" if shift > timedelta(0) else "later"
    return (
        f"UTC offset {_fmt(before)} -> {_fmt(now)} since the previous occurrence: "
        f"same local time, {_span(abs(shift))} {direction} in UTC"
    )


def _span(delta: timedelta) -> str:
    minutes = int(delta.total_seconds()) // 60
    hours, minutes = divmod(minutes, 60)
    parts = ([f"{hours} h"] if hours else []) + ([f"{minutes} min"] if minutes else [])
    return " ".join(parts) or "0 min"


def _fmt(offset: timedelta) -> str:
    seconds = int(offset.total_seconds())
    sign = "+" if seconds >= 0 else "-"
    hours, minutes = divmod(abs(seconds) // 60, 60)
    return f"{sign}{hours:02d}:{minutes:02d}"
