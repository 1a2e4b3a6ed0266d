"""The value a source returns: an :class:`Observation` (DESIGN "Conditions").

Owned by ``triggers`` because it crosses the package boundaries: ``sources`` builds
observations, ``triggers`` evaluates them, ``runtime`` stores their receipts.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from ._slots import format_utc

__all__ = ["Observation", "ObservationStatus"]


class ObservationStatus(enum.StrEnum):
    """Whether a read produced a value.

    ``ok``: a value; ``missing``: the source has no value for that time (an empty cell,
    NA, NaN, nothing known yet) — never a zero; ``failed``: the source answered with an
    error; ``timed_out``: it did not answer in time. Anything but ``ok`` makes a
    comparison ``unknown``.
    """

    OK = "ok"
    MISSING = "missing"
    FAILED = "failed"
    TIMED_OUT = "timed_out"


@dataclass(frozen=True, slots=True)
class Observation:
    """One fact read from a source.

    Attributes:
        source, source_version: which source (and which version of it) said so.
        subject: what it is about (an instrument, a station/field).
        observation_id: the fact's stable identity at the source (the same fact read
            twice has the same id).
        value: the magnitude, exact (``None`` unless ``status`` is ``ok``).
        unit: a pint unit string (``"USD/share"``, ``"degC"``); ``None`` if dimensionless.
        currency: ISO 4217 code, or ``None``.
        as_of: when the fact held (aware, UTC).
        fetched_at: when it was read (aware, UTC).
        status: see :class:`ObservationStatus`.
        detail: why it is not ``ok`` (an error message), else ``""``.
    """

    source: str
    source_version: str
    subject: str
    observation_id: str
    value: Decimal | None
    unit: str | None
    currency: str | None
    as_of: datetime | None
    fetched_at: datetime
    status: ObservationStatus = ObservationStatus.OK
    detail: str = field(default="", compare=False)

    def to_json(self) -> dict[str, Any]:
        """JSON-compatible form (value as a decimal string, instants ISO 8601 UTC)."""
        return {
            "source": self.source, "source_version": self.source_version,
            "subject": self.subject, "observation_id": self.observation_id,
            "value": None if self.value is None else str(self.value), "unit": self.unit,
            "currency": self.currency,
            "as_of": None if self.as_of is None else format_utc(self.as_of),
            "fetched_at": format_utc(self.fetched_at), "status": self.status.value,
            "detail": self.detail,
        }
