"""Admission at one due instant: real supervisors against the raw batched insert of the
same rows, in one run against one server (these machines are noisy: compare figures of
one run only).

Why: issue 17 and DESIGN "Scale": N definitions due at one instant T must all be
admitted (occurrences, tasks and advanced cursors committed) within a small multiple of
the time the raw insert of the same rows takes; the supervisor wakes at T itself (no
polling delay), spends little CPU per definition, keeps its memory bounded, and two of
them split the due set without planning a row twice. A tick with nothing due must cost
the same whatever the number of idle definitions.

What is measured, for each shape (bench/_seeding.py: ``shared``, N definitions over four
specs; ``distinct``, N definitions whose (cron expression, zone) pairs all differ but all
match T) and each N:

1. A template database with the N definitions confirmed 30 s before T (bulk-seeded; a
   sample is seeded again through add_user/propose/confirm into another database and
   compared column by column: the "seed check" line).
2. For each repeat, interleaved: a clone of the template, and 1 or 2 supervisor
   processes on it. Each is a real :class:`Supervisor` (no workers: admission only)
   whose clock is the host's shifted so that it reads T a few seconds after "go"; it
   starts, finds nothing due, sleeps until T (its next_due_at), and admits. The parent
   LISTENs for the task notices, one per admitting commit (``first``: from T to the first
   task row committed; ``t_all``: from T to the notice of the commit after which all N are
   committed). CPU is the supervisor processes' user+system time from just before T to
   t_all (each thread's schedstat, in ns), per admitted definition; peak RSS is each process's VmHWM.
3. Raw: the occurrence and task rows that run committed, read back, inserted into a
   fresh clone of the template by one connection in batches of 1000 rows of each table
   per transaction, by binary COPY (``raw copy``, the denominator of ``ratio``) and by
   ``INSERT ... SELECT FROM unnest($arrays)`` (``raw unnest``), rows built beforehand.
4. Checks per run: tasks = distinct idempotency keys = occurrences = N, no definition
   still due; with 2 supervisors, the definitions they planned add up to N (none
   planned twice).
5. Idle ticks: one database with no other definitions and one with ``--idle`` idle ones
   (next due a week after T); a tick at an instant when nothing is due, plus the
   supervisor's next-due read, timed alternately in this process.

Usage::

    .venv/bin/python bench/admission.py [--sizes 1,1000,10000,100000] [--repeats 3]
        [--idle 1000000] [--shapes shared,distinct] [--dsn DSN]

The DSN defaults to ``DATABASE_URL``; without either an embedded PostgreSQL is started.
Every database created is ``bench_<uuid>...`` and dropped ``WITH (FORCE)`` at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing as mp
import os
import resource
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg

sys.path.insert(0, str(Path(__file__).parent))

from _seeding import (  # noqa: E402
    bulk_seed,
    check_bulk,
    confirmed_before,
    definition_id,
    distinct_crons,
    public_seed,
    shared_crons,
)

from watchkeeper.runtime.engine._clock import FakeClock, SystemClock  # noqa: E402
from watchkeeper.runtime.engine._scheduler import tick  # noqa: E402
from watchkeeper.runtime.engine._supervisor import Supervisor, SupervisorConfig  # noqa: E402
from watchkeeper.runtime.store._db import Database, server_settings  # noqa: E402
from watchkeeper.runtime.store._embedded import embedded_postgres  # noqa: E402

DUE = datetime(2026, 12, 2, 19, 0, tzinfo=UTC)
"""T: a Wednesday, 20:00 in Paris; every seeded definition is first due then."""
LEAD = 3.0
"""Seconds from "go" until the supervisors' clocks read T."""
SCHEMA = "watchkeeper"


# ---------------------------------------------------------------- databases

def with_database(dsn: str, name: str) -> str:
    parts = urlsplit(dsn)
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))


class Databases:
    """Creates and finally drops the bench's databases."""

    def __init__(self, server: str) -> None:
        self.server, self.names = server, []  # type: ignore[var-annotated]
        self.tag = uuid.uuid4().hex[:8]

    async def _admin(self, statement: str) -> None:
        conn = await asyncpg.connect(self.server)
        try:
            await conn.execute(statement)
        finally:
            await conn.close()

    async def create(self, label: str, template: str | None = None) -> str:
        name = f"bench_{self.tag}_{label}"
        self.names.append(name)
        await self._admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        suffix = f' TEMPLATE "{template}"' if template else ""
        await self._admin(f'CREATE DATABASE "{name}"{suffix}')
        return name

    async def drop(self, name: str) -> None:
        await self._admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        if name in self.names:
            self.names.remove(name)

    async def drop_all(self) -> None:
        for name in list(self.names):
            await self.drop(name)

    def dsn(self, name: str) -> str:
        return with_database(self.server, name)


async def connect(dsn: str) -> asyncpg.Connection:
    return await asyncpg.connect(dsn, server_settings=server_settings(SCHEMA))


async def migrated(dbs: Databases, label: str) -> str:
    name = await dbs.create(label)
    async with Database.open(dbs.dsn(name)):
        pass
    return name


async def vacuum(dsn: str) -> None:
    conn = await connect(dsn)
    try:
        await conn.execute("VACUUM ANALYZE")
        await conn.execute("CHECKPOINT")
    finally:
        await conn.close()


# ---------------------------------------------------------------- the supervisor process

class ShiftedClock(SystemClock):
    """The host's clocks, its wall clock read ``offset`` later (monotonic time and sleeps
    are real): T arrives when the bench wants it to."""

    def __init__(self, offset: timedelta) -> None:
        self.offset = offset

    def now(self) -> datetime:
        return super().now() + self.offset


def supervisor_main(dsn: str, actor: str, home: str, ready: Any, go: Any, start: Any,
                    stop: Any, results: Any) -> None:
    """One supervisor process: open the pool, say ready, wait for go, run until stop."""
    asyncio.run(_supervise(dsn, actor, home, ready, go, start, stop, results))


async def _supervise(dsn: str, actor: str, home: str, ready: Any, go: Any, start: Any,
                     stop: Any, results: Any) -> None:
    async with Database.open(dsn, migrate=False, max_size=6) as db:
        ready.release()
        await asyncio.to_thread(go.wait)
        offset = DUE - datetime.fromtimestamp(start.value, UTC)
        config = SupervisorConfig(home=Path(home), supervisor_id=actor, workers=0,
                                  skew_budget=None, tick_seconds=1.0)
        supervisor = Supervisor(db, ShiftedClock(offset), config)
        async with asyncio.TaskGroup() as tg:
            tg.create_task(supervisor.run())
            await asyncio.to_thread(stop.wait)
            stats = supervisor.statistics()
            supervisor.stop()
    results.put({"actor": actor, "planned": stats.planned, "admitted": stats.admitted,
                 "wake": stats.wake, "rss_mib": peak_rss_mib()})


def thread_cpu_ns(pid: int) -> dict[int, int]:
    """Each thread of ``pid``'s CPU time so far, in nanoseconds (the first field of
    ``/proc/<pid>/task/<tid>/schedstat``: the kernel's own accounting, where
    ``cpu_times()`` counts whole 10 ms clock ticks, 0.01 ms per definition at N=1,000)."""
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError, ValueError, IndexError):
            out[int(task.name)] = int((task / "schedstat").read_text().split()[0])
    return out


def cpu_since(pid: int, before: dict[int, int]) -> float:
    """Seconds of CPU ``pid``'s threads used since ``before`` (:func:`thread_cpu_ns`); a
    thread that ended meanwhile is not counted (the supervisor's are its event loop and
    idle worker threads)."""
    now = thread_cpu_ns(pid)
    return sum(ns - before.get(tid, 0) for tid, ns in now.items()) / 1e9


def peak_rss_mib() -> float:
    """This process's peak resident set size (``VmHWM``: since its exec; ``ru_maxrss``
    would count the parent's pages copied by the fork before the exec)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@dataclass
class Run:
    """One admission run."""

    supervisors: int
    first: float | None = None
    t_all: float | None = None
    cpu: float = 0.0
    rss: list[float] = field(default_factory=list)
    planned: list[int] = field(default_factory=list)
    check: str = ""
    ok: bool = False


async def admission_run(dsn: str, n: int, count: int) -> Run:
    """Start ``count`` supervisors on ``dsn``, let T come, time the N admissions."""
    ctx = mp.get_context("spawn")
    ready, go, stop = ctx.Semaphore(0), ctx.Event(), ctx.Event()
    start, results = ctx.Value("d", 0.0), ctx.Queue()
    home = tempfile.mkdtemp(prefix="wk-bench-")
    procs = [ctx.Process(target=supervisor_main, args=(dsn, f"bench-sup-{i}", home, ready, go,
                                                       start, stop, results))
             for i in range(count)]
    for proc in procs:
        proc.start()
    for _ in procs:
        await asyncio.to_thread(ready.acquire)
    watcher = await connect(dsn)
    notices: list[float] = []  # when each "work" notice (one per admitting commit) arrived
    await watcher.add_listener(f"{SCHEMA}_work", lambda *_: notices.append(time.time()))
    run = Run(count)
    try:
        start.value = time.time() + LEAD  # the wall instant the supervisors' clocks read T
        go.set()
        await asyncio.sleep(max(start.value - time.time() - 0.3, 0))
        before = [thread_cpu_ns(p.pid) for p in procs]
        deadline = start.value + 120 + n / 500
        while time.time() < deadline:
            # Each admitting commit sends one "work" notice; counting the rows is the
            # check, done rarely (a count(*) every few ms would take a core from the
            # server under test). Once all N rows are there nothing is due any more, so
            # the last notice is the commit that completed them: t_all.
            await asyncio.sleep(0.2 if n > 1000 else 0.02)
            if await watcher.fetchval("SELECT count(*) FROM tasks") >= n:
                await asyncio.sleep(0.1)
                run.t_all = notices[-1] - start.value if notices else None
                break
        run.cpu = sum(cpu_since(p.pid, b) for p, b in zip(procs, before, strict=True))
        await asyncio.sleep(0.05)
        if notices:
            run.first = notices[0] - start.value
    finally:
        stop.set()
        outcomes = [await asyncio.to_thread(results.get, True, 60) for _ in procs]
        for proc in procs:
            await asyncio.to_thread(proc.join, 30)
        await watcher.close()
    run.rss = [o["rss_mib"] for o in outcomes]
    run.planned = [o["planned"] for o in outcomes]
    run.ok, run.check = await check_admitted(dsn, n)
    if count > 1:
        run.ok = run.ok and sum(run.planned) == n
        run.check += f"; planned {'+'.join(map(str, run.planned))} = {sum(run.planned)}"
    return run


async def check_admitted(dsn: str, n: int) -> tuple[bool, str]:
    conn = await connect(dsn)
    try:
        row = await conn.fetchrow(
            "SELECT (SELECT count(*) FROM tasks) AS tasks, "
            "(SELECT count(DISTINCT idempotency_key) FROM tasks) AS keys, "
            "(SELECT count(*) FROM occurrences) AS occurrences, "
            "(SELECT count(*) FROM definitions WHERE next_due_at <= $1) AS still_due", DUE)
    finally:
        await conn.close()
    ok = row["tasks"] == row["keys"] == row["occurrences"] == n and row["still_due"] == 0
    return ok, (f"tasks={row['tasks']} keys={row['keys']} occurrences={row['occurrences']} "
                f"still_due={row['still_due']}")


# ---------------------------------------------------------------- raw insert

async def admitted_rows(dsn: str) -> tuple[list[str], list[tuple[Any, ...]], list[str],
                                           list[tuple[Any, ...]]]:
    conn = await connect(dsn)
    try:
        names = {}
        for table in ("occurrences", "tasks"):
            names[table] = [r["attname"] for r in await conn.fetch(
                "SELECT attname FROM pg_attribute WHERE attrelid = $1::regclass AND attnum > 0 "
                "AND NOT attisdropped AND attgenerated = '' AND attidentity = '' "
                "ORDER BY attnum", table)]
        occ = [tuple(r) for r in await conn.fetch(
            f"SELECT {', '.join(names['occurrences'])} FROM occurrences ORDER BY decided_at")]
        tasks = [tuple(r) for r in await conn.fetch(
            f"SELECT {', '.join(names['tasks'])} FROM tasks ORDER BY task_id")]
    finally:
        await conn.close()
    return names["occurrences"], occ, names["tasks"], tasks


async def raw_insert(dsn: str, rows: tuple[list[str], list[tuple[Any, ...]], list[str],
                                          list[tuple[Any, ...]]], how: str) -> float:
    """Seconds to insert the rows in batches of 1000 of each table per transaction."""
    ocols, occ, tcols, tasks = rows
    conn = await connect(dsn)
    try:
        types = {}
        for table, cols in (("occurrences", ocols), ("tasks", tcols)):
            found = {r["attname"]: r["t"] for r in await conn.fetch(
                "SELECT attname, format_type(atttypid, atttypmod) AS t FROM pg_attribute "
                "WHERE attrelid = $1::regclass AND attnum > 0", table)}
            types[table] = [found[c] for c in cols]
        inserts = {table: f"INSERT INTO {table} ({', '.join(cols)}) SELECT * FROM unnest("
                          + ", ".join(f"${i + 1}::{t}[]" for i, t in enumerate(types[table]))
                          + ")" for table, cols in (("occurrences", ocols), ("tasks", tcols))}
        batches = [(occ[i:i + 1000], tasks[i:i + 1000]) for i in range(0, len(occ), 1000)]
        columns = [([list(c) for c in zip(*o, strict=True)],
                    [list(c) for c in zip(*t, strict=True)]) for o, t in batches]
        began = time.perf_counter()
        for (o, t), (oc, tc) in zip(batches, columns, strict=True):
            async with conn.transaction():
                if how == "copy":
                    await conn.copy_records_to_table("occurrences", records=o, columns=ocols)
                    await conn.copy_records_to_table("tasks", records=t, columns=tcols)
                else:
                    await conn.execute(inserts["occurrences"], *oc)
                    await conn.execute(inserts["tasks"], *tc)
        return time.perf_counter() - began
    finally:
        await conn.close()


# ---------------------------------------------------------------- one shape, one size

@dataclass
class SizeResult:
    shape: str
    n: int
    seed_check: str
    runs: dict[int, list[Run]] = field(default_factory=dict)
    raw_copy: list[float] = field(default_factory=list)
    raw_unnest: list[float] = field(default_factory=list)


async def measure(dbs: Databases, shape: str, n: int, repeats: int, sample: int) -> SizeResult:
    crons = distinct_crons(n, DUE) if shape == "distinct" else shared_crons(n, DUE)
    template = await migrated(dbs, f"{shape}_{n}_t")
    log(f"{shape} N={n:,}: seeding")
    seeded = await bulk_seed(dbs.dsn(template), crons, prefix="d",
                             confirmed_at=confirmed_before(DUE), distinct=shape == "distinct")
    assert seeded.next_due_at == DUE
    control = await migrated(dbs, f"{shape}_{n}_c")
    numbers = sorted({round(i * (n - 1) / max(sample - 1, 1)) for i in range(min(sample, n))})
    async with Database.open(dbs.dsn(control), migrate=False) as db:
        await public_seed(db, crons, numbers, prefix="d", confirmed_at=confirmed_before(DUE),
                          distinct=shape == "distinct")
    ok, line = await check_bulk(dbs.dsn(template), dbs.dsn(control),
                                [definition_id("d", i) for i in numbers])
    await dbs.drop(control)
    if not ok:
        raise SystemExit(f"seed check failed for {shape} N={n}: {line}")
    await vacuum(dbs.dsn(template))
    result = SizeResult(shape, n, line)
    for repeat in range(repeats):
        for count in (1, 2):
            clone = await dbs.create(f"{shape}_{n}_r", template)
            log(f"{shape} N={n:,} repeat {repeat + 1}: {count} supervisor(s)")
            run = await admission_run(dbs.dsn(clone), n, count)
            result.runs.setdefault(count, []).append(run)
            if count == 1:
                rows = await admitted_rows(dbs.dsn(clone))
            await dbs.drop(clone)
        for how, into in (("copy", result.raw_copy), ("unnest", result.raw_unnest)):
            clone = await dbs.create(f"{shape}_{n}_raw", template)
            into.append(await raw_insert(dbs.dsn(clone), rows, how))
            await dbs.drop(clone)
    await dbs.drop(template)
    return result


# ---------------------------------------------------------------- idle ticks

@dataclass
class IdleResult:
    idle: int
    without: list[float]
    with_idle: list[float]


async def measure_idle(dbs: Databases, idle: int, samples: int) -> IdleResult:
    empty = await migrated(dbs, "idle_0")
    full = await migrated(dbs, "idle_n")
    log(f"idle: seeding {idle:,} idle definitions")
    later = DUE + timedelta(days=7)
    await bulk_seed(dbs.dsn(full), shared_crons(idle, later), prefix="i",
                    confirmed_at=confirmed_before(later), distinct=False)
    for name in (empty, full):
        await vacuum(dbs.dsn(name))
    out: dict[str, list[float]] = {empty: [], full: []}
    async with Database.open(dbs.dsn(empty), migrate=False) as a, \
            Database.open(dbs.dsn(full), migrate=False) as b:
        clock = FakeClock(DUE)
        for index in range(samples + 5):
            for name, db in ((empty, a), (full, b)) if index % 2 else ((full, b), (empty, a)):
                began = time.perf_counter()
                await tick(db, clock)
                await db.fetchval("next_due")
                if index >= 5:  # the first ones warm the caches
                    out[name].append(time.perf_counter() - began)
                clock.advance(0.25)
    return IdleResult(idle, out[empty], out[full])


# ---------------------------------------------------------------- report

def log(message: str) -> None:
    print(f"[{datetime.now(UTC):%H:%M:%S}] {message}", file=sys.stderr, flush=True)


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    line = "| " + " | ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)) + " |"
    rule = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    body = ["| " + " | ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) + " |"
            for r in rows]
    return "\n".join([line, rule, *body])


def med(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def spread(values: Sequence[float | None]) -> str:
    known = [v for v in values if v is not None]
    return f"{min(known):.3f}-{max(known):.3f}" if known else "-"


def size_rows(r: SizeResult) -> list[list[str]]:
    raw = med(r.raw_copy)
    rows = []
    for count, runs in sorted(r.runs.items()):
        t_all = med([x.t_all for x in runs])
        first = med([x.first for x in runs])
        cpu = med([x.cpu / r.n * 1000 for x in runs])
        rows.append([
            f"{r.n:,}", str(count), f"{t_all:.3f} ({spread([x.t_all for x in runs])})"
            if t_all is not None else "timeout",
            f"{raw:.3f}" if raw else "-", f"{med(r.raw_unnest):.3f}",
            f"{t_all / raw:.2f}x" if t_all and raw else "-",
            f"{cpu:.3f}" if cpu is not None else "-",
            f"{max(max(x.rss) for x in runs):.0f}",
            f"{first * 1000:.0f}" if first is not None else "-",
            "ok" if all(x.ok for x in runs) else "FAIL"])
    return rows


HEADERS = ["N", "sup", "t_all s median (min-max)", "raw copy s", "raw unnest s", "ratio",
           "CPU ms/def", "peak RSS MiB", "first row ms", "check"]


async def server_header(dsn: str) -> list[str]:
    conn = await asyncpg.connect(dsn)
    try:
        version = await conn.fetchval("SELECT version()")
        settings = {r["name"]: r["setting"] for r in await conn.fetch(
            "SELECT name, setting FROM pg_settings WHERE name IN ('synchronous_commit', "
            "'shared_buffers', 'max_wal_size', 'checkpoint_timeout')")}
    finally:
        await conn.close()
    return [f"server: {version}",
            "settings: " + " ".join(f"{k}={v}" for k, v in sorted(settings.items()))]


def report(header: list[str], sizes: list[SizeResult], idle: IdleResult | None) -> None:
    print("\n".join(header))
    for shape in ("shared", "distinct"):
        mine = [s for s in sizes if s.shape == shape]
        if not mine:
            continue
        print(f"\n## {shape}: N definitions due at {DUE.isoformat()}\n")
        print(table(HEADERS, [row for s in mine for row in size_rows(s)]))
        for s in mine:
            print(f"  N={s.n:,} seed check: {s.seed_check}")
            for count, runs in sorted(s.runs.items()):
                for x in runs:
                    print(f"  N={s.n:,} x{count}: t_all={x.t_all} first={x.first} "
                          f"cpu={x.cpu:.3f}s rss={[round(v) for v in x.rss]} {x.check}")
    if idle is not None:
        a, b = med(idle.without), med(idle.with_idle)
        assert a is not None and b is not None
        print(f"\n## a tick with nothing due (tick + next-due read), {len(idle.without)} each\n")
        print(table(["idle definitions", "ms median", "min-max ms"], [
            ["0", f"{a * 1000:.2f}", f"{min(idle.without) * 1000:.2f}-{max(idle.without) * 1000:.2f}"],
            [f"{idle.idle:,}", f"{b * 1000:.2f}",
             f"{min(idle.with_idle) * 1000:.2f}-{max(idle.with_idle) * 1000:.2f}"]]))
        print(f"  difference: {(b - a) / a * 100:+.1f}%")
    print("\n## targets\n")
    rows = []
    for s in sizes:
        runs1 = s.runs.get(1, [])
        raw = med(s.raw_copy)
        t1 = med([x.t_all for x in runs1])
        t2 = med([x.t_all for x in s.runs.get(2, [])])
        if s.shape == "distinct" and s.n in (10_000, 100_000) and t1 and raw:
            goal = 3.0 if s.n == 10_000 else 2.0
            best = min(t for t in (t1, t2) if t)
            rows.append([f"{s.n:,} distinct within {goal:g}x raw", f"{best / raw:.2f}x",
                         _met(best / raw <= goal)])
        if t1 and t2 and s.n >= 1000:  # a due set to split (N=1 is one row: nothing to share)
            rows.append([f"{s.shape} {s.n:,}: 2 supervisors no slower than 1",
                         f"{t2:.3f} s vs {t1:.3f} s", _met(t2 <= t1 * 1.02)])
        if s.n >= 1000:
            cpu = med([x.cpu / s.n * 1000 for x in runs1])
            if cpu is not None:
                rows.append([f"{s.shape} {s.n:,}: CPU <= 0.05 ms/def", f"{cpu:.3f} ms",
                             _met(cpu <= 0.05)])
        if s.n in (1, 1000):
            first = med([x.first for x in runs1])
            if first is not None:
                rows.append([f"{s.shape} {s.n:,}: first row <= 100 ms", f"{first * 1000:.0f} ms",
                             _met(first <= 0.1)])
        if s.n == 100_000:
            rss = max(max(x.rss) for x in runs1)
            rows.append([f"{s.shape} 100,000: peak RSS <= 150 MiB", f"{rss:.0f} MiB",
                         _met(rss <= 150)])
    if idle is not None:
        a, b = med(idle.without), med(idle.with_idle)
        assert a is not None and b is not None
        rows.append([f"idle tick: {idle.idle:,} idle within 10%", f"{(b - a) / a * 100:+.1f}%",
                     _met(abs(b - a) / a <= 0.10)])
    print(table(["target", "measured", "met?"], rows))


def _met(ok: bool) -> str:
    return "yes" if ok else "**no**"


# ---------------------------------------------------------------- main

async def bench(server: str, args: argparse.Namespace) -> None:
    dbs = Databases(server)
    header = [f"# watchkeeper admission bench, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC",
              f"machine: {os.cpu_count()} cores; Python {sys.version.split()[0]}; "
              f"asyncpg {asyncpg.__version__}", *await server_header(server),
              f"repeats={args.repeats}; supervisor: workers=0, batch 1000 (first 100), "
              "2 admission lanes, LISTEN/NOTIFY"]
    sizes: list[SizeResult] = []
    try:
        for shape in args.shapes:
            for n in args.sizes:
                sizes.append(await measure(dbs, shape, n, args.repeats, args.sample))
        idle = await measure_idle(dbs, args.idle, args.idle_samples) if args.idle else None
    finally:
        await dbs.drop_all()
    report(header, sizes, idle)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=lambda t: [int(x) for x in t.split(",")],
                        default=[1, 1000, 10_000, 100_000])
    parser.add_argument("--shapes", type=lambda t: t.split(","), default=["shared", "distinct"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sample", type=int, default=20,
                        help="definitions seeded again through the use cases for the check")
    parser.add_argument("--idle", type=int, default=1_000_000)
    parser.add_argument("--idle-samples", type=int, default=50)
    parser.add_argument("--dsn", default=os.environ.get("DATABASE_URL"))
    args = parser.parse_args(argv)
    if args.dsn:
        asyncio.run(bench(args.dsn, args))
        return
    with tempfile.TemporaryDirectory(prefix="wk-bench-pg-") as home, \
            embedded_postgres(Path(home)) as dsn:
        asyncio.run(bench(dsn, args))


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
