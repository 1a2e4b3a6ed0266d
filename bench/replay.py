"""``watchkeeper replay`` speed: polls per second over the README's examples, through
the real runtime (poller, admission, worker, outbox) on a virtual clock, storing
everything in PostgreSQL — all figures from ONE run (these machines are noisy).

For each example (stocks: 3 definitions polled daily over 2000-2010, 7,701 polls;
seattle: 1 definition polled daily over 2012-2015, 1,461 polls), in a fresh
``bench_<uuid>`` database (migrated before the clock starts):

* ``replay()`` as the CLI calls it, its events written as the CLI's ``--json`` lines
  (``json.dumps`` per event) into memory: wall seconds of the call (tenant and user,
  proposals and confirmations, every poll, the tasks and their reports, the notices,
  and removing the tenant), polls/s, and whether the lines equal the ones captured
  before the replay was made fast (``tests/data/replay_*.jsonl.gz``, task ids
  renumbered by first appearance);
* with ``--instant-by-instant``, the same with ``replay(batched=False)`` (every poll
  instant through the poller), the reference path;
* with ``--cli``, ``watchkeeper replay ... --json`` as a subprocess: wall seconds of the
  whole command (interpreter start and imports included);
* with ``--instructions``, the instructions one stocks replay executes, a figure a
  busy machine does not change (to compare two versions on a shared host): valgrind's
  callgrind counts a process that runs ``replay()`` once and one that runs it twice
  (each with its definitions loaded anew, as above); the difference is one replay's own
  work, without the interpreter's start and the first replay's warm-up.

The target (issue 17 item 5): 10,000 polls/s or more for the stocks example.

Usage::

    .venv/bin/python bench/replay.py [--repeat 3] [--instant-by-instant] [--cli]
        [--instructions] [--dsn DSN]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gzip
import inspect
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from watchkeeper.runtime.store._db import Database  # noqa: E402
from watchkeeper.runtime.usecases import load_replay_definitions, replay  # noqa: E402
from watchkeeper.sources import SeriesSource  # noqa: E402
from watchkeeper.triggers._spec import DEFAULT_MIN_INTERVAL  # noqa: E402

TARGET = 10_000
EXAMPLES = (("stocks", "stocks.toml", "stocks.csv"),
            ("seattle", "seattle.toml", "seattle_weather.csv"))


def with_database(dsn: str, name: str) -> str:
    parts = urlsplit(dsn)
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))


async def admin(server: str, statement: str) -> None:
    conn = await asyncpg.connect(server)
    try:
        await conn.execute(statement)
    finally:
        await conn.close()


def renumbered(lines: Sequence[str]) -> list[str]:
    ranks: dict[int, int] = {}
    out = []
    for line in lines:
        event = json.loads(line)
        if event.get("task") is not None:
            event["task"] = ranks.setdefault(event["task"], len(ranks) + 1)
        out.append(json.dumps(event))
    return out


def captured(name: str, data: Path) -> list[str] | None:
    path = data / f"replay_{name}.jsonl.gz"
    if not path.exists():
        return None
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        return handle.read().splitlines()


@contextlib.asynccontextmanager
async def scratch_database(server: str) -> AsyncIterator[Database]:
    """A fresh ``bench_<uuid>`` database on ``server``, migrated and open; dropped after."""
    name = f"bench_{uuid.uuid4().hex[:12]}"
    await admin(server, f'CREATE DATABASE "{name}"')
    try:
        async with Database.open(with_database(server, name)) as db:
            yield db
    finally:
        await admin(server, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def one(server: str, toml: str, csv_name: str, batched: bool,
              home: Path) -> tuple[float, float, int, list[str]]:
    """One replay in a fresh database: (wall and CPU seconds of this process during the
    replay() call, polls, lines)."""
    definitions = load_replay_definitions(ROOT / "examples" / "conditions" / toml,
                                          min_interval=DEFAULT_MIN_INTERVAL)
    source = SeriesSource.from_csv(ROOT / "examples" / "series" / csv_name)
    span = source.span()
    assert span is not None
    async with scratch_database(server) as db:
        lines: list[str] = []

        def show(event: dict[str, Any]) -> None:
            lines.append(json.dumps(event))

        extra = {} if batched else {"batched": False}
        started, cpu = time.perf_counter(), time.process_time()
        summary = await replay(db, definitions, source, start=span[0], end=span[1],
                               home=home, on_event=show, **extra)
        wall, cpu = time.perf_counter() - started, time.process_time() - cpu
        return wall, cpu, summary.polls, lines


async def _migrate(dsn: str) -> None:
    async with Database.open(dsn):
        pass


def cli(server: str, toml: str, csv_name: str, home: Path) -> float:
    """Wall seconds of ``watchkeeper replay ... --json`` (output discarded), in a
    database migrated beforehand."""
    name = f"bench_{uuid.uuid4().hex[:12]}"
    asyncio.run(admin(server, f'CREATE DATABASE "{name}"'))
    try:
        env = {**os.environ, "DATABASE_URL": with_database(server, name),
               "WATCHKEEPER_HOME": str(home)}
        asyncio.run(_migrate(with_database(server, name)))
        started = time.perf_counter()
        subprocess.run([str(Path(sys.executable).parent / "watchkeeper"), "replay",
                        "--definitions", str(ROOT / "examples" / "conditions" / toml),
                        "--series", str(ROOT / "examples" / "series" / csv_name), "--json"],
                       env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return time.perf_counter() - started
    finally:
        asyncio.run(admin(server, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


async def _replays(server: str, count: int, home: Path) -> None:
    """``count`` stocks replays in one process and one fresh database, each with its
    definitions loaded anew (``--instructions``' child)."""
    source = SeriesSource.from_csv(ROOT / "examples" / "series" / "stocks.csv")
    span = source.span()
    assert span is not None
    async with scratch_database(server) as db:
        for _ in range(count):
            definitions = load_replay_definitions(
                ROOT / "examples" / "conditions" / "stocks.toml",
                min_interval=DEFAULT_MIN_INTERVAL)
            await replay(db, definitions, source, start=span[0], end=span[1], home=home,
                         on_event=lambda event: json.dumps(event))


def instructions(server: str) -> str:
    """One stocks replay's own instructions (see the module docstring), or why not."""
    if shutil.which("valgrind") is None:
        return "instructions: valgrind is not installed"
    counts = []
    for count in (1, 2):
        done = subprocess.run(
            ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable,
             __file__, "--child-replays", str(count), "--dsn", server],
            capture_output=True, text=True, check=True)
        counts.append(int(re.search(r"Collected : (\d+)", done.stderr).group(1)))
    return (f"instructions: 1 replay {counts[0] / 1e6:,.0f} M, 2 replays {counts[1] / 1e6:,.0f} M;"
            f" one stocks replay's own work {(counts[1] - counts[0]) / 1e6:,.0f} M")


def calibration() -> str:
    """The CPU seconds of a fixed pure-Python loop (3M multiply-adds), best of three: on
    a shared virtual machine the same code runs up to half again as slow from one hour to
    the next, and this says how fast the machine was during the run (0.30 s: fast)."""
    best = float("inf")
    for _ in range(3):
        started, total = time.process_time(), 0
        for i in range(3_000_000):
            total += i * i
        best = min(best, time.process_time() - started)
    return f"machine: a 3M-step Python loop takes {best:.2f} s of CPU"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--instant-by-instant", action="store_true")
    parser.add_argument("--cli", action="store_true")
    parser.add_argument("--instructions", action="store_true")
    parser.add_argument("--child-replays", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--data", type=Path, default=ROOT / "tests" / "data",
                        help="where the captured --json lines are")
    parser.add_argument("--dsn", default=os.environ.get("DATABASE_URL"))
    args = parser.parse_args(argv)
    if not args.dsn:
        sys.exit("set DATABASE_URL or pass --dsn")
    if args.child_replays:
        with tempfile.TemporaryDirectory(prefix="wk-replay-bench-") as home:
            asyncio.run(_replays(args.dsn, args.child_replays, Path(home)))
        return
    can_choose = "batched" in inspect.signature(replay).parameters
    print(f"# watchkeeper replay bench, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC; python "
          f"{sys.version.split()[0]}; load {' '.join(f'{x:.2f}' for x in os.getloadavg())}; "
          f"best of {args.repeat}; {calibration()}", flush=True)
    print(f"{'example':<9}{'path':<20}{'polls':>7}{'best s':>8}{'cpu s':>7}{'polls/s':>9}  "
          "json lines as captured", flush=True)
    paths = [("batched", True)] if can_choose else [("instant (this code)", True)]
    if args.instant_by_instant and can_choose:
        paths.append(("instant-by-instant", False))
    results: dict[tuple[str, str], float] = {}
    with tempfile.TemporaryDirectory(prefix="wk-replay-bench-") as home:
        for label, toml, csv_name in EXAMPLES:
            want = captured(label, args.data)
            for path_label, batched in paths:
                best, best_cpu, polls, same = float("inf"), 0.0, 0, None
                for _ in range(args.repeat if batched else 1):
                    wall, cpu, polls, lines = asyncio.run(one(args.dsn, toml, csv_name, batched,
                                                              Path(home)))
                    if wall < best:
                        best, best_cpu = wall, cpu
                    same = None if want is None else renumbered(lines) == renumbered(want)
                results[(label, path_label)] = polls / best
                print(f"{label:<9}{path_label:<20}{polls:>7}{best:>8.2f}{best_cpu:>7.2f}"
                      f"{polls / best:>9.0f}  {'-' if same is None else 'yes' if same else 'NO'}",
                      flush=True)
            if args.cli:
                wall = cli(args.dsn, toml, csv_name, Path(home))
                print(f"{label:<9}{'CLI, whole command':<20}{'':>7}{wall:>8.2f}{'':>7}"
                      f"{polls / wall:>9.0f}", flush=True)
    print(f"# after the run, {calibration()}", flush=True)
    if args.instructions:
        print(instructions(args.dsn), flush=True)
    rate = results[("stocks", paths[0][0])]
    print(f"target: stocks replay >= {TARGET} polls/s: {rate:.0f} "
          f"{'met' if rate >= TARGET else 'NOT met'}", flush=True)


if __name__ == "__main__":
    main()
