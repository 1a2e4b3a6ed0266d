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

Part 3 (PostgreSQL, issue 17 item 4): conditions at scale. 100,000 condition
definitions (``--scale``) over 1,000 subjects (``--subjects``) of one source, all polled
every minute: definition n reads subject ``S<n mod 1000>`` against one of 10 thresholds
(10,000 distinct specs, each shared by 10 definitions), written by the bulk seed (COPY,
checked column by column against propose + confirm on a sample). Round 0 (every reading
false; the first poll, which parses each spec once) warms the caches; round 1, a
minute later, every reading is false again: quiet polls (each a claim, a shared read,
a decision, a receipt, a state); round 2, a minute later, every reading is true: every
poll is a false -> true edge that admits a task (occurrence, task with the
observations, state). Each round: one poller process (``poll_once`` with
``--poll-limit`` definitions a pass) until a pass claims nothing. Reported: polls/s,
the poller's CPU and its PostgreSQL backends' CPU (from /proc), admitted/s, source
reads per round (one per subject and poll instant), checked against
the database, and the targets (5,000 quiet polls/s, 1,000 admitted polls/s) met or not.

Usage::

    .venv/bin/python bench/conditions.py [--definitions 10000] [--scale 100000]
        [--subjects 1000] [--poll-limit 2000] [--skip-part2] [--dsn DSN]

The DSN defaults to ``DATABASE_URL``; without either, an embedded PostgreSQL is
started in a temporary home. The database created is ``bench_<uuid>`` and is dropped
``WITH (FORCE)`` at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
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
sys.path.insert(0, str(Path(__file__).resolve().parent))

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
                     count: int, limit: int = 200) -> tuple[float, int, dict[str, int]]:
    started = time.perf_counter()
    polls, actions = 0, {}
    while True:
        report = await poll_once(db, clock, sources, actor="bench", limit=limit, concurrency=16)
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


# ---------------------------------------------------------------- part 3


SCALE_THRESHOLDS = 10
QUIET_TARGET, ADMITTED_TARGET = 5000, 1000


def scale_spec(subject: int, level: int) -> dict[str, Any]:
    """The spec of a definition over ``S<subject>``: true below 10 + level USD/share."""
    return {"version": 1, "title": "bench", "delivery": [],
            "trigger": {"type": "condition", "mode": "every_edge",
                        "source": {"name": "bench", "version": "1"}, "poll_every": "PT1M",
                        "predicate": {"subject": f"S{subject:04d}", "op": "<=",
                                      "threshold": f"{10 + level} USD/share"}}}


async def bulk_seed_conditions(dsn: str, count: int, subjects: int, confirmed_at: datetime,
                               prefix: str = "c") -> list[str]:
    """Write ``count`` confirmed condition definitions (one owner each) as propose +
    confirm at ``confirmed_at`` would (rows built with the runtime's own functions, as
    :func:`bench._seeding.bulk_seed` does for calendars); return their ids."""
    from _seeding import _DEFINITION_COLUMNS, _REVISION_COLUMNS, _USER_COLUMNS, TENANT

    from watchkeeper.runtime.engine._ledger import EPSILON
    from watchkeeper.runtime.store._db import server_settings
    from watchkeeper.runtime.store._specs import compiled_columns

    parsed: dict[tuple[int, int], Any] = {}
    users, definitions, revisions, ids = [], [], [], []
    for n in range(count):
        key = (n % subjects, (n // subjects) % SCALE_THRESHOLDS)
        if key not in parsed:
            spec = parse_spec(scale_spec(*key))
            parsed[key] = (spec, json.dumps(spec.to_json()), *map(str, compiled_columns(spec)))
        spec, spec_json, compiled, payload = parsed[key]
        first = spec.window(confirmed_at - EPSILON, confirmed_at - EPSILON).next_slot
        ident = f"{prefix}{n:07d}"
        ids.append(ident)
        users.append(("bench", ident, "", "UTC", hashlib.sha256(os.urandom(16)).digest(),
                      confirmed_at))
        definitions.append(("bench", ident, "user", ident, "active", 1, 1, 1, confirmed_at,
                            confirmed_at - EPSILON, 0, first.scheduled_for, None, confirmed_at,
                            confirmed_at, "condition", "", None))
        revisions.append(("bench", ident, 1, spec_json, spec.spec_hash, None, "confirmed", None,
                          "agent:bench", confirmed_at, f"user:bench/{ident}", confirmed_at,
                          compiled, payload))
    assert TENANT == "bench"
    conn = await asyncpg.connect(dsn, server_settings=server_settings("watchkeeper"))
    try:
        await conn.execute("INSERT INTO tenants VALUES ($1, $2) ON CONFLICT DO NOTHING", "bench",
                           confirmed_at)
        await conn.copy_records_to_table("users", records=users, columns=_USER_COLUMNS)
        await conn.copy_records_to_table("definitions", records=definitions,
                                         columns=_DEFINITION_COLUMNS)
        await conn.execute("CREATE TEMP TABLE seed_revisions (LIKE definition_revisions)")
        await conn.execute("ALTER TABLE seed_revisions ALTER spec TYPE text, "
                           "ALTER compiled TYPE text, ALTER payload TYPE text")
        await conn.copy_records_to_table("seed_revisions", records=revisions,
                                         columns=_REVISION_COLUMNS)
        cast = {"spec": "spec::jsonb", "compiled": "compiled::jsonb", "payload": "payload::jsonb"}
        await conn.execute(
            f"INSERT INTO definition_revisions ({', '.join(_REVISION_COLUMNS)}) "
            f"SELECT {', '.join(cast.get(c, c) for c in _REVISION_COLUMNS)} FROM seed_revisions")
    finally:
        await conn.close()
    return ids


async def public_seed_conditions(db: Database, numbers: Sequence[int], subjects: int,
                                 confirmed_at: datetime, prefix: str = "c") -> None:
    """The definitions ``numbers`` through add_user, propose and confirm."""
    clock = FakeClock(confirmed_at)
    for n in numbers:
        ident = f"{prefix}{n:07d}"
        await add_user(db, clock, "bench", ident)
        spec = parse_spec(scale_spec(n % subjects, (n // subjects) % SCALE_THRESHOLDS))
        made = await propose(db, clock, tenant_id="bench", definition_id=ident,
                             owner_user_id=ident, spec=spec, proposed_by="agent:bench")
        await confirm(db, clock, UserPrincipal("bench", ident), definition_id=ident,
                      revision=made.revision, spec_hash=made.spec_hash)


async def backend_cpu(db: Database) -> dict[int, float]:
    """CPU seconds (user + system) so far of each PostgreSQL backend connected to the
    bench's database, by pid, read from ``/proc`` (the server runs on this machine; a
    backend it cannot read counts as none)."""
    pids = await db.pool.fetchval("SELECT array_agg(pid) FROM pg_stat_activity "
                                  "WHERE datname = current_database()")
    return {pid: seconds for pid in pids if (seconds := _process_cpu(pid)) is not None}


def _process_cpu(pid: int) -> float | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def part3(server: str, count: int, subjects: int, poll_limit: int) -> list[str]:
    from _seeding import check_bulk

    name, check = (f"bench_{uuid.uuid4().hex[:12]}" for _ in range(2))
    for db_name in (name, check):
        await admin(server, f'CREATE DATABASE "{db_name}"')
    try:
        async with Database.open(with_database(server, check), max_size=2) as public:
            sample = sorted({0, 1, subjects - 1, subjects, count // 2, count - 1})
            await public_seed_conditions(public, sample, subjects, NOW)
        async with Database.open(with_database(server, name), max_size=8) as db:
            started = time.perf_counter()
            ids = await bulk_seed_conditions(with_database(server, name), count, subjects, NOW)
            seeded = time.perf_counter() - started
            same, summary = await check_bulk(with_database(server, name),
                                             with_database(server, check),
                                             [ids[n] for n in sample])
            await db.pool.execute("VACUUM ANALYZE")
            clock = FakeClock(NOW)
            reading = {"value": 50}
            reads: list[int] = [0]

            def read(subject: str, at: datetime) -> int:
                reads[0] += 1
                return reading["value"]

            sources = SourceRegistry([CallableSource("bench", "1", read, unit="USD/share",
                                                     currency="USD", now=clock.now)])
            lines = [f"seeded {count} condition definitions over {subjects} subjects "
                     f"({subjects * SCALE_THRESHOLDS} distinct specs) by COPY in {seeded:.1f} s; "
                     f"bulk rows vs propose + confirm: {summary}", "",
                     f"{'round':<34}{'wall s':>8}{'cpu s':>7}{'pg cpu s':>9}{'polls':>8}"
                     f"{'polls/s':>9}"
                     f"{'tasks':>8}{'admitted/s':>12}{'reads':>7}  actions"]
            rates = {}
            for label, value, advance in (("0: first poll, false (warm-up)", 50, 0),
                                          ("1: false again (quiet)", 50, 60),
                                          ("2: true (every poll fires)", 5, 60)):
                reading["value"], reads[0] = value, 0
                clock.advance(advance)
                before = await db.pool.fetchval("SELECT count(*) FROM tasks")
                cpu, pg = time.process_time(), await backend_cpu(db)
                wall, polls, actions = await poll_round(db, clock, sources, count, poll_limit)
                cpu, pg_after = time.process_time() - cpu, await backend_cpu(db)
                pg_cpu = sum(t - pg.get(pid, 0.0) for pid, t in pg_after.items())
                tasks = await db.pool.fetchval("SELECT count(*) FROM tasks") - before
                rates[label[0]] = (polls / wall, tasks / wall)
                lines.append(f"{label:<34}{wall:>8.2f}{cpu:>7.2f}{pg_cpu:>9.2f}{polls:>8}"
                             f"{polls / wall:>9.0f}"
                             f"{tasks:>8}{tasks / wall:>12.0f}{reads[0]:>7}  {actions}")
            stored = await db.pool.fetchval("SELECT count(*) FROM condition_polls")
            receipts = await db.pool.fetchval("SELECT count(*) FROM observation_receipts")
            lines.append(f"check: {stored} poll rows (expected {3 * count}), {receipts} receipts "
                         f"(expected {3 * count}), "
                         f"{await db.pool.fetchval('SELECT count(*) FROM tasks')} tasks "
                         f"(expected {count}); bulk seed {'matches' if same else 'DIFFERS'}")
            quiet, admitted = rates["1"][0], rates["2"][1]
            lines.append(f"target quiet polls/s >= {QUIET_TARGET}: {quiet:.0f} "
                         f"{'met' if quiet >= QUIET_TARGET else 'NOT met'}; "
                         f"target admitted polls/s >= {ADMITTED_TARGET}: {admitted:.0f} "
                         f"{'met' if admitted >= ADMITTED_TARGET else 'NOT met'}")
            return lines
    finally:
        for db_name in (name, check):
            await admin(server, f'DROP DATABASE IF EXISTS "{db_name}" WITH (FORCE)')


# ---------------------------------------------------------------- main


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--definitions", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--scale", type=int, default=100_000)
    parser.add_argument("--subjects", type=int, default=1000)
    parser.add_argument("--poll-limit", type=int, default=2000)
    parser.add_argument("--skip-part2", action="store_true")
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
        if not args.skip_part2:
            for line in asyncio.run(part2(server, args.definitions)):
                print(line, flush=True)
            print(flush=True)
        print(f"# part 3: {args.scale} definitions over {args.subjects} subjects, polled "
              f"every minute; poll_once limit {args.poll_limit}; load "
              f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
        for line in asyncio.run(part3(server, args.scale, args.subjects, args.poll_limit)):
            print(line, flush=True)


if __name__ == "__main__":
    main()
