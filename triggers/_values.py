"""Small value types shared across the packages."""

from __future__ import annotations

import enum

__all__ = ["Importance"]


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
