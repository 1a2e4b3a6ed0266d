"""The clock contract (seed 003, "three clocks").

* wall clock (``now()``, aware UTC): human meaning and durable records;
* monotonic clock (``monotonic()``, seconds): leases, backoff and deadlines inside
  one process;
* the database (sequences and its clock) orders across processes; see
  :mod:`watchkeeper.runtime.engine._clock` for the offset measurement.

The supervisor takes a :class:`Clock`; tests pass a :class:`FakeClock` and move time
themselves (modelled on trio's ``MockClock``: no negative jumps of the monotonic
clock). Nothing in the runtime calls ``datetime.now`` or ``time.monotonic`` directly.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Protocol

import anyio
from anyio.lowlevel import checkpoint

__all__ = ["Clock", "FakeClock", "SystemClock"]


class Clock(Protocol):
    """What the runtime needs from time."""

    def now(self) -> datetime:
        """The wall clock: an aware UTC datetime."""
        ...

    def monotonic(self) -> float:
        """A monotonic reading in seconds; only differences are meaningful."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` of monotonic time (may be zero; negative counts as zero)."""
        ...


class SystemClock:
    """The real clocks: ``datetime.now(UTC)``, ``time.monotonic``, ``anyio.sleep``."""

    def now(self) -> datetime:
        """Current wall-clock time, aware UTC."""
        return datetime.now(UTC)

    def monotonic(self) -> float:
        """``time.monotonic()`` in seconds."""
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        """``anyio.sleep(max(0, seconds))``."""
        await anyio.sleep(max(0.0, seconds))


@dataclass(eq=False)  # identity: two sleepers due at the same time are different sleepers
class _Sleeper:
    wake_at: float
    event: anyio.Event


class FakeClock:
    """A clock that only moves when told to.

    Args:
        start: the initial wall-clock time (aware).

    ``advance(seconds)`` moves the wall and monotonic clocks together and wakes every
    sleeper whose time has come; ``step_wall(delta)`` moves only the wall clock (an
    NTP step), which may be negative. Sleepers never wake on their own.
    """

    def __init__(self, start: datetime) -> None:
        if start.tzinfo is None:
            raise ValueError("FakeClock needs an aware start time")
        self._wall = start.astimezone(UTC)
        self._mono = 0.0
        self._sleepers: list[_Sleeper] = []
        self._changed = anyio.Event()

    def now(self) -> datetime:
        """The fake wall-clock time."""
        return self._wall

    def monotonic(self) -> float:
        """The fake monotonic time in seconds since the clock was made."""
        return self._mono

    async def sleep(self, seconds: float) -> None:
        """Wait until the clock has been advanced by ``seconds``."""
        if math.isnan(seconds):
            raise ValueError("sleep(NaN)")
        if seconds <= 0:
            await checkpoint()
            return
        sleeper = _Sleeper(self._mono + seconds, anyio.Event())
        self._sleepers.append(sleeper)
        self._changed.set()
        self._changed = anyio.Event()
        try:
            await sleeper.event.wait()
        finally:
            if sleeper in self._sleepers:
                self._sleepers.remove(sleeper)

    def advance(self, seconds: float) -> None:
        """Move both clocks forward by ``seconds`` (>= 0) and wake due sleepers.

        Raises:
            ValueError: ``seconds`` is negative or NaN.
        """
        if not seconds >= 0:
            raise ValueError("a FakeClock never moves its monotonic clock backwards")
        self._mono += seconds
        self._wall += timedelta(seconds=seconds)
        for sleeper in [s for s in self._sleepers if s.wake_at <= self._mono]:
            sleeper.event.set()
            self._sleepers.remove(sleeper)

    def set_wall(self, instant: datetime) -> None:
        """Advance both clocks so that the wall clock reads ``instant`` (not earlier)."""
        self.advance((instant - self._wall).total_seconds())

    def step_wall(self, delta: timedelta) -> None:
        """Step only the wall clock by ``delta`` (may be negative), as NTP would."""
        self._wall += delta

    async def wait_for_sleepers(self, count: int) -> None:
        """Wait until at least ``count`` tasks are sleeping on this clock (for tests
        that must let every task park before moving time)."""
        while len(self._sleepers) < count:
            await self._changed.wait()

    @property
    def sleepers(self) -> int:
        """How many tasks are waiting on this clock."""
        return len(self._sleepers)

    @property
    def next_wake(self) -> float | None:
        """Monotonic seconds until the earliest sleeper wakes, or ``None``."""
        if not self._sleepers:
            return None
        return min(s.wake_at for s in self._sleepers) - self._mono
