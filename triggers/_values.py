"""Small value types shared across the packages."""

from __future__ import annotations

import enum
from datetime import timedelta
from typing import Annotated

from pydantic import WithJsonSchema

__all__ = ["Duration", "Importance"]

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
