"""A user's notification preferences: enabled channels, a minimum importance and quiet
hours in the user's zone, read by the dispatcher at delivery time (DESIGN "Outbox")."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import time
from typing import Any

from watchkeeper.triggers import Importance, SpecError

from .._errors import NotFound
from ..engine._clock import Clock
from ..store._db import Database

__all__ = ["CHANNELS", "PreferencesInput", "get_preferences", "parse_channels", "parse_importance",
           "parse_quiet", "set_preferences"]

CHANNELS = frozenset({"log", "file", "webhook"})
"""The channels a preference may enable."""


def parse_channels(text: str | None) -> list[str] | None:
    """``None``, ``""`` or ``"all"`` -> every channel (``None``); ``"none"`` -> muted
    (``[]``); else the comma-separated names (checked by :func:`set_preferences`)."""
    if text is None or text.strip() in ("", "all"):
        return None
    if text.strip() == "none":
        return []
    return [c.strip() for c in text.split(",") if c.strip()]


def parse_importance(text: str, field: str = "min_importance") -> Importance:
    """``low``, ``normal`` or ``high``.

    Raises:
        SpecError: naming ``field``.
    """
    try:
        return Importance(text)
    except ValueError as exc:
        raise SpecError(field, f"{text!r} is not low, normal or high.",
                        "e.g. --min-importance high") from exc


@dataclass(frozen=True, slots=True)
class PreferencesInput:
    """What ``watchkeeper prefs set`` accepts (validated here)."""

    channels: Sequence[str] | None = None
    min_importance: Importance = Importance.LOW
    quiet: tuple[time, time] | None = None


_WALL = re.compile(r"(\d{1,2}):(\d{2})")


def parse_quiet(text: str | None) -> tuple[time, time] | None:
    """``"22:00-07:00"`` -> (22:00, 07:00) (``H:MM`` also accepted); ``None`` or ``""``
    -> no quiet hours. Wall times in the user's zone, without an offset.

    Raises:
        SpecError: naming ``quiet``: not HH:MM-HH:MM, or an empty span.
    """
    if not text:
        return None
    fix = "e.g. --quiet 22:00-07:00 (to mute every notice instead: --channels none)"
    parts = text.split("-")
    walls = [_WALL.fullmatch(part.strip()) for part in parts]
    if len(parts) != 2 or not all(walls):
        raise SpecError("quiet", f"{text!r} is not HH:MM-HH:MM in the user's zone.", fix)
    try:
        start, end = (time(int(m.group(1)), int(m.group(2))) for m in walls if m)
    except ValueError as exc:
        raise SpecError("quiet", f"{text!r}: {exc} (hours 0-23, minutes 0-59).", fix) from exc
    if start == end:
        raise SpecError("quiet", f"{text!r} starts and ends at the same time.", fix)
    return start, end


async def set_preferences(db: Database, clock: Clock, tenant_id: str, user_id: str,
                          prefs: PreferencesInput) -> None:
    """Store a user's notification preferences (read at each delivery), replacing the
    previous ones; notices held back by the old quiet hours are re-evaluated at once.

    Raises:
        SpecError: an unknown channel.
        NotFound: no such user.
    """
    if prefs.channels is not None:
        unknown = sorted(set(prefs.channels) - CHANNELS)
        if unknown:
            raise SpecError("channels", f"unknown channel(s) {unknown}.",
                            f"use some of {sorted(CHANNELS)}.")
    if await db.fetchrow("user_get", tenant_id, user_id) is None:
        raise NotFound(f"no user {tenant_id}/{user_id}")
    start, end = prefs.quiet or (None, None)
    now = clock.now()
    async with db.transaction() as tx:
        await tx.execute("preferences_upsert", tenant_id, user_id,
                         None if prefs.channels is None else list(prefs.channels),
                         prefs.min_importance.value, start, end, now)
        await tx.execute("deliveries_release_deferred", tenant_id, user_id, now)


async def get_preferences(db: Database, tenant_id: str, user_id: str) -> dict[str, Any] | None:
    """A user's stored preferences, or ``None`` if they set none.

    Raises:
        NotFound: no such user.
    """
    if await db.fetchrow("user_get", tenant_id, user_id) is None:
        raise NotFound(f"no user {tenant_id}/{user_id}")
    row = await db.fetchrow("preferences_get", tenant_id, user_id)
    return None if row is None else dict(row)
