"""IANA zones: loading with a clear error, and classifying local wall times.

A local wall time in a zone is one of three kinds (PEP 495 vocabulary):

* ``UNIQUE``: exactly one instant has it;
* ``AMBIGUOUS``: two instants have it (the fall-back *fold*); ``fold=0`` is the
  first of them, ``fold=1`` the second;
* ``GAP``: no instant has it (the spring-forward *gap*, or a skipped day as in
  Pacific/Apia on 2011-12-30).
"""

from __future__ import annotations

import enum
import functools
import zoneinfo
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from ._errors import SpecError

__all__ = ["WallKind", "WallTime", "classify_wall", "load_zone", "require_aware", "tzdata_version"]


class WallKind(enum.Enum):
    """How many instants carry one local wall time in a zone."""

    UNIQUE = "unique"
    AMBIGUOUS = "ambiguous"
    GAP = "gap"


@dataclass(frozen=True, slots=True)
class WallTime:
    """A classified local wall time.

    Attributes:
        wall: the naive local wall time that was classified.
        kind: see :class:`WallKind`.
        instants: the UTC instants carrying ``wall``, in order: one for ``UNIQUE``,
            two (fold 0, fold 1) for ``AMBIGUOUS``, none for ``GAP``.
        gap_end: for ``GAP`` only, the first instant after the gap (the transition
            instant, UTC); ``None`` otherwise.
    """

    wall: datetime
    kind: WallKind
    instants: tuple[datetime, ...]
    gap_end: datetime | None = None


@functools.lru_cache(maxsize=1024)
def load_zone(name: str | None, field: str = "zone") -> zoneinfo.ZoneInfo:
    """Return the IANA zone ``name``.

    Raises:
        SpecError: ``name`` is empty (a schedule without a zone is a DST bug waiting
            for October) or is not a zone of the tz database; the error names ``field``.
    """
    if not name:
        raise SpecError(
            field,
            "no time zone given.",
            "name an IANA zone such as 'Europe/Paris' or 'UTC'; "
            "a cron with no zone is a DST bug waiting for October.",
        )
    if name not in _known_zones():  # refuses 'localtime' too: it differs between hosts
        raise SpecError(
            field,
            f"unknown time zone {name!r}.",
            "use an IANA tz database name such as 'America/New_York' "
            "(not an abbreviation, a fixed offset or the host's local time).",
        )
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError) as exc:
        raise SpecError(field, f"time zone {name!r} cannot be loaded ({exc}).",
                        "use another IANA tz database name.") from exc


@functools.lru_cache(maxsize=1)
def _known_zones() -> frozenset[str]:
    host_specific = {"localtime", "posixrules", "Factory"}
    return frozenset(zoneinfo.available_timezones() - host_specific) | {"UTC"}


def require_aware(value: datetime, field: str) -> datetime:
    """Return ``value`` converted to UTC.

    Raises:
        SpecError: ``value`` is naive (this project never guesses a zone).
    """
    if value.tzinfo is None or value.utcoffset() is None:
        raise SpecError(
            field, f"{value.isoformat()} has no UTC offset.", "write it with 'Z' or an offset."
        )
    return value.astimezone(UTC)


@functools.lru_cache(maxsize=1)
def tzdata_version() -> str:
    """The tz database release that :mod:`zoneinfo` reads, e.g. ``"2026a"``.

    zoneinfo looks in ``zoneinfo.TZPATH`` first and falls back to the ``tzdata``
    package; the version is read from the same place (``tzdata.zi``'s first line,
    or ``tzdata.IANA_VERSION``). ``"unknown"`` when neither says.
    """
    for root in zoneinfo.TZPATH:
        marker = Path(root) / "tzdata.zi"
        if marker.is_file():
            with marker.open(encoding="utf-8") as fh:
                first = fh.readline().strip()
            if first.startswith("# version "):
                return first.removeprefix("# version ")
    try:
        import tzdata
    except ImportError:  # pragma: no cover - tzdata is a dependency
        return "unknown"
    return str(getattr(tzdata, "IANA_VERSION", "unknown"))


def classify_wall(wall: datetime, zone: zoneinfo.ZoneInfo) -> WallTime:
    """Classify the naive local wall time ``wall`` in ``zone``.

    Raises:
        ValueError: ``wall`` is aware.
    """
    if wall.tzinfo is not None:
        raise ValueError("classify_wall takes a naive local wall time")
    first = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
    second = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
    first_ok = _local(first, zone) == wall
    second_ok = _local(second, zone) == wall
    if not first_ok and not second_ok:
        return WallTime(wall, WallKind.GAP, (), _transition_between(second, first, zone))
    if first != second and first_ok and second_ok:
        return WallTime(wall, WallKind.AMBIGUOUS, (first, second))
    return WallTime(wall, WallKind.UNIQUE, (first if first_ok else second,))


def _local(instant: datetime, zone: zoneinfo.ZoneInfo) -> datetime:
    return instant.astimezone(zone).replace(tzinfo=None)


def _offset(epoch_seconds: int, zone: zoneinfo.ZoneInfo) -> timedelta | None:
    return datetime.fromtimestamp(epoch_seconds, zone).utcoffset()


def _transition_between(low: datetime, high: datetime, zone: zoneinfo.ZoneInfo) -> datetime:
    """The first instant in ``(low, high]`` whose UTC offset differs from ``low``'s.

    For a wall time in a gap, ``low`` is its reading with the offset after the
    transition and ``high`` its reading with the offset before, so the transition
    lies in between (binary search, 1 s resolution: transitions fall on whole seconds).
    """
    lo, hi = int(low.timestamp()), int(high.timestamp())
    before = _offset(lo, zone)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _offset(mid, zone) == before:
            lo = mid
        else:
            hi = mid
    return datetime.fromtimestamp(hi, UTC)
