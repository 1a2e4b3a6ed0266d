"""IANA zones: loading with a clear error, the rule for which names a new spec may use
(and the name it is stored under), and classifying local wall times.

Which names a new spec may use (:func:`resolve_zone`; DESIGN "Calendar triggers", zone
names as people write them)::

    UTC, Etc/UTC                        accepted
    Area/Location (Europe/Paris)        accepted as written
    a link to a place (US/Eastern,      accepted, stored under the zone it links to
      Asia/Calcutta, Europe/Kiev)         (America/New_York, ...), with a note saying so
    Etc/GMT+7 and the other fixed       accepted, with a warning that the schedule
      offsets of the tz database          never follows DST
    abbreviations, rule zones (EST,     refused, with the place to use
      CET, MST7MDT), UTC's other
      names (GMT, Zulu), UTC+1, +01:00

The links are read from the tz database itself: the ``L TARGET LINK`` lines of the
``tzdata.zi`` that :mod:`zoneinfo` reads (the first of ``zoneinfo.TZPATH`` that has
one, else the ``tzdata`` package's), and ``zone.tab`` beside it, whose names keep their
own name (``Europe/Amsterdam`` stays itself though tzdata since 2022b links it to
``Europe/Brussels``: it is still the name of the Netherlands' clock). Reading those two
files is this module's only I/O.

A local wall time in a zone is one of three kinds (PEP 495 vocabulary):

* ``UNIQUE``: exactly one instant has it;
* ``AMBIGUOUS``: two instants have it (the fall-back *fold*); ``fold=0`` is the
  first of them, ``fold=1`` the second;
* ``GAP``: no instant has it (the spring-forward *gap*, or a skipped day as in
  Pacific/Apia on 2011-12-30).
"""

from __future__ import annotations

import difflib
import enum
import functools
import importlib.resources
import os
import re
import zoneinfo
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from ._errors import SpecError, SpecWarning

__all__ = ["WallKind", "WallTime", "ZoneChoice", "ZoneKind", "check_zone", "classify_wall",
           "load_zone", "require_aware", "resolve_zone", "tz_links", "tzdata_version"]


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
    """Return the IANA zone ``name``: any zone of the tz database, for reading what was
    stored (a new spec's zone goes through :func:`check_zone`, which is stricter).

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
    if not is_known_zone(name):  # refuses 'localtime' too: it differs between hosts
        raise SpecError(
            field,
            f"unknown time zone {name!r}.",
            _close_match(name) + "use an IANA tz database name such as 'America/New_York' "
            "(not an abbreviation, a fixed offset or the host's local time).",
        )
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError) as exc:
        raise SpecError(field, f"time zone {name!r} cannot be loaded ({exc}).",
                        "use another IANA tz database name.") from exc


HOST_SPECIFIC = frozenset({"localtime", "posixrules", "Factory"})
"""Zone files that are not zones a spec may name: they differ between hosts."""


@functools.lru_cache(maxsize=1)
def _known_zones() -> frozenset[str]:
    """Every zone a spec may name: :func:`zoneinfo.available_timezones` (which opens
    every file of the host's tz database, 0.02 s or more) less :data:`HOST_SPECIFIC`."""
    return frozenset(zoneinfo.available_timezones() - HOST_SPECIFIC) | {"UTC"}


@functools.lru_cache(maxsize=4096)
def is_known_zone(name: str) -> bool:
    """``name in _known_zones()``, decided without listing the tz database: ``name`` is
    in the ``tzdata`` package's list of zones, or is a file starting ``TZif`` under a
    directory of ``zoneinfo.TZPATH``, reached as :func:`zoneinfo.available_timezones`
    walks it: each name on the way listed by its directory, as written (a filesystem
    that ignores case would otherwise accept ``europe/paris``, a name no other host
    loads), not through ``right/`` or ``posix/`` at its top, nor through a symlinked
    directory. A short command checks one zone; listing them all cost it a fifth of its
    start (bench/cli_start.py)."""
    if name == "UTC":
        return True
    if name in HOST_SPECIFIC:
        return False
    if name in _tzdata_zones():
        return True
    parts = name.split("/")
    if "\0" in name or any(part in ("", ".", "..") for part in parts) or (
            len(parts) > 1 and parts[0] in ("right", "posix")):
        return False
    for root in zoneinfo.TZPATH:
        try:
            if not all(parts[depth] in _listing(os.path.join(root, *parts[:depth]))
                       for depth in range(len(parts))):
                continue
            if any(os.path.islink(os.path.join(root, *parts[:depth]))
                   for depth in range(1, len(parts))):
                continue  # a walk does not enter a symlinked directory
            with open(os.path.join(root, name), "rb") as handle:
                if handle.read(4) == b"TZif":
                    return True
        except OSError:  # missing, unreadable, not a directory: not walked
            continue
    return False


@functools.lru_cache(maxsize=256)
def _listing(directory: str) -> frozenset[str]:
    """The names ``directory`` lists (``OSError`` when it cannot be listed)."""
    return frozenset(os.listdir(directory))


@functools.lru_cache(maxsize=1)
def _tzdata_zones() -> frozenset[str]:
    """The zone names the ``tzdata`` package lists (its ``zones`` file); empty without
    it."""
    try:
        text = (importlib.resources.files("tzdata") / "zones").read_text(encoding="utf-8")
    except (ModuleNotFoundError, FileNotFoundError):  # pragma: no cover - a dependency
        return frozenset()
    return frozenset(line.strip() for line in text.splitlines() if line.strip())


GEOGRAPHIC_AREAS = frozenset({"Africa", "America", "Antarctica", "Arctic", "Asia", "Atlantic",
                              "Australia", "Europe", "Indian", "Pacific"})
"""The areas of tzdata's ``zone1970.tab``: a zone under one of them names a place."""
UTC_NAMES = frozenset({"UTC", "Etc/UTC"})


class ZoneKind(enum.Enum):
    """What kind of name a new spec gave as its zone (see the module docstring)."""

    UTC = "utc"
    PLACE = "place"
    """An ``Area/Location`` name, stored as written."""
    LINK = "link"
    """A tz database link naming a place, stored under the zone it links to."""
    FIXED_OFFSET = "fixed_offset"
    """``Etc/GMT+7`` and the like: the same offset all year."""


@dataclass(frozen=True, slots=True)
class ZoneChoice:
    """An accepted zone name and what is stored for it.

    Attributes:
        given: the name as written.
        name: the name stored (the link's target for :attr:`ZoneKind.LINK`, else
            ``given``).
        kind: see :class:`ZoneKind`.
        offset_minutes: for :attr:`ZoneKind.FIXED_OFFSET`, the offset in minutes east
            of UTC (``Etc/GMT+7`` is -420: tzdata's Etc/GMT signs are inverted); else
            ``None``.
    """

    given: str
    name: str
    kind: ZoneKind
    offset_minutes: int | None = None

    def warning(self, field: str = "zone") -> SpecWarning | None:
        """What to tell whoever wrote :attr:`given`: the name stored for a link, the
        DST it will never follow for a fixed offset; ``None`` for UTC and a place."""
        if self.kind is ZoneKind.LINK:
            return SpecWarning(field, f"{self.given} is stored as {self.name}: the tz "
                               "database's name for that zone (the same clock rules).")
        if self.kind is ZoneKind.FIXED_OFFSET:
            assert self.offset_minutes is not None
            example = _OFFSET_EXAMPLES.get(self.offset_minutes)
            city = f" (e.g. {example})" if example else ""
            return SpecWarning(field, f"{self.given} is a fixed offset, "
                               f"{_shown(self.offset_minutes)} all year (tzdata's Etc/GMT signs "
                               "are inverted): the schedule will never follow DST; to follow "
                               f"a place's clock, name its zone{city}.")
        return None


@functools.lru_cache(maxsize=1024)
def resolve_zone(name: str | None, field: str = "zone") -> ZoneChoice:
    """The zone a new spec (or user) names, and the name to store (module docstring).

    Raises:
        SpecError: naming ``field``: no zone, an unknown zone, or a refused name (an
            abbreviation or rule zone, another name of UTC, an offset that is not a tz
            database zone); the fix names the zone to use where there is an obvious one.
    """
    if not name or name in UTC_NAMES:
        load_zone(name, field)  # raises: no zone
        assert name is not None
        return ZoneChoice(name, name, ZoneKind.UTC)
    if name in _ABBREVIATIONS or name in _UTC_ALIASES or _links().get(name) in UTC_TARGETS:
        raise SpecError(field, *_refusal(name))
    target = _place_link(name)
    if target is not None:
        load_zone(target, field)
        return ZoneChoice(name, target, ZoneKind.LINK)
    if _geographic(name):
        load_zone(name, field)  # raises: unknown (with a near miss suggested)
        return ZoneChoice(name, name, ZoneKind.PLACE)
    etc = _ETC_OFFSET.fullmatch(name)
    if etc and is_known_zone(name):
        return ZoneChoice(name, name, ZoneKind.FIXED_OFFSET, _fixed_offset(name))
    if is_known_zone(name) or _fixed_offset(name) is not None:
        raise SpecError(field, *_refusal(name))
    load_zone(name, field)  # raises: unknown (every known name was decided above)
    raise SpecError(field, *_refusal(name))


@functools.lru_cache(maxsize=1024)
def check_zone(name: str | None, field: str = "zone") -> zoneinfo.ZoneInfo:
    """The zone a new spec (or user) may name, loaded under the name to store
    (:func:`resolve_zone`; ``check_zone("US/Eastern").key == "America/New_York"``).

    A zone that was accepted before this rule stays readable: stored specs are read
    with :func:`load_zone`.

    Raises:
        SpecError: as :func:`resolve_zone`.
    """
    return load_zone(resolve_zone(name, field).name, field)


UTC_TARGETS = frozenset({"Etc/UTC", "Etc/GMT", "UTC"})
"""Zones that are UTC: a link to one (``Zulu``, ``UCT``) is another name of UTC."""
_ETC_OFFSET = re.compile(r"Etc/GMT[+-](?:[1-9]|1[0-4])")


def _place_link(name: str) -> str | None:
    """The zone the tz database link ``name`` leads to, if ``name`` should be stored
    under it: a link to an ``Area/Location`` zone, other than a name ``zone.tab`` lists
    (a country's own clock keeps its name); else ``None``."""
    links = _links()
    if name not in links or name in _zone_tab():
        return None
    target, seen = links[name], {name}
    while target in links and target not in seen:  # tzdata.zi links to zones; be safe
        seen.add(target)
        target = links[target]
    return target if _geographic(target) else None


@functools.lru_cache(maxsize=1)
def _links() -> Mapping[str, str]:
    """Every link of the tz database, ``{link: target}``, from ``tzdata.zi``'s
    ``L TARGET LINK`` lines (module docstring)."""
    return tz_links(_tz_text("tzdata.zi"))


def tz_links(text: str) -> dict[str, str]:
    """``{link: target}`` from the text of a ``tzdata.zi`` (zic input: a line
    ``L TARGET LINK-NAME`` per link; other lines are ignored)."""
    links: dict[str, str] = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 3 and fields[0] == "L":
            links[fields[2]] = fields[1]
    return links


@functools.lru_cache(maxsize=1)
def _zone_tab() -> frozenset[str]:
    """The zone names of ``zone.tab`` (third column; ``#`` lines are comments)."""
    names = set()
    for line in _tz_text("zone.tab").splitlines():
        fields = line.split("\t")
        if len(fields) >= 3 and not line.startswith("#"):
            names.add(fields[2].strip())
    return frozenset(names)


def _tz_text(name: str) -> str:
    """The text of the tz database file ``name`` beside the zones :mod:`zoneinfo`
    reads: the first directory of ``zoneinfo.TZPATH`` holding ``tzdata.zi``, else the
    ``tzdata`` package; ``""`` when neither has it."""
    for root in zoneinfo.TZPATH:
        if (Path(root) / "tzdata.zi").is_file():
            path = Path(root) / name
            if path.is_file():
                return path.read_text(encoding="utf-8")
            break
    try:
        return (importlib.resources.files("tzdata") / "zoneinfo" / name).read_text(
            encoding="utf-8")
    except (ModuleNotFoundError, FileNotFoundError):  # pragma: no cover - a dependency
        return ""


def _geographic(name: str) -> bool:
    area, slash, _ = name.partition("/")
    return bool(slash) and area in GEOGRAPHIC_AREAS


def _refusal(name: str) -> tuple[str, str]:
    """What is wrong with a non-geographic zone name, and the zone to use instead."""
    if name in _ABBREVIATIONS:
        return (f"{name!r} is an abbreviation or a POSIX rule name, not a place; it says "
                "nothing about which region's DST rules to follow.",
                f"use {_ABBREVIATIONS[name]}: pick the city whose rules you follow.")
    if name in _UTC_ALIASES or _links().get(name) in UTC_TARGETS:
        also = " (or 'Europe/London' for UK time, which has summer time)" \
            if "G" in name.upper() else ""
        return f"{name!r} is another name for UTC.", f"write 'UTC'{also}."
    minutes = _fixed_offset(name)
    if minutes is not None:
        posix = " (tzdata's Etc/GMT signs are inverted)" if name.startswith("Etc/GMT") else ""
        example = _OFFSET_EXAMPLES.get(minutes)
        city = f", e.g. {example}" if example else ""
        fix = f"use the zone of the city whose clock you mean{city}, or 'UTC'"
        if minutes % 60 == 0 and -720 <= minutes <= 840 and minutes:  # Etc/GMT+12..-14
            fix += (f"; to keep {_shown(minutes)} all year on purpose, write "
                    f"'Etc/GMT{'-' if minutes > 0 else '+'}{abs(minutes) // 60}' (tzdata's "
                    "Etc/GMT signs are inverted)")
        return (f"{name!r} is a fixed offset, {_shown(minutes)} all year{posix}, and not a "
                "tz database name; a fixed offset never follows DST.", fix + ".")
    return (f"{name!r} is not an Area/Location zone name.",
            "use the IANA name of a place, such as 'Europe/Paris', or 'UTC'.")


_OFFSET = re.compile(r"(?:UTC|GMT|UT|Z)?\s*([+-])(\d{1,2})(?::?(\d{2}))?", re.IGNORECASE)


def _shown(minutes: int) -> str:
    """``UTC-07:00`` for -420 minutes."""
    return f"UTC{'-' if minutes < 0 else '+'}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"


def _fixed_offset(name: str) -> int | None:
    """Minutes east of UTC if ``name`` is a fixed offset (``Etc/GMT+5`` is -300,
    ``UTC+1`` and ``+01:00`` are 60), else ``None``."""
    etc = re.fullmatch(r"Etc/GMT([+-])(\d{1,2})", name)
    if etc:  # POSIX sign: Etc/GMT+5 is five hours *behind* UTC
        return (-1 if etc.group(1) == "+" else 1) * int(etc.group(2)) * 60
    match = _OFFSET.fullmatch(name.strip())
    if not match:
        return None
    hours, minutes = int(match.group(2)), int(match.group(3) or 0)
    if hours > 14 or minutes > 59:
        return None
    return (-1 if match.group(1) == "-" else 1) * (hours * 60 + minutes)


def _close_match(name: str) -> str:
    """``"did you mean 'Europe/Paris'? "`` for a near miss (case or spelling), else ``""``."""
    if not isinstance(name, str) or len(name) > 64:
        return ""
    geographic = [*_geographic_zones(), "UTC"]
    by_lower = {z.lower(): z for z in geographic}
    close = [by_lower[name.lower()]] if name.lower() in by_lower else \
        difflib.get_close_matches(name, geographic, n=1, cutoff=0.8)
    return f"did you mean {close[0]!r}? Otherwise " if close else ""


@functools.lru_cache(maxsize=1)
def _geographic_zones() -> list[str]:
    return sorted(z for z in _known_zones() if z.split("/", 1)[0] in GEOGRAPHIC_AREAS)


_ABBREVIATIONS = {
    "CET": "'Europe/Paris' or 'Europe/Berlin'",
    "MET": "'Europe/Paris' or 'Europe/Berlin'",
    "EET": "'Europe/Athens' or 'Europe/Helsinki'",
    "WET": "'Europe/Lisbon'",
    "EST": "'America/New_York' (US Eastern time, with DST; 'America/Panama' keeps -05:00 "
           "all year)",
    "EST5EDT": "'America/New_York'",
    "CST6CDT": "'America/Chicago'",
    "MST": "'America/Denver' (with DST) or 'America/Phoenix' (-07:00 all year)",
    "MST7MDT": "'America/Denver'",
    "PST8PDT": "'America/Los_Angeles'",
    "HST": "'Pacific/Honolulu'",
}
_UTC_ALIASES = frozenset({
    "GMT", "GMT0", "GMT+0", "GMT-0", "Greenwich", "UCT", "Universal", "Zulu",
    "Etc/GMT", "Etc/GMT0", "Etc/GMT+0", "Etc/GMT-0", "Etc/Greenwich", "Etc/UCT",
    "Etc/Universal", "Etc/Zulu", "Z",
})
_OFFSET_EXAMPLES = {  # minutes east of UTC -> cities whose standard time it is
    -660: "'Pacific/Pago_Pago'", -600: "'Pacific/Honolulu'", -570: "'Pacific/Marquesas'",
    -540: "'America/Anchorage'", -480: "'America/Los_Angeles'",
    -420: "'America/Denver' or 'America/Phoenix'", -360: "'America/Chicago' or "
    "'America/Mexico_City'", -300: "'America/New_York' or 'America/Bogota'",
    -240: "'America/Halifax' or 'America/Caracas'", -210: "'America/St_Johns'",
    -180: "'America/Sao_Paulo' or 'America/Argentina/Buenos_Aires'",
    -120: "'America/Noronha'", -60: "'Atlantic/Azores'", 0: "'Europe/London'",
    60: "'Europe/Paris' or 'Africa/Lagos'", 120: "'Europe/Athens' or 'Africa/Johannesburg'",
    180: "'Europe/Moscow' or 'Asia/Riyadh'", 210: "'Asia/Tehran'", 240: "'Asia/Dubai'",
    270: "'Asia/Kabul'", 300: "'Asia/Karachi'", 330: "'Asia/Kolkata'", 345: "'Asia/Kathmandu'",
    360: "'Asia/Dhaka'", 390: "'Asia/Yangon'", 420: "'Asia/Bangkok'",
    480: "'Asia/Singapore' or 'Australia/Perth'", 540: "'Asia/Tokyo'",
    570: "'Australia/Darwin' or 'Australia/Adelaide'", 600: "'Australia/Sydney' or "
    "'Australia/Brisbane'", 660: "'Pacific/Noumea'", 720: "'Pacific/Auckland'",
    765: "'Pacific/Chatham'", 780: "'Pacific/Tongatapu'", 840: "'Pacific/Kiritimati'",
}


def require_aware(value: datetime, field: str) -> datetime:
    """Return ``value`` converted to UTC.

    Raises:
        SpecError: ``value`` is naive (this project never guesses a zone), or lies so near
            year 1 or 9999 that it has no UTC equivalent (``9999-12-31T23:00-02:00``).
    """
    if value.tzinfo is None or value.utcoffset() is None:
        raise SpecError(
            field, f"{value.isoformat()} has no UTC offset.", "write it with 'Z' or an offset."
        )
    try:
        return value.astimezone(UTC)
    except OverflowError:
        raise SpecError(field, f"{value.isoformat()} is outside the range of dates in UTC.",
                        "give an instant between years 1 and 9999 in UTC.") from None


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
    early, late = wall.replace(tzinfo=zone), wall.replace(tzinfo=zone, fold=1)
    offset = early.utcoffset()
    if offset == late.utcoffset() and offset is not None:
        # PEP 495: both folds read alike away from a transition (in a gap or a fold
        # they read with the offsets before and after it), so one instant has it
        return WallTime(wall, WallKind.UNIQUE, ((wall - offset).replace(tzinfo=UTC),))
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
