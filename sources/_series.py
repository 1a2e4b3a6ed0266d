"""A historical series source: replays rows of (as_of, subject, value, unit, currency)
as the clock advances, returning only what was known at the time asked about.

The CSV format (``watchkeeper replay --series FILE``) has the header
``as_of,subject,value,unit,currency``: ``as_of`` ISO 8601 (a date means 00:00 UTC; a
naive time means UTC), ``value`` a decimal number, an empty cell, ``NA``, ``NaN`` or
``null`` (a *missing* value: an observation with status missing, never a zero),
``unit`` a pint unit string (empty: dimensionless), ``currency`` an ISO 4217 code or
empty; both are checked when the file is read, so a typo fails the load (naming the
line) instead of turning every later poll ``unknown``.
"""

from __future__ import annotations

import bisect
import csv
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal, InvalidOperation
from pathlib import Path

from watchkeeper.triggers import (
    Observation,
    ObservationStatus,
    SpecError,
    check_currency,
    check_unit,
    format_utc,
    in_range,
)

__all__ = ["HEADER", "SeriesError", "SeriesRow", "SeriesSource", "read_series_csv"]

HEADER = ("as_of", "subject", "value", "unit", "currency")
_NUMBER = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:inf|infinity)",
                     re.ASCII | re.IGNORECASE)
_MISSING = frozenset({"", "na", "nan", "null", "none", "n/a"})


class SeriesError(ValueError):
    """A series file or row that cannot be read; the message names the line and field."""


@dataclass(frozen=True, slots=True)
class SeriesRow:
    """One row: ``value`` is ``None`` when the cell is missing."""

    as_of: datetime
    subject: str
    value: Decimal | None
    unit: str | None
    currency: str | None


def parse_instant(text: str, where: str) -> datetime:
    """ISO 8601 date or date-time; a date is 00:00 UTC and a naive time is UTC.

    Raises:
        SeriesError: naming ``where``.
    """
    text = text.strip()
    try:
        if len(text) == 10:
            day = date.fromisoformat(text)
            return datetime(day.year, day.month, day.day, tzinfo=UTC)
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
        result = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    except (ValueError, OverflowError) as exc:
        raise SeriesError(f"{where}: as_of {text!r} is not an ISO 8601 date or time "
                          "(in years 1-9999 UTC)") from exc
    return result


def parse_value(text: str, where: str) -> Decimal | None:
    """A decimal number, or ``None`` for a missing cell (empty, NA, NaN, null).

    Raises:
        SeriesError: naming ``where``: not a number, or infinite.
    """
    if text.strip().lower() in _MISSING:
        return None
    if not _NUMBER.fullmatch(text.strip()):
        raise SeriesError(f"{where}: value {text!r} is not a number (leave the cell empty "
                          "for a missing value)")
    try:
        value = Decimal(text.strip())
    except InvalidOperation as exc:
        raise SeriesError(f"{where}: value {text!r} is not a number (leave the cell empty "
                          "for a missing value)") from exc
    if value.is_nan():
        return None
    if not value.is_finite():
        raise SeriesError(f"{where}: value {text!r} is not finite")
    if not in_range(value):
        raise SeriesError(f"{where}: value {text!r} is out of range (at most 40 significant "
                          "digits, magnitude 1e-100 to 1e100)")
    return value


def read_series_csv(path: Path) -> list[SeriesRow]:
    """Read a series CSV (see the module docstring).

    Every row is checked before the file is refused, so one error names every bad
    row: a unit or currency that is not known is named once with every line and
    subject that uses it; other bad rows (an instant, a number, a cell count) are
    named one by one (the first :data:`MAX_LISTED` of them, then a count).

    Raises:
        SeriesError: a wrong header, or bad rows (named by line number): a bad
            instant, number, unit or currency code.
        OSError: the file cannot be read.
    """
    try:
        return _read_rows(path)
    except UnicodeDecodeError as exc:
        raise SeriesError(f"{path}: not UTF-8 text (byte {exc.start}): save it as UTF-8") from exc
    except csv.Error as exc:
        raise SeriesError(f"{path}: not a CSV file the reader accepts ({exc})") from exc


MAX_LISTED = 20
"""Bad rows (other than unknown units and currencies) one error lists one by one."""


def _read_rows(path: Path) -> list[SeriesRow]:
    with path.open(newline="", encoding="utf-8-sig") as handle:  # a BOM is not a header
        reader = csv.reader(handle)
        header = next(reader, None)
        if header is None or tuple(h.strip() for h in header) != HEADER:
            raise SeriesError(f"{path}: the header must be {','.join(HEADER)}, not "
                              f"{','.join(header or [])!r}")
        rows: list[SeriesRow] = []
        bad = _BadRows(path)
        for number, cells in enumerate(reader, start=2):
            if not cells or all(not c.strip() for c in cells):
                continue
            try:
                row = _row(cells, f"{path}:{number}", number, bad)
            except SeriesError as exc:
                bad.other.append(str(exc))
                continue
            if row is not None:
                rows.append(row)
    bad.raise_if_any()
    return rows


def _row(cells: list[str], where: str, number: int, bad: _BadRows) -> SeriesRow | None:
    """One row, or ``None`` when its unit or currency is unknown (recorded in ``bad``).

    Raises:
        SeriesError: naming ``where``: a wrong cell count, an empty subject, a bad
            instant or value.
    """
    if len(cells) != len(HEADER):
        raise SeriesError(f"{where}: {len(cells)} cell{'' if len(cells) == 1 else 's'}, "
                          f"expected {len(HEADER)}")
    as_of, subject, value, unit, currency = cells
    if not subject.strip():
        raise SeriesError(f"{where}: subject is empty")
    instant, number_value = parse_instant(as_of, where), parse_value(value, where)
    ok = True
    for field, text, check in (("unit", unit, check_unit), ("currency", currency, check_currency)):
        if text.strip():
            try:
                check(text.strip(), field)
            except SpecError as exc:
                bad.unknown(field, text.strip(), exc, number, subject.strip())
                ok = False
    if not ok:
        return None
    code = check_currency(currency, "currency") if currency.strip() else None
    return SeriesRow(instant, subject.strip(), number_value, unit.strip() or None, code)


class _BadRows:
    """The bad rows of one file, gathered so one error names them all."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.other: list[str] = []
        self.units: dict[tuple[str, str], tuple[SpecError, list[int], dict[str, None]]] = {}

    def unknown(self, field: str, text: str, exc: SpecError, line: int, subject: str) -> None:
        """Record a unit or currency that is refused, on ``line`` for ``subject``."""
        _, lines, subjects = self.units.setdefault((field, text), (exc, [], {}))
        lines.append(line)
        subjects.setdefault(subject, None)

    def raise_if_any(self) -> None:
        """Raise one :class:`SeriesError` naming every bad row, if there is one.

        Raises:
            SeriesError: one line per unknown unit or currency (with its lines and
                subjects), then one per other bad row.
        """
        parts = [f"{self.path}:{lines[0]}: {field} {exc.problem.rstrip('.')}; on "
                 f"{_lines(lines)}, subject{'s' if len(subjects) > 1 else ''} "
                 f"{', '.join(subjects)}. Fix: {exc.fix}"
                 for (field, _), (exc, lines, subjects) in self.units.items()]
        parts += self.other[:MAX_LISTED]
        if len(self.other) > MAX_LISTED:
            parts.append(f"{self.path}: and {len(self.other) - MAX_LISTED} more bad row(s)")
        if parts:
            raise SeriesError("\n".join(parts))


def _lines(numbers: list[int]) -> str:
    """``[3, 4, 5, 9]`` -> ``"lines 3-5, 9"`` (``"line 3"`` for one)."""
    spans: list[list[int]] = []
    for number in numbers:
        if spans and number == spans[-1][1] + 1:
            spans[-1][1] = number
        else:
            spans.append([number, number])
    text = ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)
    return f"line{'s' if len(numbers) > 1 else ''} {text}"


class SeriesSource:
    """Replays a historical series: ``read(subject, at)`` returns the latest row of
    ``subject`` with ``as_of <= at`` — only what was known at ``at``, never a later row.

    Args:
        rows: the series (any order; for one subject and ``as_of`` the last row wins).
        name, version: the source identity definitions name.
    """

    in_memory = True
    """Reads answer from memory, at once, and never raise: a poller may read it without
    a timeout (``runtime`` reads other sources under one)."""

    def __init__(self, rows: Iterable[SeriesRow], *, name: str = "series",
                 version: str = "1") -> None:
        self.name, self.version = name, version
        by_subject: dict[str, dict[datetime, SeriesRow]] = {}
        for row in rows:
            by_subject.setdefault(row.subject, {})[row.as_of] = row
        self._rows = {s: [r for _, r in sorted(v.items())] for s, v in by_subject.items()}
        self._times = {s: [r.as_of for r in rows_] for s, rows_ in self._rows.items()}
        self._ids = {s: [f"{s}@{format_utc(r.as_of)}" for r in rows_]
                     for s, rows_ in self._rows.items()}  # each row's observation_id, once

    @classmethod
    def from_csv(cls, path: Path, *, name: str = "series", version: str = "1") -> SeriesSource:
        """Load a series CSV (see :func:`read_series_csv`)."""
        return cls(read_series_csv(path), name=name, version=version)

    def subjects(self) -> list[str]:
        """The subjects in the series."""
        return sorted(self._rows)

    def span(self) -> tuple[datetime, datetime] | None:
        """The earliest and latest ``as_of`` in the series."""
        times = [t for ts in self._times.values() for t in (ts[0], ts[-1])]
        return (min(times), max(times)) if times else None

    async def read(self, subject: str, at: datetime) -> Observation:
        """The latest row of ``subject`` at or before ``at`` (see the class docstring)."""
        times = self._times.get(subject)
        index = bisect.bisect_right(times, at) - 1 if times else -1
        if times is None or index < 0:
            why = "no such subject in the series" if times is None else \
                f"nothing known at {format_utc(at)}"
            return Observation(self.name, self.version, subject, f"{subject}@none", None, None,
                               None, None, at, ObservationStatus.MISSING, why)
        row = self._rows[subject][index]
        status = ObservationStatus.OK if row.value is not None else ObservationStatus.MISSING
        return Observation(self.name, self.version, subject, self._ids[subject][index],
                           row.value, row.unit, row.currency, row.as_of, at, status,
                           "" if row.value is not None else "the value is missing in the series")
