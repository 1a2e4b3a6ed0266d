"""Small value types shared across the packages."""

from __future__ import annotations

import enum
from datetime import timedelta
from decimal import Decimal
from typing import Annotated

from pydantic import WithJsonSchema

__all__ = ["Duration", "Importance", "plain_decimal"]

Duration = Annotated[timedelta, WithJsonSchema({"anyOf": [
    {"type": "string", "format": "duration", "description": "ISO 8601, e.g. 'PT30M'"},
    {"type": "number", "minimum": 0, "description": "seconds"}]})]
"""A duration in a spec, as its JSON Schema states what the parser takes: an ISO 8601
duration string (``"PT30M"``; months and years are refused, their length varies) or a
number of seconds (how a stored spec and the API's answers write it)."""


class Importance(enum.StrEnum):
    """How much a report matters; a user's notification preferences filter on it
    ("notify me only if something important changed" is a preference, not a prompt)."""

    LOW = "low"
    NORMAL = "normal"
    HIGH = "high"

    @property
    def rank(self) -> int:
        """0 for low, 1 for normal, 2 for high."""
        return ("low", "normal", "high").index(self.value)


def plain_decimal(value: Decimal) -> str:
    """A finite decimal as plain positional text without trailing zeros: how costs are
    shown and stored (``Decimal("0.003881600000000000")`` -> ``"0.0038816"``,
    ``Decimal("1E+1")`` -> ``"10"``, ``Decimal("0.00")`` -> ``"0"``); never scientific
    notation, never rounded.

    Raises:
        ValueError: ``value`` is NaN or infinite.
    """
    if not value.is_finite():
        raise ValueError(f"{value} is not a finite decimal")
    return format(value.normalize(), "f") if value else "0"
