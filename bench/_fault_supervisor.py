"""One supervisor OS process of the fault harness (``bench/faults.py`` starts it).

Why a script rather than ``python -m watchkeeper run``: the harness steps this host's
clock per process, which a real process cannot do to its own wall clock without root.
The supervisor here is the product's :class:`Supervisor` on PostgreSQL's clock (the
default authority, skew budget set), built on ``SkewedClock(SystemClock(), offset)``
whose offset it re-reads every 0.2 s from ``--offset-file`` (seconds, written by the
harness): a host clock step, as NTP would make one.

It also has what the harness's definitions name:

* the agent ``faulty``: appends ``task_id attempt token pid`` to ``--executions`` (one
  line per execution, O_APPEND), sleeps 20-80 ms, then performs one effect through
  ``ctx.effects.perform`` whose action appends the effect key to ``--effects`` (the
  provider's own record, read by the harness to count effects applied twice);
* the source ``toggle`` (version 1): a value of 5 on even seconds and 15 on odd ones,
  so an ``every_edge`` condition ``<= 10`` polled every second fires every 2 s.

Usage (the harness does this)::

    python bench/_fault_supervisor.py --dsn DSN --home DIR --offset-file F \\
        --executions F --effects F --lease 5 --workers 3 --id NAME

SIGTERM drains it as ``watchkeeper run`` does.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
from datetime import datetime, timedelta
from pathlib import Path

import anyio

from watchkeeper.runtime.engine._agents import AgentCatalog, AgentContext, AgentResult
from watchkeeper.runtime.engine._clock import SkewedClock, SystemClock
from watchkeeper.runtime.engine._supervisor import Supervisor, SupervisorConfig
from watchkeeper.runtime.store._db import Database
from watchkeeper.runtime.store._sealing import SETTING, Keyring
from watchkeeper.sources import CallableSource, SourceRegistry


def _append(path: Path, line: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


class FaultyAgent:
    """Records each execution, sleeps a little, performs one recorded effect."""

    def __init__(self, executions: Path, effects: Path) -> None:
        self.executions, self.effects = executions, effects

    async def run(self, ctx: AgentContext) -> AgentResult:
        """One execution of ``ctx``'s attempt."""
        token = getattr(ctx.effects, "_token", None)
        _append(self.executions, f"{ctx.task_id} {ctx.attempt} {token} {os.getpid()}")
        await anyio.sleep(random.uniform(0.02, 0.08))

        async def apply(key: str) -> dict[str, bool]:
            _append(self.effects, key)
            return {"applied": True}

        await ctx.effects.perform("notify", apply)
        return AgentResult(f"# {ctx.definition_id} {ctx.occurrence.slot}\n\nattempt {ctx.attempt}\n")


def toggle(subject: str, at: datetime) -> int:
    """5 on even seconds, 15 on odd ones."""
    return 5 if int(at.timestamp()) % 2 == 0 else 15


def read_offset(path: Path) -> timedelta:
    """The offset written in ``path`` (seconds; unreadable or empty: none)."""
    try:
        return timedelta(seconds=float(path.read_text().strip() or 0))
    except (OSError, ValueError):
        return timedelta(0)


async def follow_offset(clock: SkewedClock, path: Path) -> None:
    """Keep ``clock``'s offset equal to the seconds written in ``path``."""
    while True:
        wanted = read_offset(path)
        if wanted != clock.offset():
            clock.step(wanted - clock.offset())
        await anyio.sleep(0.2)


async def main(args: argparse.Namespace) -> None:
    """Run the supervisor until SIGTERM (drain) or SIGKILL."""
    clock = SkewedClock(SystemClock())
    catalog = AgentCatalog()
    catalog.add("faulty", FaultyAgent(Path(args.executions), Path(args.effects)))
    sources = SourceRegistry([CallableSource("toggle", "1", toggle, unit="USD/share", currency="USD",
                                             now=SystemClock().now)])
    config = SupervisorConfig(home=Path(args.home), supervisor_id=args.id, workers=args.workers,
                              lease_seconds=args.lease, tick_seconds=0.5, poll_seconds=0.5,
                              heartbeat_seconds=2.0, skew_check_seconds=2.0,
                              drain_seconds=2.0, webhook_timeout=5.0, retry_base=0.5)
    keyring = Keyring.load(os.environ.get(SETTING), Path(args.home))  # the harness sets it
    # opened in the background, retried while the database is away (as `watchkeeper run`)
    async with Database.opening(args.dsn, migrate=False, keyring=keyring) as db:
        supervisor = Supervisor(db, clock, config, agents=catalog, sources=sources)
        async with anyio.create_task_group() as tg:
            tg.start_soon(follow_offset, clock, Path(args.offset_file))

            async def on_signal() -> None:
                with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                    async for _ in signals:
                        supervisor.drain()

            tg.start_soon(on_signal)
            await supervisor.run()
            tg.cancel_scope.cancel()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    for name in ("dsn", "home", "offset-file", "executions", "effects", "id"):
        parser.add_argument(f"--{name}", required=True)
    parser.add_argument("--lease", type=float, default=5.0)
    parser.add_argument("--workers", type=int, default=3)
    anyio.run(main, parser.parse_args())
