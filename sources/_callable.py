"""A source backed by a Python callable (sync or async).

The callable gets ``(subject, at)`` and returns a number (the value, as of ``at``), a
``(value, as_of)`` pair, ``None`` (missing) or a full :class:`~triggers.Observation`.
An exception is an observation with status ``failed``; a float is read through its
shortest decimal text (``0.1`` stays 0.1, not 0.1000000000000000055...).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from watchkeeper.triggers import Observation, ObservationStatus

__all__ = ["CallableSource"]


class CallableSource:
    """Wraps ``fn(subject, at)`` as a source.

    Args:
        name, version: the source identity definitions name.
        fn: the callable (may be ``async``).
        unit, currency: the unit and currency of the numbers ``fn`` returns.
        now: the wall clock for ``fetched_at`` (aware UTC), injected.
    """

    def __init__(self, name: str, version: str, fn: Callable[[str, datetime], Any], *,
                 unit: str | None = None, currency: str | None = None,
                 now: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self.name, self.version, self.fn = name, version, fn
        self.unit, self.currency, self.now = unit, currency, now

    async def read(self, subject: str, at: datetime) -> Observation:
        """Call ``fn`` and wrap its answer (see the module docstring)."""
        fetched = self.now()
        try:
            result = self.fn(subject, at)
            if inspect.isawaitable(result):
                result = await result
        except Exception as exc:
            return Observation(self.name, self.version, subject, f"{subject}@error", None,
                               self.unit, self.currency, None, fetched, ObservationStatus.FAILED,
                               f"{type(exc).__name__}: {exc}")
        if isinstance(result, Observation):
            return result
        as_of = at
        if isinstance(result, tuple) and len(result) == 2:
            result, as_of = result
        value = _decimal(result)
        status = ObservationStatus.OK if value is not None else ObservationStatus.MISSING
        return Observation(self.name, self.version, subject, f"{subject}@{as_of.isoformat()}",
                           value, self.unit, self.currency, as_of, fetched, status,
                           "" if value is not None else f"{result!r} is not a number")


def _decimal(raw: Any) -> Decimal | None:
    if raw is None or isinstance(raw, bool):
        return None
    try:
        value = Decimal(repr(raw)) if isinstance(raw, float) else Decimal(str(raw))
    except ArithmeticError:
        return None
    return value if value.is_finite() else None
