"""Admission throughput of a tick, and what idle definitions cost a tick.

Why: DESIGN "Admission" asks for short, set-based PostgreSQL transactions, and
DESIGN "Calendar triggers" promises that a tick's cost grows with due work, not
with the number of definitions. This script puts numbers on both, all measured in
ONE run against ONE server (these machines are noisy: never compare across runs).

What is measured, for N confirmed user definitions all due at the same minute:

1. Admission. The tick clock is set to the first slot's instant + 1 s and one tick
   is run by 1 supervisor, then, on an identical copy of the database, by 2
   supervisors at once. A supervisor is one OS process (so two use both cores)
   calling ``watchkeeper.runtime.engine._scheduler.tick`` with its own ``Database.open`` pool; each
   opens its pool first and then waits on a shared "go". Reported: wall time from
   "go" until the last tick returns (= from due until every task is admitted),
   admissions per second, CPU seconds of the supervisor processes and of the
   PostgreSQL server over the same span, and plans lost to the other replica.
2. Raw rate. The same number of rows, inserted into a scratch table with the
   columns and primary key of ``occurrences`` by a batched
   ``INSERT ... SELECT FROM unnest(...) ON CONFLICT DO NOTHING`` of 1000 rows per
   statement (one autocommit transaction each) on one connection, the rows built
   beforehand. The target is admission-rate / raw-rate >= 50%.
3. Split. The same loop as ``tick`` (read_due -> plan_tick -> admit, then the
   stale-run sweep) run in this process on another identical copy, with a timer
   around each phase, each SQL statement (by query name, driver encode/decode
   included) and each BEGIN/COMMIT: where the time goes, Python vs SQL. Every
   statement is recorded with its arguments and then replayed on a third copy on
   one connection with no Python planning in between: the SQL floor of this
   admission design (what the tick would cost if planning were free).
4. Idle overhead. A tick with nothing due and a tick with 1k due definitions, on a
   database without and one with 100k extra idle definitions (next due a week
   ahead). Ticks alternate between the two databases; the due tick is repeated on
   successive days (yesterday's tasks are marked completed in between, outside the
   timer, so the overrun policy does not turn them into skips) and day 0 is a
   warm-up. Target: the idle definitions add < 10% to a tick's time. Per-statement
   times of the measured ticks are printed too.

Timers around statements wrap ``watchkeeper.runtime.store._db.Connection`` and asyncpg's transaction
start/commit in this process only, for parts 3 and 4; the supervisor processes of
part 1 run the runtime unmodified.

Seeding: one user and one definition per spec go through the public path
(``add_user``, ``propose``, ``confirm`` under a ``FakeClock``); set-based SQL then
clones them N-1 times so that every clone is what propose/confirm would have
written (same spec, spec_hash, status, fence, cursor_at, next_due_at, effective
revision, confirmation audit), only the ids differ. A check prints that.

Usage::

    .venv/bin/python bench/admission.py [--sizes 1000,10000,100000] [--dsn DSN]

The DSN defaults to ``DATABASE_URL``; without either, an embedded PostgreSQL is
started in a temporary home. Every database created is ``bench_<uuid>...`` and is
dropped ``WITH (FORCE)`` at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing as mp
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import asyncpg.transaction
import psutil

from watchkeeper.runtime.engine._admission import TickReport, admit
from watchkeeper.runtime.engine._clock import FakeClock
from watchkeeper.runtime.engine._registry import Registry
from watchkeeper.runtime.engine._scheduler import reconcile_stale_runs, tick
from watchkeeper.runtime.engine._tick import FIRST_KEY, plan_tick, read_due
from watchkeeper.runtime.store import _db
from watchkeeper.runtime.store._db import Database
from watchkeeper.runtime.store._embedded import embedded_postgres
from watchkeeper.runtime.usecases import UserPrincipal, add_user, confirm, propose
from watchkeeper.triggers import Slot, parse_spec, tzdata_version

TENANT = "bench"
CONFIRMED_AT = datetime(2026, 11, 30, 7, 0, tzinfo=UTC)
"""When the template definitions are confirmed: 08:00 in Paris, a Monday."""
DUE_SPEC = {"version": 1, "trigger": {"type": "cron", "expr": "0 9 * * *", "zone": "Europe/Paris"}}
"""Daily at 09:00 Paris: first slot 2026-11-30T08:00Z, one hour after confirmation."""
IDLE_SPEC = {"version": 1,
             "trigger": {"type": "cron", "expr": "0 9 7 12 *", "zone": "Europe/Paris"}}
"""First slot 2026-12-07T08:00Z: exactly a week after the due one."""
RAW_BATCH = 1000

# ---------------------------------------------------------------- seeding SQL
# $1 tenant, $2 template id (user id = definition id), $3 id prefix, $4..$5 clone numbers.

_CLONE_ID = "$3::text || lpad(g::text, 7, '0')"
CLONE_SQL = (
    f"""
    INSERT INTO users (tenant_id, user_id, display_name, zone, token_sha256, created_at)
    SELECT u.tenant_id, {_CLONE_ID}, u.display_name, u.zone,
           sha256(convert_to(gen_random_uuid()::text, 'UTF8')), u.created_at
    FROM users u, generate_series($4::int, $5::int) AS g
    WHERE u.tenant_id = $1 AND u.user_id = $2
    """,
    f"""
    INSERT INTO definitions (tenant_id, definition_id, origin, owner_user_id, status, fence,
                             latest_revision, effective_revision, effective_since, cursor_at,
                             slots_seen, next_due_at, paused_at, created_at, updated_at)
    SELECT d.tenant_id, {_CLONE_ID}, d.origin, {_CLONE_ID}, d.status, d.fence,
           d.latest_revision, d.effective_revision, d.effective_since, d.cursor_at,
           d.slots_seen, d.next_due_at, d.paused_at, d.created_at, d.updated_at
    FROM definitions d, generate_series($4::int, $5::int) AS g
    WHERE d.tenant_id = $1 AND d.definition_id = $2
    """,
    f"""
    INSERT INTO definition_revisions (tenant_id, definition_id, revision, spec, spec_hash,
                                      registration, status, based_on, proposed_by, proposed_at,
                                      confirmed_by, confirmed_at)
    SELECT r.tenant_id, {_CLONE_ID}, r.revision, r.spec, r.spec_hash,
           r.registration, r.status, r.based_on, r.proposed_by, r.proposed_at,
           'user:' || r.tenant_id || '/' || {_CLONE_ID}, r.confirmed_at
    FROM definition_revisions r, generate_series($4::int, $5::int) AS g
    WHERE r.tenant_id = $1 AND r.definition_id = $2
    """,
)

SEED_CHECK_SQL = """
SELECT count(*) AS clones,
       count(*) FILTER (WHERE
           (d.origin, d.status, d.fence, d.latest_revision, d.effective_revision,
            d.effective_since, d.cursor_at, d.slots_seen, d.next_due_at, d.paused_at,
            d.created_at, d.updated_at)
           IS DISTINCT FROM
           (t.origin, t.status, t.fence, t.latest_revision, t.effective_revision,
            t.effective_since, t.cursor_at, t.slots_seen, t.next_due_at, t.paused_at,
            t.created_at, t.updated_at)
        OR (r.revision, r.spec, r.spec_hash, r.registration, r.status, r.based_on,
            r.proposed_by, r.proposed_at, r.confirmed_at)
           IS DISTINCT FROM
           (tr.revision, tr.spec, tr.spec_hash, tr.registration, tr.status, tr.based_on,
            tr.proposed_by, tr.proposed_at, tr.confirmed_at)
        OR d.owner_user_id <> d.definition_id
        OR r.confirmed_by <> 'user:' || d.tenant_id || '/' || d.owner_user_id
       ) AS differing
FROM definitions d
JOIN definition_revisions r
  ON r.tenant_id = d.tenant_id AND r.definition_id = d.definition_id
JOIN users u ON u.tenant_id = d.tenant_id AND u.user_id = d.owner_user_id
CROSS JOIN definitions t
JOIN definition_revisions tr
  ON tr.tenant_id = t.tenant_id AND tr.definition_id = t.definition_id
WHERE t.tenant_id = $1 AND t.definition_id = $2
  AND d.tenant_id = $1 AND d.definition_id LIKE $3::text || '%'
"""

ADMITTED_CHECK_SQL = """
SELECT (SELECT count(*) FROM tasks) AS tasks,
       (SELECT count(DISTINCT (tenant_id, idempotency_key)) FROM tasks) AS keys,
       (SELECT count(*) FROM occurrences) AS occurrences,
       (SELECT count(*) FROM occurrences WHERE decision = 'admitted') AS admitted,
       (SELECT count(*) FROM definitions WHERE status = 'active' AND next_due_at <= $1)
           AS still_due
"""

RAW_TABLE_SQL = """
CREATE TABLE bench_raw_occurrences (LIKE occurrences INCLUDING DEFAULTS INCLUDING CONSTRAINTS);
ALTER TABLE bench_raw_occurrences
    ADD PRIMARY KEY (tenant_id, definition_id, binding_id, slot, kind);
"""

RAW_INSERT_SQL = """
INSERT INTO bench_raw_occurrences (
    tenant_id, definition_id, binding_id, slot, kind, definition_tenant_id, revision,
    scheduled_for, not_before, expires_at, zone, local_wall, fold, decision, reason, late,
    lateness_seconds, run_status, run_deadline_at, tzdata_version, decided_at, decided_by)
SELECT i.*, $20::text, $21::timestamptz, $22::text
FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[],
            $7::integer[], $8::timestamptz[], $9::timestamptz[], $10::timestamptz[], $11::text[],
            $12::timestamp[], $13::smallint[], $14::text[], $15::text[], $16::boolean[],
            $17::double precision[], $18::text[], $19::timestamptz[]) AS i
ON CONFLICT DO NOTHING
"""

COMPLETE_TASKS_SQL = """
UPDATE tasks SET status = 'completed', status_reason = 'bench', finished_at = $1
WHERE status IN ('pending', 'held')
"""


# ---------------------------------------------------------------- databases

SEARCH_PATH = _db.server_settings(_db.DEFAULT_SCHEMA)
"""Raw connections see watchkeeper's schema (its tables are not in public)."""


def with_database(dsn: str, name: str) -> str:
    """``dsn`` pointing at database ``name``."""
    parts = urlsplit(dsn)
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))


def database_of(dsn: str) -> str:
    """The database name of ``dsn``."""
    return urlsplit(dsn).path.lstrip("/")


async def run_sql(dsn: str, *statements: str, args: Sequence[Any] = ()) -> None:
    """Execute statements on a fresh connection (outside any timer)."""
    conn = await asyncpg.connect(dsn, server_settings=SEARCH_PATH)
    try:
        for statement in statements:
            await conn.execute(statement, *args)
    finally:
        await conn.close()


async def fetch_one(dsn: str, query: str, *args: Any) -> asyncpg.Record:
    """The first row of ``query`` on a fresh connection."""
    conn = await asyncpg.connect(dsn, server_settings=SEARCH_PATH)
    try:
        row = await conn.fetchrow(query, *args)
    finally:
        await conn.close()
    assert row is not None
    return row


class Databases:
    """Creates ``bench_<uuid>`` databases on one server and drops them WITH (FORCE)."""

    def __init__(self, server: str) -> None:
        self.server = server
        self.stem = f"bench_{uuid.uuid4().hex[:12]}"
        self.live: list[str] = []

    async def create(self, label: str, template: str | None = None) -> str:
        """A new database (a copy of ``template``'s database if given); its DSN.

        A fresh one is migrated by ``Database.open``, as a supervisor would.
        """
        name = f"{self.stem}_{label}"
        clause = f' TEMPLATE "{database_of(template)}"' if template else ""
        await run_sql(self.server, f'CREATE DATABASE "{name}"{clause}')
        self.live.append(name)
        dsn = with_database(self.server, name)
        if template is None:
            async with Database.open(dsn):
                pass  # migrations applied
        return dsn

    async def drop(self, dsn: str) -> None:
        """Drop one database created here."""
        name = database_of(dsn)
        await run_sql(self.server, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        self.live.remove(name)

    async def drop_all(self) -> None:
        """Drop every database still alive."""
        for name in list(self.live):
            await self.drop(with_database(self.server, name))


def ident(prefix: str, number: int) -> str:
    """The user id and definition id of clone ``number`` (same as CLONE_SQL)."""
    return f"{prefix}{number:07d}"


async def seed(dsn: str, spec_data: dict[str, Any], prefix: str, count: int) -> datetime:
    """One user + definition through the public path, cloned to ``count``; the due instant."""
    clock = FakeClock(CONFIRMED_AT)
    spec = parse_spec(spec_data)
    first = ident(prefix, 1)
    async with Database.open(dsn, migrate=False) as db:
        await add_user(db, clock, TENANT, first, zone="Europe/Paris")
        proposal = await propose(db, clock, tenant_id=TENANT, definition_id=first,
                                 owner_user_id=first, spec=spec, proposed_by="agent:bench")
        done = await confirm(db, clock, UserPrincipal(TENANT, first), definition_id=first,
                             revision=proposal.revision, spec_hash=proposal.spec_hash)
        if count > 1:
            async with db.transaction() as tx:
                for statement in CLONE_SQL:
                    await tx.raw.execute(statement, TENANT, first, prefix, 2, count)
    assert done.next_due_at is not None
    return done.next_due_at


async def check_seed(dsn: str, prefix: str, count: int) -> str:
    """'ok' when every clone equals the template but for its ids."""
    row = await fetch_one(dsn, SEED_CHECK_SQL, TENANT, ident(prefix, 1), prefix)
    ok = row["clones"] == count and row["differing"] == 0
    return f"{'ok' if ok else 'FAILED'} ({row['clones']} rows, {row['differing']} differ)"


async def check_admitted(dsn: str, expected: int, now: datetime) -> tuple[bool, str]:
    """Exactly ``expected`` tasks, admitted occurrences and distinct keys; nothing still due."""
    row = await fetch_one(dsn, ADMITTED_CHECK_SQL, now)
    ok = (row["tasks"] == row["keys"] == row["occurrences"] == row["admitted"] == expected
          and row["still_due"] == 0)
    text = (f"tasks={row['tasks']} distinct_keys={row['keys']} "
            f"occurrences={row['occurrences']} admitted={row['admitted']} "
            f"still_due={row['still_due']}")
    return ok, text


# ---------------------------------------------------------------- server CPU


class ServerCpu:
    """CPU seconds of the PostgreSQL backends serving one database (the process title
    names the database), read with psutil; ``None`` when the server is not a visible
    local process. Other databases on the server (other people's tests) are not counted;
    background processes (WAL writer, checkpointer) are not either."""

    def __init__(self, postmaster: psutil.Process | None) -> None:
        self.postmaster = postmaster

    @classmethod
    async def of(cls, dsn: str) -> ServerCpu:
        """Find the postmaster as the parent of a backend of ``dsn``."""
        conn = await asyncpg.connect(dsn, server_settings=SEARCH_PATH)
        try:  # look while the backend is alive
            backend = psutil.Process(await conn.fetchval("SELECT pg_backend_pid()"))
            return cls(backend.parent() if "postgres" in backend.name() else None)
        except psutil.Error:
            return cls(None)
        finally:
            await conn.close()

    def sample(self, dsn: str) -> dict[int, float] | None:
        """Cumulative CPU seconds of each live backend of ``dsn``'s database."""
        if self.postmaster is None:
            return None
        token = f" {database_of(dsn)} "
        found = {}
        try:
            children = self.postmaster.children()
        except psutil.Error:
            return None
        for child in children:
            try:
                if token in " ".join(child.cmdline()) + " ":
                    times = child.cpu_times()
                    found[child.pid] = times.user + times.system
            except psutil.Error:
                continue
        return found


def spent(before: dict[int, float] | None, after: dict[int, float] | None) -> float | None:
    """CPU seconds between two samples (a backend that left in between is not counted)."""
    if before is None or after is None:
        return None
    return sum(cpu - before.get(pid, 0.0) for pid, cpu in after.items())


# ---------------------------------------------------------------- 1. supervisors


@dataclass
class SupervisorRun:
    """One timed tick by one or more supervisor processes."""

    supervisors: int
    wall: float
    per_process: list[dict[str, Any]]
    server_cpu: float | None
    check_ok: bool = False
    check: str = ""

    @property
    def admitted(self) -> int:
        """Admissions reported by the ticks."""
        return sum(p["admitted"] for p in self.per_process)

    @property
    def lost_race(self) -> int:
        """Plans a supervisor computed but another one applied or held."""
        return sum(p["lost_race"] for p in self.per_process)

    @property
    def supervisor_cpu(self) -> float:
        """CPU seconds of the supervisor processes during their ticks."""
        return sum(p["cpu"] for p in self.per_process)


def supervisor_main(dsn: str, now: str, actor: str, batch_size: int, ready: Any, go: Any,
                    release: Any, results: Any) -> None:
    """Entry point of a supervisor process (spawned)."""
    asyncio.run(_supervise(dsn, datetime.fromisoformat(now), actor, batch_size, ready, go,
                           release, results))


async def _supervise(dsn: str, now: datetime, actor: str, batch_size: int, ready: Any, go: Any,
                     release: Any, results: Any) -> None:
    async with Database.open(dsn, migrate=False) as db:
        await db.fetchval("server_clock")  # the pool's connection is up
        ready.set()
        await asyncio.to_thread(go.wait)
        cpu0, start = time.process_time(), time.monotonic()
        report = await tick(db, FakeClock(now), None, actor=actor, batch_size=batch_size)
        end, cpu1 = time.monotonic(), time.process_time()
        results.put({"actor": actor, "start": start, "end": end, "cpu": cpu1 - cpu0,
                     "admitted": report.admitted, "planned": report.planned,
                     "lost_race": report.lost_race, "fenced_out": report.fenced_out,
                     "decisions": dict(report.decisions)})
        await asyncio.to_thread(release.wait)  # keep the backends alive for the CPU sample


def run_supervisors(dsn: str, now: datetime, count: int, batch_size: int,
                    cpu: ServerCpu) -> SupervisorRun:
    """Start ``count`` supervisor processes, let them tick at once, collect the figures."""
    ctx = mp.get_context("spawn")
    ready = [ctx.Event() for _ in range(count)]
    go, release, results = ctx.Event(), ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=supervisor_main,
                         args=(dsn, now.isoformat(), f"bench-supervisor-{i}", batch_size,
                               ready[i], go, release, results))
             for i in range(count)]
    for proc in procs:
        proc.start()
    try:
        for event in ready:
            if not event.wait(timeout=300):
                raise RuntimeError("a supervisor process did not become ready")
        cpu_before = cpu.sample(dsn)
        started = time.monotonic()
        go.set()
        per_process = [results.get(timeout=3600) for _ in procs]
        cpu_after = cpu.sample(dsn)
    finally:
        release.set()
        for proc in procs:
            proc.join(timeout=120)
    wall = max(p["end"] for p in per_process) - started
    return SupervisorRun(count, wall, per_process, spent(cpu_before, cpu_after))


# ---------------------------------------------------------------- 2. raw insert


def raw_batches(slot: Slot, now: datetime, count: int) -> list[list[list[Any]]]:
    """Occurrence rows as admission would build them, in 1000-row column batches."""
    grace = timedelta(minutes=10)
    lateness = (now - slot.scheduled_for).total_seconds()
    batches = []
    for start in range(1, count + 1, RAW_BATCH):
        cols: list[list[Any]] = [[] for _ in range(19)]
        for number in range(start, min(start + RAW_BATCH, count + 1)):
            row = (TENANT, ident("due", number), "owner", slot.key, "scheduled", TENANT, 1,
                   slot.scheduled_for, slot.scheduled_for, slot.scheduled_for + grace, slot.zone,
                   slot.wall, slot.fold, "admitted", "due within grace", False, lateness,
                   None, None)
            for col, value in zip(cols, row, strict=True):
                col.append(value)
        batches.append(cols)
    return batches


@dataclass
class RawRun:
    """One timed raw insert."""

    wall: float
    server_cpu: float | None
    check_ok: bool


async def raw_rate(dsn: str, slot: Slot, now: datetime, count: int, cpu: ServerCpu) -> RawRun:
    """Insert ``count`` rows in 1000-row unnest batches into a new scratch table."""
    batches = raw_batches(slot, now, count)
    version = tzdata_version()
    conn = await asyncpg.connect(dsn, server_settings=SEARCH_PATH)
    try:
        await conn.execute("DROP TABLE IF EXISTS bench_raw_occurrences")
        await conn.execute(RAW_TABLE_SQL)
        await conn.execute("CHECKPOINT")
        cpu_before = cpu.sample(dsn)
        start = time.perf_counter()
        for cols in batches:
            await conn.execute(RAW_INSERT_SQL, *cols, version, now, "bench-raw")
        elapsed = time.perf_counter() - start
        cpu_after = cpu.sample(dsn)
        rows = await conn.fetchval("SELECT count(*) FROM bench_raw_occurrences")
    finally:
        await conn.close()
    return RawRun(elapsed, spent(cpu_before, cpu_after), rows == count)


# ---------------------------------------------------------------- 3. split and replay


@dataclass
class Split:
    """Where one in-process tick spent its time (seconds), and its statements.

    ``events`` records every statement with its arguments, and BEGIN/COMMIT, in order,
    so that :func:`replay` can run exactly the same SQL with no Python in between.
    """

    phases: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    sql: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    calls: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    events: list[tuple[str, str, tuple[Any, ...]]] | None = None
    process_cpu: float = 0.0
    server_cpu: float | None = None
    check_ok: bool = False

    @property
    def total(self) -> float:
        """Wall time of the whole tick."""
        return sum(self.phases.values())

    def sql_of(self, names: Sequence[str]) -> float:
        """Time in the named statements."""
        return sum(self.sql.get(n, 0.0) for n in names)


READ_SQL = ("definitions_due", "specs_by_hash")
SWEEP_SQL = ("occurrences_run_stale",)


def _timed(method: str, original: Callable[..., Awaitable[Any]],
           split: Split) -> Callable[..., Awaitable[Any]]:
    async def wrapper(self: Any, name: str, *args: Any) -> Any:
        if split.events is not None:
            split.events.append((method, name, args))
        start = time.perf_counter()
        try:
            return await original(self, name, *args)
        finally:
            split.sql[name] += time.perf_counter() - start
            split.calls[name] += 1
    return wrapper


def _timed_stage(original: Callable[..., Awaitable[Any]],
                 split: Split) -> Callable[..., Awaitable[Any]]:
    """Time (and record) a COPY into a staging table like a statement."""
    async def wrapper(self: Any, table: str, columns: Any, rows: Any) -> Any:
        if split.events is not None:
            split.events.append(("stage", table, (list(columns), list(rows))))
        start = time.perf_counter()
        try:
            return await original(self, table, columns, rows)
        finally:
            split.sql[f"COPY {table}"] += time.perf_counter() - start
            split.calls[f"COPY {table}"] += 1
    return wrapper


def _timed_tx(original: Callable[..., Awaitable[Any]], label: str,
              split: Split) -> Callable[..., Awaitable[Any]]:
    async def wrapper(self: Any) -> Any:
        if split.events is not None:
            split.events.append((label, "", ()))
        start = time.perf_counter()
        try:
            return await original(self)
        finally:
            split.sql[label] += time.perf_counter() - start
            split.calls[label] += 1
    return wrapper


@contextmanager
def statement_timers(split: Split) -> Iterator[None]:
    """Time (and maybe record) every named statement, BEGIN and COMMIT of this process.

    Wraps ``watchkeeper.runtime.store._db.Connection``'s query methods and asyncpg's transaction
    start/commit for the duration only; the runtime code itself is untouched.
    """
    saved: list[tuple[Any, str, Any]] = []
    for method in ("fetch", "fetchrow", "fetchval", "execute"):
        saved.append((_db.Connection, method, getattr(_db.Connection, method)))
        setattr(_db.Connection, method, _timed(method, getattr(_db.Connection, method), split))
    saved.append((_db.Connection, "stage", _db.Connection.stage))
    setattr(_db.Connection, "stage", _timed_stage(_db.Connection.stage, split))  # noqa: B010
    tx_class = asyncpg.transaction.Transaction
    for method, label in (("start", "BEGIN"), ("commit", "COMMIT")):
        saved.append((tx_class, method, getattr(tx_class, method)))
        setattr(tx_class, method, _timed_tx(getattr(tx_class, method), label, split))
    try:
        yield
    finally:
        for owner, method, original in saved:
            setattr(owner, method, original)


async def split_tick(dsn: str, now: datetime, batch_size: int, cpu: ServerCpu) -> Split:
    """``tick``'s loop, phase by phase, with timers; its statements are recorded."""
    split = Split(events=[])
    registry = Registry()
    report = TickReport()
    async with Database.open(dsn, migrate=False) as db:
        await db.fetchval("server_clock")
        cpu_before, process_before = cpu.sample(dsn), time.process_time()
        with statement_timers(split):
            position = FIRST_KEY
            while True:
                mark = time.perf_counter()
                due, after = await read_due(db, now, batch_size, position)
                split.phases["read_due"] += time.perf_counter() - mark
                if due:
                    mark = time.perf_counter()
                    plans = await plan_tick(due, now, registry)
                    split.phases["plan_tick"] += time.perf_counter() - mark
                    mark = time.perf_counter()
                    report.merge(await admit(db, plans, now, "bench-split"))
                    split.phases["admit"] += time.perf_counter() - mark
                if after is None:
                    break
                position = after
            mark = time.perf_counter()
            await reconcile_stale_runs(db, FakeClock(now))
            split.phases["sweep"] += time.perf_counter() - mark
        split.process_cpu = time.process_time() - process_before
        split.server_cpu = spent(cpu_before, cpu.sample(dsn))
    return split


@dataclass
class Replay:
    """The recorded statements of a tick, run again with no Python planning between."""

    wall: float
    process_cpu: float
    server_cpu: float | None
    check_ok: bool = False


async def replay(dsn: str, events: Sequence[tuple[str, str, tuple[Any, ...]]],
                 cpu: ServerCpu) -> Replay:
    """Run ``events`` on one connection (same SQL, same arguments, same transactions).

    What is left is the SQL floor of this admission design: driver encode/decode,
    round trips and the server's work.
    """
    conn = await asyncpg.connect(dsn, server_settings=SEARCH_PATH)
    await _db._init_connection(conn)
    try:
        cpu_before, process_before = cpu.sample(dsn), time.process_time()
        start = time.perf_counter()
        tx = None
        for method, name, args in events:
            if method == "BEGIN":
                tx = conn.transaction()
                await tx.start()
            elif method == "COMMIT":
                assert tx is not None
                await tx.commit()
            elif method == "stage":
                columns, rows = args
                await conn.copy_records_to_table(name, records=rows, columns=columns)
            else:
                await getattr(conn, method)(_db.QUERIES[name], *args)
        wall = time.perf_counter() - start
        return Replay(wall, time.process_time() - process_before,
                      spent(cpu_before, cpu.sample(dsn)))
    finally:
        await conn.close()


# ---------------------------------------------------------------- 1+2+3 for one N


@dataclass
class SizeResult:
    """Everything measured for one N."""

    n: int
    seed_check: str
    runs: dict[int, list[SupervisorRun]]
    raws: list[RawRun]
    split: Split
    replay: Replay


async def vacuum_analyze(dsn: str) -> None:
    """Leave the seeded database as a settled one would be (outside any timer)."""
    await run_sql(dsn, "VACUUM (ANALYZE)")


def first_slot(due: datetime) -> Slot:
    """The due slot of DUE_SPEC, as a tick would compute it."""
    spec = parse_spec(DUE_SPEC)
    window = spec.window(CONFIRMED_AT - timedelta(microseconds=1), due)
    assert window.last is not None
    return window.last


async def one_supervisor_run(dbs: Databases, template: str, n: int, now: datetime,
                             supervisors: int, batch_size: int, cpu: ServerCpu) -> SupervisorRun:
    """A copy of the seeded database, one timed tick by ``supervisors`` processes, a check."""
    copy = await dbs.create(f"n{n}_s{supervisors}", template)
    await run_sql(copy, "CHECKPOINT")
    run = await asyncio.to_thread(run_supervisors, copy, now, supervisors, batch_size, cpu)
    run.check_ok, run.check = await check_admitted(copy, n, now)
    await dbs.drop(copy)
    return run


async def measure_size(dbs: Databases, n: int, batch_size: int, repeats: int,
                       cpu: ServerCpu) -> SizeResult:
    """Seed N due definitions; time 1 and 2 supervisors and the raw insert ``repeats``
    times, interleaved; then the split tick and its replay once."""
    log(f"N={n}: seeding")
    template = await dbs.create(f"n{n}")
    due = await seed(template, DUE_SPEC, "due", n)
    seed_check = await check_seed(template, "due", n)
    await vacuum_analyze(template)
    now = due + timedelta(seconds=1)
    runs: dict[int, list[SupervisorRun]] = {1: [], 2: []}
    raws = []
    raw_db = await dbs.create(f"n{n}_raw", template)
    for repeat in range(repeats):
        for supervisors in (1, 2):
            log(f"N={n}: {supervisors} supervisor(s), repeat {repeat + 1}/{repeats}")
            runs[supervisors].append(await one_supervisor_run(
                dbs, template, n, now, supervisors, batch_size, cpu))
        log(f"N={n}: raw insert, repeat {repeat + 1}/{repeats}")
        raws.append(await raw_rate(raw_db, first_slot(due), now, n, cpu))
    await dbs.drop(raw_db)
    log(f"N={n}: split tick and replay")
    split_db = await dbs.create(f"n{n}_split", template)
    replay_db = await dbs.create(f"n{n}_replay", template)
    await run_sql(split_db, "CHECKPOINT")
    split = await split_tick(split_db, now, batch_size, cpu)
    split.check_ok = (await check_admitted(split_db, n, now))[0]
    assert split.events is not None
    await run_sql(replay_db, "CHECKPOINT")
    replayed = await replay(replay_db, split.events, cpu)
    replayed.check_ok = (await check_admitted(replay_db, n, now))[0]
    split.events = None
    for dsn in (split_db, replay_db, template):
        await dbs.drop(dsn)
    return SizeResult(n, seed_check, runs, raws, split, replayed)


# ---------------------------------------------------------------- 4. idle overhead


@dataclass
class IdleResult:
    """Tick times (seconds) without / with idle definitions, and per statement."""

    idle: int
    due: int
    seed_checks: list[str]
    empty: dict[str, list[float]]
    busy: dict[str, list[float]]
    statements: dict[str, dict[str, list[float]]]
    empty_statements: dict[str, dict[str, list[float]]]
    checks: list[str]

    def ratio(self, series: dict[str, list[float]]) -> float:
        """Median with idle / median without."""
        return statistics.median(series["with"]) / statistics.median(series["without"])


async def timed_tick(db: Database, now: datetime, batch_size: int,
                     statements: dict[str, list[float]] | None = None) -> tuple[float, TickReport]:
    """Wall seconds of one ``tick`` at ``now`` (per-statement seconds appended if asked)."""
    split = Split()
    with statement_timers(split) if statements is not None else contextlib.nullcontext():
        start = time.perf_counter()
        report = await tick(db, FakeClock(now), None, actor="bench-idle", batch_size=batch_size)
        elapsed = time.perf_counter() - start
    if statements is not None:
        for name, value in split.sql.items():
            statements[name].append(value)
    return elapsed, report


async def seed_idle_pair(dbs: Databases, idle: int, due_count: int
                         ) -> tuple[dict[str, str], datetime, list[str]]:
    """Two databases with ``due_count`` due definitions, one also with ``idle`` idle ones."""
    plain = await dbs.create("idle_without")
    due = await seed(plain, DUE_SPEC, "due", due_count)
    checks = [await check_seed(plain, "due", due_count)]
    crowded = await dbs.create("idle_with", plain)
    await seed(crowded, IDLE_SPEC, "idle", idle)
    checks.append(await check_seed(crowded, "idle", idle))
    for dsn in (plain, crowded):
        await vacuum_analyze(dsn)
    return {"without": plain, "with": crowded}, due, checks


async def measure_idle(dbs: Databases, idle: int, due_count: int, days: int, empty_reps: int,
                       batch_size: int) -> IdleResult:
    """Empty and due ticks on a database without and one with ``idle`` idle definitions."""
    log(f"idle: seeding {due_count} due + {idle} idle")
    dsns, due, seed_checks = await seed_idle_pair(dbs, idle, due_count)
    empty: dict[str, list[float]] = {"without": [], "with": []}
    busy: dict[str, list[float]] = {"without": [], "with": []}
    statements: dict[str, dict[str, list[float]]] = {
        "without": defaultdict(list), "with": defaultdict(list)}
    empty_statements: dict[str, dict[str, list[float]]] = {
        "without": defaultdict(list), "with": defaultdict(list)}
    checks = []
    async with Database.open(dsns["without"], migrate=False) as a, \
            Database.open(dsns["with"], migrate=False) as b:
        pools = {"without": a, "with": b}
        for day in range(days):
            log(f"idle: day {day}")
            order = ["without", "with"] if day % 2 == 0 else ["with", "without"]
            slot_at = due + timedelta(days=day)
            for key in order:
                await run_sql(dsns[key], COMPLETE_TASKS_SQL, args=(slot_at - timedelta(hours=1),))
                await run_sql(dsns[key], "VACUUM (ANALYZE) tasks, occurrences, definitions",
                              "CHECKPOINT")
            for _ in range(empty_reps):
                for key in order:
                    elapsed, report = await timed_tick(
                        pools[key], slot_at - timedelta(minutes=30), batch_size,
                        empty_statements[key] if day else None)
                    assert report.planned == 0, report
                    if day > 0:
                        empty[key].append(elapsed)
            for key in order:
                elapsed, report = await timed_tick(pools[key], slot_at + timedelta(seconds=1),
                                                   batch_size, statements[key] if day else None)
                checks.append(f"day {day} {key}: admitted={report.admitted}")
                assert report.admitted == due_count, report
                if day > 0:
                    busy[key].append(elapsed)
    return IdleResult(idle, due_count, seed_checks, empty, busy, statements, empty_statements,
                      checks)


# ---------------------------------------------------------------- report


def log(message: str) -> None:
    """Progress, on stderr."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A markdown table (readable as text too)."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    line = "| " + " | ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)) + " |"
    rule = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    body = ["| " + " | ".join(_cell(c, w) for c, w in zip(r, widths, strict=True)) + " |"
            for r in rows]
    return "\n".join([line, rule, *body])


def _cell(text: str, width: int) -> str:
    """Figures right-aligned, words left-aligned."""
    numeric = text[:1].isdigit() or text[:1] in "+-" or text == "n/a"
    return text.rjust(width) if numeric else text.ljust(width)


def seconds(value: float | None) -> str:
    """A duration, 3 decimals."""
    return "n/a" if value is None else f"{value:.3f}"


def median_of(values: Sequence[float | None]) -> float | None:
    """Median of the known values."""
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def spread(values: Sequence[float]) -> str:
    """``median (min-max)``."""
    return f"{statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f})"


def admission_table(results: Sequence[SizeResult]) -> str:
    """Parts 1 and 2: medians over the repeats."""
    rows = []
    for r in results:
        raw_wall = statistics.median(x.wall for x in r.raws)
        raw = r.n / raw_wall
        for supervisors, runs in r.runs.items():
            wall = statistics.median(x.wall for x in runs)
            rate = r.n / wall
            ok = all(x.check_ok and x.admitted == r.n for x in runs)
            rows.append([
                f"{r.n:,}", f"tick, {supervisors} supervisor(s)", spread([x.wall for x in runs]),
                f"{rate:,.0f}", f"{rate / raw:.0%}",
                seconds(median_of([x.supervisor_cpu for x in runs])),
                seconds(median_of([x.server_cpu for x in runs])),
                f"{statistics.median(x.lost_race for x in runs):,.0f}",
                "ok" if ok else "FAILED"])
        rows.append([f"{r.n:,}", "raw unnest insert", spread([x.wall for x in r.raws]),
                     f"{raw:,.0f}", "100%", "", seconds(median_of([x.server_cpu for x in r.raws])),
                     "", "ok" if all(x.check_ok for x in r.raws) else "FAILED"])
    return table(["N", "what", "wall s median (min-max)", "rows/s", "vs raw", "sup CPU s",
                  "PG CPU s", "lost_race", "check"], rows)


def split_table(results: Sequence[SizeResult]) -> str:
    """Part 3: where one in-process tick's time goes, and the SQL floor."""
    rows = []
    for r in results:
        s, rp = r.split, r.replay
        raw = r.n / statistics.median(x.wall for x in r.raws)
        read_sql = s.sql_of(READ_SQL)
        admit_sql = sum(v for k, v in s.sql.items() if k not in READ_SQL + SWEEP_SQL)
        python = s.total - sum(s.sql.values())
        rows.append([
            f"{r.n:,}", seconds(s.total), seconds(read_sql),
            seconds(s.phases["read_due"] - read_sql), seconds(s.phases["plan_tick"]),
            seconds(s.phases["admit"] - admit_sql), seconds(admit_sql),
            f"{python / s.total:.0%}", seconds(s.process_cpu), seconds(s.server_cpu),
            seconds(rp.wall), f"{r.n / rp.wall / raw:.0%}", seconds(rp.process_cpu),
            seconds(rp.server_cpu), "ok" if s.check_ok and rp.check_ok else "FAILED",
        ])
    return table(["N", "tick s", "read SQL", "read py", "plan_tick py", "admit py", "admit SQL",
                  "py share", "py CPU s", "PG CPU s", "replay s", "replay vs raw",
                  "replay client CPU s", "replay PG CPU s", "check"], rows)


def statement_table(results: Sequence[SizeResult]) -> str:
    """Part 3, SQL detail: ms per 1000 rows per statement (driver encode/decode included)."""
    names = sorted({k for r in results for k in r.split.sql},
                   key=lambda k: -max(r.split.sql.get(k, 0.0) for r in results))
    rows = [[name, *(f"{r.split.sql.get(name, 0.0) * 1000 / (r.n / 1000):.1f}"
                     f" ({r.split.calls.get(name, 0)})" for r in results)] for name in names]
    return table(["statement", *(f"N={r.n:,}: ms per 1000 rows (calls)" for r in results)], rows)


def idle_table(result: IdleResult) -> str:
    """Part 4."""
    rows = []
    for label, series in (("nothing due", result.empty), (f"{result.due:,} due", result.busy)):
        rows.append([label, f"{statistics.median(series['without']) * 1000:.2f}",
                     f"{statistics.median(series['with']) * 1000:.2f}",
                     f"{result.ratio(series) - 1:+.1%}", str(len(series["with"]))])
    return table(["tick", "without idle ms (median)", f"with {result.idle:,} idle ms (median)",
                  "overhead", "samples each"], rows)


def idle_statement_table(label: str, statements: dict[str, dict[str, list[float]]]) -> str:
    """Part 4, per statement of a tick (medians, ms; timers add a few µs per statement)."""
    names = sorted(statements["with"], key=lambda k: -statistics.median(statements["with"][k]))
    rows = []
    for name in names:
        without = statistics.median(statements["without"].get(name) or [0.0]) * 1000
        with_ = statistics.median(statements["with"][name]) * 1000
        rows.append([name, f"{without:.3f}", f"{with_:.3f}", f"{with_ - without:+.3f}"])
    return table([f"statement ({label})", "without ms", "with ms", "difference ms"], rows)


def print_report(header: list[str], results: Sequence[SizeResult],
                 idle: IdleResult | None) -> None:
    """Everything, on stdout."""
    print("\n".join(header))
    if results:
        print("\n## 1-2. Admission (one tick, all N due) vs raw batched insert\n")
        print(admission_table(results))
        print("\nSeed checks (clones identical to the public-path template but for ids):")
        for r in results:
            print(f"  N={r.n:,}: {r.seed_check}")
        print("Admission checks (tasks == distinct idempotency keys == occurrences == admitted"
              " == N, still_due == 0), per run:")
        for r in results:
            for supervisors, runs in r.runs.items():
                for run in runs:
                    parts = ", ".join(f"{p['actor']}: admitted={p['admitted']} "
                                      f"planned={p['planned']} lost_race={p['lost_race']} "
                                      f"{p['end'] - p['start']:.3f}s" for p in run.per_process)
                    print(f"  N={r.n:,} x{supervisors}: {run.check} [{parts}]")
            print(f"  N={r.n:,} split: {'ok' if r.split.check_ok else 'FAILED'}; replay: "
                  f"{'ok' if r.replay.check_ok else 'FAILED'}")
        print("\n## 3. Split of a 1-supervisor tick (in-process timers) and its SQL replayed\n")
        print(split_table(results))
        print()
        print(statement_table(results))
    if idle is not None:
        print(f"\n## 4. Tick time without / with {idle.idle:,} idle definitions\n")
        print(idle_table(idle))
        print()
        print(idle_statement_table("tick, nothing due", idle.empty_statements))
        print()
        print(idle_statement_table(f"tick, {idle.due:,} due", idle.statements))
        print("\nSeed checks: " + "; ".join(idle.seed_checks))
        print("Due ticks: " + "; ".join(idle.checks))


async def server_header(dsn: str, args: argparse.Namespace) -> list[str]:
    """What the figures were measured on."""
    row = await fetch_one(dsn, "SELECT version() AS v, current_setting('synchronous_commit') AS sc,"
                               " current_setting('shared_buffers') AS sb,"
                               " current_setting('random_page_cost') AS rpc")
    return [
        f"# watchkeeper admission bench, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC",
        f"machine: {os.cpu_count()} cores; Python {sys.version.split()[0]}; "
        f"asyncpg {asyncpg.__version__}",
        f"server: {row['v']}",
        f"synchronous_commit={row['sc']} shared_buffers={row['sb']} "
        f"random_page_cost={row['rpc']}; tick batch_size={args.batch_size}; "
        f"raw batch={RAW_BATCH}; repeats={args.repeats}",
        "supervisor = one spawned OS process running one tick with its own Database.open pool",
    ]


async def bench(server: str, args: argparse.Namespace) -> None:
    """Run every part against ``server`` and print the report."""
    header = await server_header(server, args)
    cpu = await ServerCpu.of(server)
    dbs = Databases(server)
    results = []
    idle = None
    try:
        for n in args.sizes:
            results.append(await measure_size(dbs, n, args.batch_size, args.repeats, cpu))
        if args.idle > 0:
            idle = await measure_idle(dbs, args.idle, args.idle_due, args.days, args.empty_reps,
                                      args.batch_size)
    finally:
        await dbs.drop_all()
    print_report(header, results, idle)


def sizes(text: str) -> list[int]:
    """``1000,10000`` -> ``[1000, 10000]``."""
    return [int(part) for part in text.split(",") if part.strip()]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--sizes", type=sizes, default=[1000, 10000, 100000],
                        help="numbers of due definitions (default 1000,10000,100000)")
    parser.add_argument("--dsn", default=os.environ.get("DATABASE_URL") or None,
                        help="server DSN (default DATABASE_URL, else an embedded server)")
    parser.add_argument("--batch-size", type=int, default=1000, help="tick batch_size")
    parser.add_argument("--repeats", type=int, default=3,
                        help="timed ticks per supervisor count and raw inserts, per N")
    parser.add_argument("--idle", type=int, default=100_000,
                        help="idle definitions for part 4 (0 skips part 4)")
    parser.add_argument("--idle-due", type=int, default=1000, help="due definitions in part 4")
    parser.add_argument("--days", type=int, default=6,
                        help="due ticks per database in part 4, the first a warm-up (max 6)")
    parser.add_argument("--empty-reps", type=int, default=10,
                        help="empty ticks per database per day in part 4")
    args = parser.parse_args(argv)
    if not 2 <= args.days <= 6:
        parser.error("--days must be 2..6 (the idle definitions fall due on day 7)")
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    return args


def main(argv: Sequence[str] | None = None) -> None:
    """Run the bench on the given server or on an embedded one."""
    args = parse_args(argv)
    if args.dsn:
        asyncio.run(bench(args.dsn, args))
        return
    with tempfile.TemporaryDirectory(prefix="wkbench-") as home, \
            embedded_postgres(Path(home)) as dsn:
        asyncio.run(bench(dsn, args))


if __name__ == "__main__":
    main()
