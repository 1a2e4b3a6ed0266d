"""The clock contract (seed 003, "three clocks").

* wall clock (``now()``, aware UTC): human meaning and durable records;
* monotonic clock (``monotonic()``, seconds): leases, backoff and deadlines inside
  one process;
* the database (sequences and its clock) orders across processes, and PostgreSQL's
  clock is the authority for every instant another process compares with: lease
  expiry, takeover, renewal, eligibility (due, ``not_before``, ``expires_at``) and
  deadlines (DESIGN "Runs, leases, fencing, clocks"; seed 003).

A supervisor therefore does not read its host's wall clock for those decisions: it
runs on an :class:`AnchoredClock`, the authority's time at the last sample (a
:class:`TimeAuthority`, :class:`DatabaseTime` in production) plus the host's
*monotonic* time since. A step or drift of the host's wall clock cannot move it; the
difference between the two is the host's offset, checked at every step of the
supervisor's loops without a round trip.

The supervisor takes a :class:`Clock`; tests pass a :class:`FakeClock` and move time
themselves (modelled on trio's ``MockClock``: no negative jumps of the monotonic
clock), and a :class:`SkewedClock` for a host whose wall clock is wrong. Nothing in
the runtime calls ``datetime.now`` or ``time.monotonic`` directly.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Protocol

import anyio
from anyio.lowlevel import checkpoint

if TYPE_CHECKING:
    from ..store._db import Database

__all__ = ["MAX_ROUND_TRIP", "AnchoredClock", "Clock", "DatabaseTime", "FakeAuthority",
           "FakeClock", "Sample", "SampleRejected", "SkewedClock", "SystemClock",
           "TimeAuthority"]


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

    async def wait_for_sleep(self, seconds: float) -> None:
        """Wait until some task sleeps until exactly ``seconds`` from now (for tests that
        must move time only once a particular wait has begun)."""
        while not any(abs(s.wake_at - self._mono - seconds) < 1e-9 for s in self._sleepers):
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


MAX_ROUND_TRIP = 0.5
"""Seconds a reading of the authority may take before it is refused: its midpoint is
trusted to within half of it, well inside the default 2 s clock-skew budget."""


class SampleRejected(Exception):
    """A reading of the authority took too long to anchor to."""


class TimeAuthority(Protocol):
    """Where the one authoritative wall-clock time comes from."""

    async def read(self, monotonic: Callable[[], float]) -> tuple[float, datetime, float]:
        """One reading: ``(monotonic before, the authority's time, monotonic after)``,
        the two monotonic readings taken as tightly around the reading itself as the
        authority can (after any connection is acquired, so waiting for one does not
        count in the round trip).

        Raises:
            Exception: whatever reaching the authority raises (no offset measurable).
        """
        ...


class DatabaseTime:
    """PostgreSQL's ``clock_timestamp()``: the authority in production.

    Raises (from :meth:`read`): :class:`~watchkeeper.runtime.errors.DatabaseUnavailable`.
    """

    def __init__(self, db: Database) -> None:
        self.db = db

    async def read(self, monotonic: Callable[[], float]) -> tuple[float, datetime, float]:
        """``SELECT clock_timestamp()`` on a connection acquired first: the round trip
        timed is the query's alone."""
        async with self.db.connection() as conn:
            before = monotonic()
            at = await conn.fetchval("server_clock")
            return before, at, monotonic()


class FakeAuthority:
    """The authority of a test: a :class:`FakeClock` that plays the database's clock
    (seed 003: "advance the authority clock"); ``fail`` makes it unreachable, as an
    NTP server or a database can be."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.fail: Exception | None = None

    async def read(self, monotonic: Callable[[], float]) -> tuple[float, datetime, float]:
        """The fake authority's time (no round trip), or the :attr:`fail` exception."""
        await checkpoint()
        if self.fail is not None:
            raise self.fail
        before = monotonic()
        return before, self.clock.now(), monotonic()


@dataclass(frozen=True, slots=True)
class Sample:
    """One reading of the authority.

    Attributes:
        at: the authority's time, taken as the midpoint of the round trip.
        round_trip: seconds (monotonic) the reading took; the anchor is uncertain by
            half of it.
        host_offset: seconds the host's wall clock was ahead (+) or behind (-) then.
    """

    at: datetime
    round_trip: float
    host_offset: float


class AnchoredClock:
    """The supervisor's time: the authority's time at the last :meth:`resample`, plus
    the host's monotonic seconds since. ``monotonic`` and ``sleep`` are the host's.

    Before the first sample it reads the host's wall clock (a supervisor samples before
    it decides anything). From the first sample on, ``now`` never goes backwards: when
    a new sample lands slightly behind the time already handed out, the clock holds
    until it catches up.

    Args:
        host: the host's clocks (wall, monotonic, sleep).
    """

    def __init__(self, host: Clock) -> None:
        self.host = host
        self._anchor = host.now()
        self._anchored_at = host.monotonic()
        self._last = self._anchor
        self.sampled_at: float | None = None
        """Host monotonic seconds of the last successful sample (``None``: none yet)."""

    def now(self) -> datetime:
        """The authority's time now, estimated (aware UTC)."""
        estimate = self._anchor + timedelta(seconds=self.host.monotonic() - self._anchored_at)
        self._last = max(self._last, estimate)
        return self._last

    def monotonic(self) -> float:
        """The host's monotonic clock."""
        return self.host.monotonic()

    async def sleep(self, seconds: float) -> None:
        """The host's sleep (monotonic)."""
        await self.host.sleep(seconds)

    def host_offset(self) -> float:
        """Seconds the host's wall clock is ahead (+) of or behind (-) this clock."""
        return (self.host.now() - self.now()) / timedelta(seconds=1)

    def sample_age(self) -> float | None:
        """Monotonic seconds since the last successful sample (``None``: none yet)."""
        return None if self.sampled_at is None else self.host.monotonic() - self.sampled_at

    async def resample(self, authority: TimeAuthority, *,
                       max_round_trip: float = MAX_ROUND_TRIP) -> Sample:
        """Read the authority once and anchor to it (the midpoint of the round trip).

        Raises:
            SampleRejected: the reading took longer than ``max_round_trip`` seconds (its
                midpoint could be off by half of that); the anchor is unchanged.
            Exception: whatever ``authority.read()`` raises; the anchor is unchanged.
        """
        before, at, after = await authority.read(self.host.monotonic)
        if after - before > max_round_trip:
            raise SampleRejected(f"a reading of the authority's clock took {after - before:.3f} "
                                 f"s, more than {max_round_trip:g} s: not anchored to it")
        midpoint = before + (after - before) / 2
        first = self.sampled_at is None
        self._anchor, self._anchored_at, self.sampled_at = at, midpoint, after
        if first:  # what was handed out before came from the host's wall clock
            self._last = at
        return Sample(at, after - before, self.host_offset())


class SkewedClock:
    """A host whose wall clock is off: ``base``'s clocks with its wall clock moved by an
    offset that :meth:`step` changes at once (an NTP step) and :meth:`drift` changes
    steadily (seconds of wall per second of ``base``'s monotonic time). Monotonic time
    and sleeping are ``base``'s, as a real host's monotonic clock ignores NTP steps.
    """

    def __init__(self, base: Clock, offset: timedelta = timedelta(0)) -> None:
        self.base = base
        self._offset = offset
        self._rate = 0.0
        self._since = base.monotonic()

    def offset(self) -> timedelta:
        """How far this wall clock is from ``base``'s now."""
        return self._offset + timedelta(seconds=self._rate * (self.base.monotonic() - self._since))

    def now(self) -> datetime:
        """``base``'s wall clock plus the offset."""
        return self.base.now() + self.offset()

    def monotonic(self) -> float:
        """``base``'s monotonic clock."""
        return self.base.monotonic()

    async def sleep(self, seconds: float) -> None:
        """``base``'s sleep."""
        await self.base.sleep(seconds)

    def step(self, delta: timedelta) -> None:
        """Step the wall clock by ``delta`` (may be negative)."""
        self._offset += delta

    def drift(self, rate: float) -> None:
        """From now on, gain ``rate`` seconds of wall time per second (negative: lose)."""
        self._offset, self._since, self._rate = self.offset(), self.base.monotonic(), rate
