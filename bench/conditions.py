"""Conditional triggers: comparisons per second across units, and polls admitted per
second through the admission transaction — all figures from ONE run (these machines
are noisy: never compare across runs).

Part 1 (pure, one core, no I/O): a comparison of an observation with a threshold in
another unit, as the poller does it — ``triggers._conditions.compare`` (a cached exact
conversion of the threshold into the observation's unit per unit pair, then one
``Fraction`` comparison, the verdict's reason included) — against the naive path in
the same process: build two pint Quantities with the same registry and compare them
(``Q(Fraction(value), unit) >= Q(Fraction(86), "degF")``, exact, pint converting both
to root units on every call). Two cases:
``degC`` readings against ``86 degF`` (an offset unit), and ``USD/share`` readings
against ``10 USD/share``. Each path runs the same list of 20,000 observations
(random values, seeded), repeated; best of ``--repeats``. The verdicts of both paths
are checked equal on every observation.

Part 2 (PostgreSQL): N condition definitions (default 10,000; one user, proposed and
confirmed through the public path, 8 at a time), polled every hour from a callable
source. Round 1: every reading is true, so every poll fires and admits a task (claim
transaction, source read, admission transaction with the fence/revision recheck, the
observation receipt, the condition state, the occurrence and the task). Round 2, an
hour later: every reading is false — polls that record the verdict and admit nothing.
One process runs ``watchkeeper.runtime.engine._poller.poll_once`` (limit 200 definitions a pass,
16 reads in flight) until a pass claims nothing; reported: wall seconds from due until
every poll is decided, polls/s and tasks admitted/s, checked against the database.

Usage::

    .venv/bin/python bench/conditions.py [--definitions 10000] [--dsn DSN]

The DSN defaults to ``DATABASE_URL``; without either, an embedded PostgreSQL is
started in a temporary home. The database created is ``bench_<uuid>`` and is dropped
``WITH (FORCE)`` at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from datetime import UTC, datetime
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from watchkeeper.runtime.engine._clock import FakeClock  # noqa: E402
from watchkeeper.runtime.engine._poller import poll_once  # noqa: E402
from watchkeeper.runtime.store._db import Database  # noqa: E402
from watchkeeper.runtime.store._embedded import embedded_postgres  # noqa: E402
from watchkeeper.runtime.usecases import UserPrincipal, add_user, confirm, propose  # noqa: E402
from watchkeeper.sources import CallableSource, SourceRegistry  # noqa: E402
from watchkeeper.triggers import Observation, Verdict, parse_spec  # noqa: E402
from watchkeeper.triggers._conditions import Comparison, compare  # noqa: E402
from watchkeeper.triggers._units import registry  # noqa: E402

NOW = datetime(2026, 6, 1, 12, tzinfo=UTC)
COUNT = 20_000


# ---------------------------------------------------------------- part 1


def observations(unit: str, currency: str | None, low: int, high: int) -> list[Observation]:
    rng = random.Random(4)
    return [Observation("bench", "1", "s", f"s@{i}", Decimal(rng.randint(low * 10, high * 10)) / 10,
                        unit, currency, NOW, NOW) for i in range(COUNT)]


def cached_path(comparison: Comparison, data: Sequence[Observation]) -> list[Verdict]:
    return [compare(comparison, o, NOW).verdict for o in data]


def naive_path(threshold: str, op: Callable[[Any, Any], bool],
               data: Sequence[Observation]) -> list[Verdict]:
    ureg = registry()
    magnitude, unit = threshold.split(" ", 1)
    out = []
    for o in data:
        value = ureg.Quantity(Fraction(o.value), o.unit)
        bound = ureg.Quantity(Fraction(magnitude), unit)
        out.append(Verdict.of(op(value, bound)))
    return out


def best_rate(fn: Callable[[], list[Verdict]], repeats: int) -> tuple[float, list[Verdict]]:
    best, result = float("inf"), []
    for _ in range(repeats):
        started = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - started)
    return COUNT / best, result


def part1(repeats: int) -> list[str]:
    import operator

    cases = [
        ("degC reading >= 86 degF", Comparison(subject="s", op=">=", threshold="86 degF"),
         operator.ge, observations("degC", None, -10, 40)),
        ("USD/share reading <= 10 USD/share",
         Comparison(subject="s", op="<=", threshold="10 USD/share"), operator.le,
         observations("USD/share", "USD", 0, 40)),
    ]
    lines = [f"{'case':<36}{'cached/s':>12}{'naive pint/s':>14}{'ratio':>8}  verdicts equal"]
    for label, comparison, op, data in cases:
        cached, got = best_rate(lambda c=comparison, d=data: cached_path(c, d), repeats)
        naive, expected = best_rate(lambda c=comparison, o=op, d=data:
                                    naive_path(c.threshold, o, d), max(1, repeats // 3))
        equal = got == expected
        lines.append(f"{label:<36}{cached:>12,.0f}{naive:>14,.0f}{cached / naive:>7.0f}x  "
                     f"{'yes' if equal else 'NO'} ({sum(v is Verdict.TRUE for v in got)} true "
                     f"of {COUNT})")
    return lines


# ---------------------------------------------------------------- part 2


def with_database(dsn: str, name: str) -> str:
    parts = urlsplit(dsn)
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))


async def admin(server: str, statement: str) -> None:
    conn = await asyncpg.connect(server)
    try:
        await conn.execute(statement)
    finally:
        await conn.close()


SPEC = {"version": 1, "title": "bench", "delivery": [],
        "trigger": {"type": "condition", "mode": "every_edge",
                    "source": {"name": "bench", "version": "1"}, "poll_every": "PT1H",
                    "predicate": {"subject": "X", "op": "<=", "threshold": "10 USD/share"}}}


async def seed(db: Database, clock: FakeClock, count: int) -> float:
    started = time.perf_counter()
    await add_user(db, clock, "bench", "owner")
    me = UserPrincipal("bench", "owner")
    spec = parse_spec(SPEC)
    semaphore = asyncio.Semaphore(8)

    async def one(n: int) -> None:
        async with semaphore:
            proposal = await propose(db, clock, tenant_id="bench", definition_id=f"c{n:06d}",
                                     owner_user_id="owner", spec=spec, proposed_by="bench")
            await confirm(db, clock, me, definition_id=f"c{n:06d}", revision=proposal.revision,
                          spec_hash=proposal.spec_hash)

    await asyncio.gather(*(one(n) for n in range(count)))
    return time.perf_counter() - started


async def poll_round(db: Database, clock: FakeClock, sources: SourceRegistry,
                     count: int) -> tuple[float, int, dict[str, int]]:
    started = time.perf_counter()
    polls, actions = 0, {}
    while True:
        report = await poll_once(db, clock, sources, actor="bench", limit=200, concurrency=16)
        if not report.claimed:
            break
        for event in report.events:
            polls += 1
            actions[event.action] = actions.get(event.action, 0) + 1
    return time.perf_counter() - started, polls, actions


async def part2(server: str, count: int) -> list[str]:
    name = f"bench_{uuid.uuid4().hex[:12]}"
    await admin(server, f'CREATE DATABASE "{name}"')
    try:
        async with Database.open(with_database(server, name), max_size=8) as db:
            clock = FakeClock(NOW)
            seeded = await seed(db, clock, count)
            reading = {"value": 5}
            sources = SourceRegistry([CallableSource(
                "bench", "1", lambda s, at: reading["value"], unit="USD/share", currency="USD",
                now=clock.now)])
            await db.pool.execute("VACUUM ANALYZE")
            lines = [f"seeded {count} condition definitions (propose + confirm, 8 at a time) "
                     f"in {seeded:.1f} s", "",
                     f"{'round':<28}{'wall s':>8}{'polls':>8}{'polls/s':>9}{'tasks':>8}"
                     f"{'admitted/s':>12}  actions"]
            for label, value in (("1: every poll true (fires)", 5), ("2: every poll false", 50)):
                reading["value"] = value
                clock.advance(3600 if label.startswith("2") else 0)
                before = await db.pool.fetchval("SELECT count(*) FROM tasks")
                wall, polls, actions = await poll_round(db, clock, sources, count)
                tasks = await db.pool.fetchval("SELECT count(*) FROM tasks") - before
                lines.append(f"{label:<28}{wall:>8.2f}{polls:>8}{polls / wall:>9.0f}{tasks:>8}"
                             f"{tasks / wall:>12.0f}  {actions}")
            stored = await db.pool.fetchval("SELECT count(*) FROM condition_polls")
            lines.append(f"check: {stored} poll rows stored (expected {2 * count}); "
                         f"{await db.pool.fetchval('SELECT count(*) FROM tasks')} tasks "
                         f"(expected {count})")
            return lines
    finally:
        await admin(server, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# ---------------------------------------------------------------- main


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--definitions", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--dsn", default=os.environ.get("DATABASE_URL"))
    args = parser.parse_args(argv)
    print(f"# watchkeeper conditions bench, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC", flush=True)
    print(f"python {sys.version.split()[0]}, pint {__import__('pint').__version__}; one core "
          f"for part 1; {COUNT} observations per case, best of {args.repeats}\n", flush=True)
    for line in part1(args.repeats):
        print(line, flush=True)
    print(flush=True)
    with ExitStack() as stack:
        server = args.dsn
        if not server:
            home = Path(tempfile.mkdtemp(prefix="wk-bench-"))
            stack.callback(shutil.rmtree, home, ignore_errors=True)
            server = stack.enter_context(embedded_postgres(home))
        for line in asyncio.run(part2(server, args.definitions)):
            print(line, flush=True)


if __name__ == "__main__":
    main()
