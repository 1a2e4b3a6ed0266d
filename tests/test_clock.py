"""The fake clock the tests drive time with (trio's MockClock is the model)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import anyio
import pytest

from watchkeeper.runtime.engine._clock import FakeClock, SystemClock

pytestmark = pytest.mark.anyio
START = datetime(2026, 6, 1, tzinfo=UTC)


async def test_sleepers_wake_only_when_time_is_advanced() -> None:
    """Two sleepers due at the same instant are distinct; each wakes at its own time."""
    clock = FakeClock(START)
    woke: list[str] = []

    async def sleeper(name: str, seconds: float) -> None:
        await clock.sleep(seconds)
        woke.append(name)

    async with anyio.create_task_group() as tg:
        for name, seconds in (("a", 5), ("b", 5), ("c", 10)):
            tg.start_soon(sleeper, name, seconds)
        await clock.wait_for_sleepers(3)
        clock.advance(4.9)
        await anyio.wait_all_tasks_blocked()
        assert woke == []
        clock.advance(0.1)
        await clock.wait_for_sleepers(1)
        await anyio.wait_all_tasks_blocked()
        assert sorted(woke) == ["a", "b"]
        clock.advance(5)
    assert sorted(woke) == ["a", "b", "c"]
    assert clock.now() == START + timedelta(seconds=10) and clock.monotonic() == 10


async def test_a_cancelled_sleeper_leaves_the_others_alone() -> None:
    """Cancelling one of two sleepers with the same deadline keeps the other registered."""
    clock = FakeClock(START)
    async with anyio.create_task_group() as doomed:
        doomed.start_soon(clock.sleep, 5)
        await clock.wait_for_sleepers(1)
        doomed.cancel_scope.cancel()
    assert clock.sleepers == 0
    done = anyio.Event()

    async def other() -> None:
        await clock.sleep(5)
        done.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(other)
        await clock.wait_for_sleepers(1)
        assert clock.sleepers == 1
        clock.advance(5)
    assert done.is_set()


def test_the_monotonic_clock_never_goes_back_but_the_wall_may_step() -> None:
    """advance(-1) is refused; step_wall models an NTP step and leaves monotonic alone."""
    clock = FakeClock(START)
    with pytest.raises(ValueError):
        clock.advance(-1)
    clock.step_wall(timedelta(seconds=-30))
    assert (clock.now(), clock.monotonic()) == (START - timedelta(seconds=30), 0)
    with pytest.raises(ValueError):
        FakeClock(datetime(2026, 6, 1))  # noqa: DTZ001 - the point of the test


def test_the_system_clock_is_aware_utc() -> None:
    """SystemClock.now() is never naive."""
    assert SystemClock().now().tzinfo is UTC
