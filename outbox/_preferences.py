"""Notification preferences, read at delivery time (DESIGN "Outbox").

A user chooses which channels are enabled, the minimum importance worth a notice
("notify me only if something important changed" becomes a preference, not a prompt),
and quiet hours in their IANA zone. A notice below the threshold, or on a disabled
channel, is suppressed with the reason (the report stays committed and visible); one
due inside quiet hours waits until they end. Pure: ``now`` is an argument.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime, time, timedelta
from zoneinfo import ZoneInfo

from watchkeeper.triggers import Importance, WallKind, classify_wall

__all__ = ["NoticeAction", "NoticeDecision", "Preferences", "decide_notice", "quiet_hours_end"]

@dataclass(frozen=True, slots=True)
class Preferences:
    """One user's notification preferences.

    Attributes:
        zone: the user's IANA zone (quiet hours are local wall times in it).
        channels: enabled channels; ``None`` means all.
        min_importance: notices below it are suppressed.
        quiet_start, quiet_end: local wall times; the quiet span is
            ``[quiet_start, quiet_end)`` and may wrap midnight (22:00-07:00).
            ``None`` means no quiet hours.
    """

    zone: str = "UTC"
    channels: frozenset[str] | None = None
    min_importance: Importance = Importance.LOW
    quiet_start: time | None = None
    quiet_end: time | None = None


class NoticeAction(enum.StrEnum):
    """What to do with a due notice."""

    DELIVER = "deliver"
    SUPPRESS = "suppress"
    DEFER = "defer"


@dataclass(frozen=True, slots=True)
class NoticeDecision:
    """The decision, the instant to wait for (``DEFER``, UTC) and the reason."""

    action: NoticeAction
    reason: str
    until: datetime | None = None


def decide_notice(prefs: Preferences | None, channel: str, importance: Importance,
                  now: datetime) -> NoticeDecision:
    """Apply ``prefs`` to a notice on ``channel`` of ``importance`` due at ``now``."""
    if prefs is None:
        return NoticeDecision(NoticeAction.DELIVER, "no preferences set")
    if prefs.channels is not None and channel not in prefs.channels:
        return NoticeDecision(NoticeAction.SUPPRESS,
                              f"the user has disabled the {channel} channel")
    if importance.rank < prefs.min_importance.rank:
        return NoticeDecision(
            NoticeAction.SUPPRESS,
            f"importance {importance} is below the user's minimum {prefs.min_importance}")
    until = quiet_hours_end(prefs, now)
    if until is not None:
        return NoticeDecision(NoticeAction.DEFER,
                              f"quiet hours {prefs.quiet_start:%H:%M}-{prefs.quiet_end:%H:%M} "
                              f"{prefs.zone}", until)
    return NoticeDecision(NoticeAction.DELIVER, "within the user's preferences")


def quiet_hours_end(prefs: Preferences, now: datetime) -> datetime | None:
    """If ``now`` falls inside the quiet hours, the UTC instant they end; else ``None``.

    The end is the next local ``quiet_end`` wall time; if that wall time does not exist
    that day (spring forward) it is the first instant after the gap; if it occurs twice
    (fall back), its first instant: quiet hours end once, so when the clock reads a
    quiet wall time again in the repeated hour after that instant, it is not quiet
    (``None``), as a calendar occurrence fires once per repeated wall time (DESIGN
    "Calendar triggers").
    """
    start, end = prefs.quiet_start, prefs.quiet_end
    if start is None or end is None or start == end:
        return None
    zone = ZoneInfo(prefs.zone)
    local = now.astimezone(zone)
    clock = local.time().replace(tzinfo=None)
    wraps = start > end
    inside = (start <= clock or clock < end) if wraps else (start <= clock < end)
    if not inside:
        return None
    day = local.date() if clock < end else local.date() + timedelta(days=1)
    wall = classify_wall(datetime.combine(day, end), zone)
    if wall.kind is WallKind.GAP:
        assert wall.gap_end is not None
        return wall.gap_end
    ends = wall.instants[0]
    return ends if ends > now else None
