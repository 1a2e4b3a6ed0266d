"""The slot: one calendar opportunity of a schedule.

A slot has a stable ``key`` (DESIGN "Calendar triggers"): for cron the civil slot,
``YYYY-MM-DDTHH:MM[Zone]`` (RFC 9557 zone suffix) plus ``#fold1`` for the second
copy of a repeated wall time; for interval and at the UTC instant,
``YYYY-MM-DDTHH:MM:SS[.ffffff]Z``. The key never contains a UTC offset, so a
tzdata update that moves an instant cannot make one civil slot fire twice.
"""

from __future__ import annotations

import enum
import zoneinfo
from datetime import UTC, datetime
from typing import NamedTuple

__all__ = ["Slot", "SlotSkip", "cron_slot_key", "utc_slot_key", "format_utc"]


class SlotSkip(enum.Enum):
    """Why a slot exists on the calendar but never fires."""

    DST_GAP = "skipped_dst_gap"
    """A fixed-time cron slot whose local wall time does not exist (spring-forward gap)."""


class Slot(NamedTuple):
    """One calendar opportunity.

    Attributes:
        key: the stable slot key (see module docstring).
        scheduled_for: the resolved UTC instant. For a slot skipped in a DST gap it is
            the transition instant, which orders it among the others.
        zone: the IANA zone the slot was resolved in (``"UTC"`` for interval).
        wall: the nominal local wall time (naive) the expression asked for; for
            ``dst_gap=run_after`` this is the nonexistent time, not the run time.
        fold: 1 for the second copy of a repeated wall time, else 0.
        skip: set when the slot is recorded but never runs.
        note: a human sentence when a DST change affects the slot, else ``None``.
    """

    key: str
    scheduled_for: datetime
    zone: str
    wall: datetime
    fold: int = 0
    skip: SlotSkip | None = None
    note: str | None = None

    @property
    def fires(self) -> bool:
        """True unless the slot is only recorded (a skipped DST-gap slot)."""
        return self.skip is None

    @property
    def local(self) -> datetime:
        """``scheduled_for`` as an aware local time in ``zone``."""
        return self.scheduled_for.astimezone(zoneinfo.ZoneInfo(self.zone))


_FORMATTED: dict[datetime, str] = {}


def format_utc(instant: datetime) -> str:
    """ISO 8601 in UTC ending in ``Z``; microseconds only when non-zero (aware
    ``instant``; each instant formatted once per process while it is recent)."""
    text = _FORMATTED.get(instant)
    if text is None:
        if len(_FORMATTED) >= 65_536:
            _FORMATTED.clear()
        utc = instant if instant.tzinfo is UTC else instant.astimezone(UTC)
        text = _FORMATTED[instant] = utc.isoformat()[:-6] + "Z"  # drops "+00:00"
    return text


def utc_slot_key(instant: datetime) -> str:
    """Slot key of an interval, at or manual occurrence: its UTC instant."""
    return format_utc(instant)


def cron_slot_key(wall: datetime, zone: str, fold: int) -> str:
    """Slot key of a cron occurrence: civil wall time, zone, and fold."""
    key = f"{wall.isoformat(timespec='minutes')}[{zone}]"  # = %Y-%m-%dT%H:%M from year 1000
    return key + "#fold1" if fold else key
