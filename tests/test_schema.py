"""watchkeeper in a database it shares with an application: its own schema (never
public), two schemas side by side, the move of a first-release install out of public,
and configuration errors that say what to do."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
import asyncpg
import pytest
from _helpers import confirmed, owner
from conftest import with_database

from watchkeeper.runtime._errors import ConfigError, DatabaseUnavailable
from watchkeeper.runtime._settings import Settings
from watchkeeper.runtime.engine._agents import AgentCatalog
from watchkeeper.runtime.engine._clock import FakeClock
from watchkeeper.runtime.engine._scheduler import tick
from watchkeeper.runtime.engine._worker import Worker
from watchkeeper.runtime.store import _db, _legacy
from watchkeeper.runtime.store._db import Database, check_schema, migration_lock_key, migrations
from watchkeeper.triggers import format_utc, parse_spec

pytestmark = pytest.mark.anyio


APP_TABLES = """
CREATE TABLE public.users (id serial PRIMARY KEY, email text NOT NULL UNIQUE);
CREATE TABLE public.tasks (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                           user_id integer REFERENCES public.users (id), title text NOT NULL);
CREATE TABLE public.reports (id integer PRIMARY KEY, body jsonb NOT NULL DEFAULT '{}');
INSERT INTO public.users (email) VALUES ('ann@app.example'), ('bob@app.example');
INSERT INTO public.tasks (user_id, title) VALUES (1, 'write the spec'), (2, 'ship it');
INSERT INTO public.reports (id, body) VALUES (7, '{"quarter": 2}');
"""

# Every relation in a schema with its definition: columns and types, constraints,
# indexes; what "untouched" means for the application's tables.
SHAPE = """
SELECT c.relname, c.relkind::text,
       (SELECT array_agg(a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
                         || coalesce(' default ' || pg_get_expr(d.adbin, d.adrelid), '')
                         ORDER BY a.attnum)
        FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
        WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped) AS columns,
       (SELECT array_agg(pg_get_constraintdef(k.oid) ORDER BY k.conname)
        FROM pg_constraint k WHERE k.conrelid = c.oid) AS constraints,
       (SELECT array_agg(pg_get_indexdef(i.indexrelid) ORDER BY i.indexrelid::regclass::text)
        FROM pg_index i WHERE i.indrelid = c.oid) AS indexes
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 ORDER BY c.relname
"""

# Tables and free-standing sequences (not those an identity or serial column owns).
NAMED_RELATIONS = """
SELECT c.relname, c.relkind::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relkind IN ('r', 'S')
  AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_class'::regclass
                  AND d.objid = c.oid AND d.deptype IN ('a', 'i'))
ORDER BY c.relname
"""

APP_ROWS = """
SELECT (SELECT array_agg(u ORDER BY id)::text FROM public.users u) AS users,
       (SELECT array_agg(t ORDER BY id)::text FROM public.tasks t) AS tasks,
       (SELECT array_agg(r ORDER BY id)::text FROM public.reports r) AS reports
"""


@asynccontextmanager
async def connected(dsn: str) -> AsyncIterator[asyncpg.Connection]:
    """A plain connection with the server's default search path, as an application has."""
    conn = await asyncpg.connect(dsn)
    try:
        yield conn
    finally:
        await conn.close()


async def shape(dsn: str, schema: str) -> list[tuple[Any, ...]]:
    async with connected(dsn) as conn:
        return [tuple(r) for r in await conn.fetch(SHAPE, schema)]


async def named(dsn: str, schema: str) -> set[tuple[str, str]]:
    async with connected(dsn) as conn:
        return {(r[0], r[1]) for r in await conn.fetch(NAMED_RELATIONS, schema)}


def hourly(clock: FakeClock) -> dict[str, Any]:
    """An hourly interval trigger whose first slot is the clock's present instant."""
    return {"trigger": {"type": "interval", "every": 3600,
                        "anchor": clock.now().strftime("%Y-%m-%dT%H:%M:%SZ")}}


async def run_due(db: Database, clock: FakeClock, tmp_path: Path, due: int) -> list[Any]:
    """Tick one second on, expect ``due`` admissions, run each to a completed report."""
    clock.advance(1)
    assert (await tick(db, clock)).admitted == due
    worker = Worker(db, clock, AgentCatalog(), worker_id="w", artifact_root=tmp_path)
    outcomes = [await worker.run_once() for _ in range(due)]
    assert [o.status if o else None for o in outcomes] == ["completed"] * due
    return outcomes


async def one_report(db: Database, clock: FakeClock, tmp_path: Path, **kw: Any) -> Any:
    """Propose and confirm an hourly definition anchored now, tick one second past its
    first slot and run the worker once: a completed task with its report."""
    await confirmed(db, clock, hourly(clock), **kw)
    return (await run_due(db, clock, tmp_path, 1))[0]


async def first_release_report(db: Database, clock: FakeClock) -> int:
    """:func:`one_report` on a first-release install (0001-0003), whose tables lack later
    migrations' columns that the current code writes: the definition, its first
    occurrence and task are written in SQL as the first release's propose, confirm and
    tick wrote them (a revision without the compiled spec a later migration adds), then
    claimed, run and reported in SQL as its worker wrote them. Returns the task id."""
    spec = parse_spec({"version": 1, **hourly(clock)})
    anchor = clock.now()
    clock.advance(1)
    now = clock.now()
    await db.pool.execute(
        "INSERT INTO tenants VALUES ('acme', $1); INSERT INTO users (tenant_id, user_id, "
        "created_at) VALUES ('acme', 'alice', $1)".replace("$1", f"'{now.isoformat()}'"))
    await db.pool.execute(
        "INSERT INTO definitions (tenant_id, definition_id, origin, owner_user_id, status, fence,"
        " latest_revision, effective_revision, effective_since, cursor_at, slots_seen,"
        " next_due_at, created_at, updated_at) VALUES ('acme', 'd1', 'user', 'alice', 'active',"
        " 1, 1, 1, $1, $2, 1, $3, $1, $1)", now, anchor, anchor + timedelta(hours=1))
    await db.pool.execute(
        "INSERT INTO definition_revisions (tenant_id, definition_id, revision, spec, spec_hash,"
        " status, proposed_by, proposed_at, confirmed_by, confirmed_at) VALUES ('acme', 'd1',"
        " 1, $1, $2, 'confirmed', 'agent:test', $3, 'user:acme/alice', $3)",
        spec.to_json(), spec.spec_hash, now)
    slot = format_utc(anchor)
    await db.pool.execute(
        "INSERT INTO occurrences (tenant_id, definition_id, binding_id, slot, kind,"
        " definition_tenant_id, revision, scheduled_for, not_before, expires_at, zone,"
        " local_wall, tzdata_version, decision, reason, decided_at, decided_by) VALUES ('acme',"
        " 'd1', 'owner', $1, 'scheduled', 'acme', 1, $2, $2, $3, 'UTC', $4, 'x', 'admitted',"
        " 'due within grace', $5, 'tick')", slot, anchor, anchor + timedelta(minutes=10),
        anchor.replace(tzinfo=None), now)
    params = {"schedule": {"definition_id": "d1", "revision": 1, "slot": slot,
                           "kind": "scheduled", "scheduled_for": slot}}
    task_id = await db.pool.fetchval(
        "INSERT INTO tasks (tenant_id, definition_tenant_id, definition_id, binding_id, slot,"
        " kind, revision, owner_user_id, agent, params, status, late_policy, scheduled_for,"
        " not_before, expires_at, deadline_seconds, max_attempts, admitted_at, lease_token,"
        " attempts, started_at, finished_at) VALUES ('acme', 'acme', 'd1', 'owner', $1,"
        " 'scheduled', 1, 'alice', 'digest', $2, 'completed', 'skip_expired', $3, $3, $4, 600,"
        " 3, $5, nextval('lease_tokens'), 1, $5, $5) RETURNING task_id",
        slot, params, anchor, anchor + timedelta(minutes=10), now)
    run_id = await db.pool.fetchval(
        "INSERT INTO runs (tenant_id, task_id, attempt, lease_token, worker, started_at, "
        "finished_at, outcome) SELECT tenant_id, task_id, 1, lease_token, 'w', $1, $1, "
        "'succeeded' FROM tasks WHERE task_id = $2 RETURNING run_id", now, task_id)
    await db.pool.execute(
        "INSERT INTO reports (tenant_id, task_id, run_id, content_md, importance, "
        "content_sha256, output_ref, verified, verification, finished_at, committed_at) "
        "VALUES ('acme', $1, $2, '# r', 'normal', 'x', 'report:acme/1', true, 'ok', $3, $3)",
        task_id, run_id, now)
    return int(task_id)


def ours() -> set[tuple[str, str]]:
    """Every relation migrations 0001-0003 create by name, with schema_migrations (later
    migrations may add more)."""
    return {o for objects in _legacy.OBJECTS.values() for o in objects} | {
        ("schema_migrations", "r")}


# ------------------------------------------------------------------ the schema name


@pytest.mark.parametrize("name", ["watchkeeper", "wk_prod", "_a1", "a" * 63])
def test_plain_identifiers_are_accepted(name: str) -> None:
    """Lowercase letters, digits and underscores, not starting with a digit, up to 63."""
    assert check_schema(name) == name


@pytest.mark.parametrize(("name", "problem"), [
    ("public", "belongs to the application"),
    ("pg_toast", "reserved"), ("pg_wk", "reserved"), ("information_schema", "reserved"),
    ("Watchkeeper", "not a plain identifier"), ("wk-prod", "not a plain identifier"),
    ('wk"; DROP', "not a plain identifier"), ("1wk", "not a plain identifier"),
    ("", "not a plain identifier"), ("a" * 64, "not a plain identifier"),
])
def test_unfit_schema_names_are_refused_with_the_fix(name: str, problem: str) -> None:
    """public, system schemas and anything but a plain identifier are refused, naming the fix."""
    with pytest.raises(ConfigError) as raised:
        check_schema(name)
    assert problem in str(raised.value)
    assert "Fix: set WATCHKEEPER_SCHEMA" in str(raised.value)


def test_settings_read_watchkeeper_schema(monkeypatch: pytest.MonkeyPatch) -> None:
    """WATCHKEEPER_SCHEMA sets Settings.schema (default watchkeeper); public is invalid."""
    monkeypatch.delenv("WATCHKEEPER_SCHEMA", raising=False)
    monkeypatch.setenv("SCHEMA", "unrelated")
    assert Settings().schema == "watchkeeper"
    monkeypatch.setenv("WATCHKEEPER_SCHEMA", "wk_b")
    assert Settings().schema == "wk_b"
    monkeypatch.setenv("WATCHKEEPER_SCHEMA", "public")
    with pytest.raises(ValueError, match="belongs to the application"):
        Settings()


def test_migration_lock_keys_differ_per_schema() -> None:
    """Each schema's migrations take their own 64-bit advisory key, none the first release's."""
    keys = {migration_lock_key(s) for s in ("watchkeeper", "a", "b")}
    assert len(keys) == 3
    assert all(-(2**63) <= k < 2**63 for k in keys)
    assert _legacy.LEGACY_MIGRATION_LOCK not in keys


# ------------------------------------------------------------- sharing with an app


async def test_an_apps_tables_of_the_same_names_are_untouched(
        fresh_dsn: str, clock: FakeClock, tmp_path: Path) -> None:
    """An app's own public.users, tasks and reports keep their rows and definitions while
    watchkeeper migrates and runs a definition to a report, all in schema watchkeeper."""
    async with connected(fresh_dsn) as conn:
        await conn.execute(APP_TABLES)
        rows_before = tuple(await conn.fetchrow(APP_ROWS))
    public_before = await shape(fresh_dsn, "public")

    async with Database.open(fresh_dsn) as db:
        assert db.schema == "watchkeeper"
        outcome = await one_report(db, clock, tmp_path)
        searched = await db.pool.fetchval("SELECT current_setting('search_path')")

    assert searched == '"watchkeeper"'
    assert await shape(fresh_dsn, "public") == public_before
    async with connected(fresh_dsn) as conn:
        assert tuple(await conn.fetchrow(APP_ROWS)) == rows_before
        assert rows_before == ('{"(1,ann@app.example)","(2,bob@app.example)"}',
                               '{"(1,1,\\"write the spec\\")","(2,2,\\"ship it\\")"}',
                               '{"(7,\\"{\\"\\"quarter\\"\\": 2}\\")"}')
        mine = await conn.fetchrow(
            "SELECT (SELECT array_agg(user_id) FROM watchkeeper.users) AS users, "
            "(SELECT array_agg(task_id) FROM watchkeeper.tasks WHERE status = 'completed') AS tasks, "
            "(SELECT array_agg(task_id) FROM watchkeeper.reports WHERE verified) AS reports")
    assert tuple(mine) == (["alice"], [outcome.task_id], [outcome.task_id])
    assert await named(fresh_dsn, "watchkeeper") >= ours()


async def test_two_schemas_in_one_database_are_independent(
        fresh_dsn: str, clock: FakeClock, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """WATCHKEEPER_SCHEMA=a and =b: b migrates while a's migration lock is held; a's
    definitions, tasks and fencing tokens are invisible to b and the other way round."""
    monkeypatch.setenv("WATCHKEEPER_SCHEMA", "a")
    schema_a = Settings().schema
    monkeypatch.setenv("WATCHKEEPER_SCHEMA", "b")
    schema_b = Settings().schema
    async with connected(fresh_dsn) as holder:
        await holder.execute("SELECT pg_advisory_lock($1)", migration_lock_key(schema_a))
        with anyio.fail_after(30):  # b does not wait for a's lock
            async with Database.open(fresh_dsn, schema=schema_b):
                pass
        await holder.execute("SELECT pg_advisory_unlock($1)", migration_lock_key(schema_a))

    async with Database.open(fresh_dsn, schema=schema_a) as a, \
            Database.open(fresh_dsn, schema=schema_b) as b:
        first = await one_report(a, clock, tmp_path)
        assert (await tick(b, clock)).admitted == 0
        assert await b.pool.fetchval("SELECT count(*) FROM definitions") == 0
        second = await one_report(b, clock, tmp_path, definition_id="d2")
        tokens = [await x.pool.fetchval("SELECT array_agg(lease_token) FROM runs") for x in (a, b)]
        defs = [await x.pool.fetchval("SELECT array_agg(definition_id) FROM definitions")
                for x in (a, b)]
    assert (first.task_id, second.task_id) == (1, 1)  # each schema its own identity
    assert tokens == [[1], [1]]  # and its own lease_tokens sequence
    assert defs == [["d1"], ["d2"]]
    assert await named(fresh_dsn, "a") == await named(fresh_dsn, "b") >= ours()
    assert await named(fresh_dsn, "public") == set()


# ------------------------------------------------ an install of the first release


async def first_release_install(dsn: str, upto: int) -> None:
    """Apply migrations 0001..upto to public exactly as the first release did: the
    default search path, its bookkeeping table, one transaction per file."""
    async with connected(dsn) as conn:
        await conn.execute("SELECT pg_advisory_lock($1)", _legacy.LEGACY_MIGRATION_LOCK)
        await conn.execute(_db.QUERIES["migrations_table"])
        done = {r[0] for r in await conn.fetch(_db.QUERIES["migrations_applied"])}
        for migration in migrations():
            if migration.version not in done and migration.version <= upto:
                async with conn.transaction():
                    await conn.execute(migration.sql)
                    await conn.execute(_db.QUERIES["migration_record"], migration.version,
                                       migration.name, migration.sha256)


@asynccontextmanager
async def first_release_db(dsn: str) -> AsyncIterator[Database]:
    """The store as the first release opened it: search path public, no checks."""
    pool = await asyncpg.create_pool(dsn, min_size=1, max_size=4, init=_db._prepare_connection,
                                     server_settings={"search_path": "public"})
    try:
        yield Database(pool, schema="public")
    finally:
        await pool.close()


@pytest.mark.parametrize("upto", [1, 3])
async def test_a_first_release_install_in_public_is_moved(
        fresh_dsn: str, clock: FakeClock, tmp_path: Path, upto: int) -> None:
    """An install migrated into public (0001 only, or 0001-0003) with rows is moved whole
    into schema watchkeeper: rows, task ids and fencing tokens carry on; the missing
    migrations are applied there; public keeps only the app's table."""
    await first_release_install(fresh_dsn, upto)
    async with connected(fresh_dsn) as conn:
        await conn.execute("CREATE TABLE public.orders (id integer PRIMARY KEY, item text);"
                           "INSERT INTO public.orders VALUES (1, 'tea')")
    expected = {o for v in range(1, upto + 1) for o in _legacy.OBJECTS[v]} | {
        ("schema_migrations", "r")}
    assert await named(fresh_dsn, "public") == expected | {("orders", "r")}
    async with first_release_db(fresh_dsn) as old:
        if upto == 3:
            before = await first_release_report(old, clock)
            assert (before, await old.pool.fetchval("SELECT lease_token FROM runs")) == (1, 1)
        else:  # the current queries need 0003's columns: seed the tables 0001 made
            await old.pool.execute(
                "INSERT INTO tenants VALUES ('acme', $1); INSERT INTO users (tenant_id, user_id, "
                "created_at) VALUES ('acme', 'alice', $1)".replace("$1", "'2026-05-01Z'"))
            await old.pool.fetchval("SELECT setval('lease_tokens', 1)")

    async with Database.open(fresh_dsn) as db:
        applied = await db.pool.fetch("SELECT version FROM schema_migrations ORDER BY version")
        me = await owner(db, clock, user="bea")
        clock.advance(3600)  # with 0003: the moved d1's second slot is due, beside d9's first
        await confirmed(db, clock, hourly(clock), definition_id="d9", principal=me)
        after = await run_due(db, clock, tmp_path, 2 if upto == 3 else 1)
        slots = await db.pool.fetch("SELECT definition_id, task_id FROM tasks ORDER BY task_id")
        run_tokens = await db.pool.fetchval("SELECT array_agg(lease_token ORDER BY run_id) FROM runs")
        users = await db.pool.fetchval("SELECT array_agg(user_id ORDER BY user_id) FROM users")

    assert [r["version"] for r in applied] == [m.version for m in migrations()]
    assert users == ["alice", "bea"]
    assert [o.task_id for o in after] == ([2, 3] if upto == 3 else [1])
    assert [tuple(r) for r in slots] == (
        [("d1", 1), ("d1", 2), ("d9", 3)] if upto == 3 else [("d9", 1)])
    assert run_tokens == ([1, 2, 3] if upto == 3 else [2])  # the sequence kept its position
    assert await named(fresh_dsn, "public") == {("orders", "r")}
    assert [r[0] for r in await shape(fresh_dsn, "public")] == ["orders", "orders_pkey"]
    assert await named(fresh_dsn, "watchkeeper") >= ours()
    async with connected(fresh_dsn) as conn:
        assert await conn.fetchval("SELECT item FROM public.orders") == "tea"
        assert await conn.fetchval(  # no row type, function or sequence of ours left behind
            "SELECT count(*) FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace "
            "WHERE n.nspname = 'public' AND t.typname NOT IN ('orders', '_orders')") == 0


async def test_the_shipped_first_migrations_create_exactly_the_listed_objects(
        fresh_dsn: str) -> None:
    """_legacy.OBJECTS is what 0001-0003 create in public, migration by migration."""
    seen: set[tuple[str, str]] = {("schema_migrations", "r")}
    for version in sorted(_legacy.OBJECTS):
        await first_release_install(fresh_dsn, version)
        now = await named(fresh_dsn, "public")
        assert now - seen == set(_legacy.OBJECTS[version]), version
        seen = now


async def test_public_is_left_alone_when_the_schema_has_its_own_install(
        fresh_dsn: str, clock: FakeClock, tmp_path: Path) -> None:
    """With schema a already migrated, a first-release install in public stays where it
    is; opening schema b then moves it into b, once."""
    async with Database.open(fresh_dsn, schema="a"):
        pass
    await first_release_install(fresh_dsn, 3)
    async with first_release_db(fresh_dsn) as old:
        await first_release_report(old, clock)

    async with Database.open(fresh_dsn, schema="a") as a:
        assert await a.pool.fetchval("SELECT count(*) FROM reports") == 0
    assert await named(fresh_dsn, "public") == ours()
    async with Database.open(fresh_dsn, schema="b") as b:
        assert await b.pool.fetchval("SELECT count(*) FROM reports") == 1
    async with Database.open(fresh_dsn, schema="c") as c:
        assert await c.pool.fetchval("SELECT count(*) FROM reports") == 0
    assert await named(fresh_dsn, "public") == set()


async def test_two_schemas_racing_for_one_install_move_it_once(
        fresh_dsn: str, clock: FakeClock, tmp_path: Path) -> None:
    """Schemas a and b opened at once over a first-release install: exactly one gets its
    report, the other starts empty, and public is left with nothing of ours."""
    await first_release_install(fresh_dsn, 3)
    async with first_release_db(fresh_dsn) as old:
        await first_release_report(old, clock)
    counts: dict[str, int] = {}

    async def open_and_count(schema: str) -> None:
        async with Database.open(fresh_dsn, schema=schema) as db:
            counts[schema] = await db.pool.fetchval("SELECT count(*) FROM reports")

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            tg.start_soon(open_and_count, "a")
            tg.start_soon(open_and_count, "b")
    assert sorted(counts.values()) == [0, 1]
    assert await named(fresh_dsn, "public") == set()


async def test_another_tools_schema_migrations_in_public_is_not_ours(fresh_dsn: str) -> None:
    """A Rails-style public.schema_migrations (one varchar column) is neither moved nor
    changed; watchkeeper starts empty in its schema."""
    async with connected(fresh_dsn) as conn:
        await conn.execute("CREATE TABLE public.schema_migrations (version varchar PRIMARY KEY);"
                           "INSERT INTO public.schema_migrations VALUES ('20240101000000')")
    before = await shape(fresh_dsn, "public")
    async with Database.open(fresh_dsn) as db:
        assert await db.pool.fetchval("SELECT count(*) FROM schema_migrations") == len(migrations())
    assert await shape(fresh_dsn, "public") == before
    async with connected(fresh_dsn) as conn:
        assert await conn.fetchval("SELECT version FROM public.schema_migrations") == "20240101000000"


async def test_an_incomplete_first_release_install_is_refused_and_not_moved(
        fresh_dsn: str) -> None:
    """A public install missing one of its tables is refused with the fix; nothing moves."""
    await first_release_install(fresh_dsn, 3)
    async with connected(fresh_dsn) as conn:
        await conn.execute("DROP TABLE public.supervisors")
    with pytest.raises(ConfigError) as raised:
        async with Database.open(fresh_dsn):
            pass
    assert "public lacks supervisors; nothing was moved. Fix:" in str(raised.value)
    assert await named(fresh_dsn, "public") == ours() - {("supervisors", "r")}
    assert await named(fresh_dsn, "watchkeeper") == set()


async def test_a_changed_first_release_migration_is_refused(fresh_dsn: str) -> None:
    """public.schema_migrations whose 0002 hash is not the shipped file's: refused, not moved."""
    await first_release_install(fresh_dsn, 2)
    async with connected(fresh_dsn) as conn:
        await conn.execute("UPDATE public.schema_migrations SET sha256 = 'x' WHERE version = 2")
    with pytest.raises(ConfigError, match="0002_outbox, which is not one of the first release"):
        async with Database.open(fresh_dsn):
            pass
    assert ("tenants", "r") in await named(fresh_dsn, "public")


# ------------------------------------------------------------- configuration errors


@pytest.mark.parametrize("dsn", ["notaurl", "mysql://u@h/d",
                                 "postgresql://postgres@127.0.0.1:port/postgres"])
async def test_an_unparsable_dsn_is_a_config_error(dsn: str) -> None:
    """A DATABASE_URL asyncpg cannot parse is ConfigError with the URL's shape, not "unreachable"."""
    with pytest.raises(ConfigError) as raised:
        async with Database.open(dsn):
            pass
    assert "DATABASE_URL is not a usable PostgreSQL URL" in str(raised.value)
    assert "Fix: set it to postgresql://USER[:PASSWORD]@HOST[:PORT]/DATABASE." in str(raised.value)


async def test_a_missing_database_is_a_config_error_saying_createdb(server_dsn: str) -> None:
    """A database that does not exist: ConfigError naming it and `createdb <name>`."""
    name = f"wk_missing_{uuid.uuid4().hex[:8]}"
    with pytest.raises(ConfigError) as raised:
        async with Database.open(with_database(server_dsn, name)):
            pass
    assert str(raised.value) == (
        f'database "{name}" does not exist. Fix: create it with `createdb {name}` or point '
        "DATABASE_URL at an existing database.")


async def test_a_refused_login_is_a_config_error(server_dsn: str) -> None:
    """A role the server does not know: ConfigError naming the user/password fix."""
    parts = server_dsn.split("://", 1)
    host = parts[1].split("@", 1)[-1]
    with pytest.raises(ConfigError) as raised:
        async with Database.open(f"{parts[0]}://wk_nobody_{uuid.uuid4().hex[:8]}@{host}"):
            pass
    assert "PostgreSQL refused the login: role" in str(raised.value)
    assert "Fix: check the user and password in DATABASE_URL" in str(raised.value)


async def test_an_unreachable_server_is_database_unavailable() -> None:
    """Nothing listening on the port: DatabaseUnavailable (retryable), not ConfigError."""
    with pytest.raises(DatabaseUnavailable) as raised:
        async with Database.open("postgresql://postgres@127.0.0.1:1/postgres"):
            pass
    assert raised.value.retryable is True
    assert "ConnectionRefusedError" in str(raised.value)


async def test_an_unfit_schema_is_refused_before_connecting() -> None:
    """schema='public' is ConfigError even with an unreachable server: nothing is tried."""
    with pytest.raises(ConfigError, match="belongs to the application"):
        async with Database.open("postgresql://postgres@127.0.0.1:1/postgres", schema="public"):
            pass


async def test_a_dropped_search_path_is_refused(fresh_dsn: str) -> None:
    """A connection whose search path is not the schema (a pooler dropped the startup
    parameter) is refused on arrival, naming PgBouncer's setting."""
    async with connected(fresh_dsn) as conn:
        with pytest.raises(ConfigError) as raised:
            await _db._init_connection(conn, "watchkeeper")
    assert str(raised.value).startswith(
        "the connection's search_path is '\"$user\", public', not '\"watchkeeper\"'")
    assert "track_extra_parameters = search_path" in str(raised.value)


async def test_a_role_that_may_not_create_the_schema_gets_the_grant_to_run(
        fresh_dsn: str) -> None:
    """A login role without CREATE on the database: ConfigError with the CREATE SCHEMA
    ... AUTHORIZATION fix; after the owner runs it, the same role migrates and runs."""
    role = f"wk_role_{uuid.uuid4().hex[:8]}"
    database = urlsplit(fresh_dsn).path.lstrip("/")
    as_role = fresh_dsn.replace("://postgres@", f"://{role}@", 1)
    assert as_role != fresh_dsn, "this test needs DATABASE_URL's user to be postgres"
    async with connected(fresh_dsn) as admin:
        await admin.execute(f'CREATE ROLE "{role}" LOGIN')
        try:
            with pytest.raises(ConfigError) as raised:
                async with Database.open(as_role):
                    pass
            assert str(raised.value).startswith(
                f'role "{role}" may not create schema "watchkeeper" in database "{database}" '
                "(permission denied for database")
            fix = f'CREATE SCHEMA "watchkeeper" AUTHORIZATION "{role}"'
            assert f"Fix: as the database owner run {fix}" in str(raised.value)
            await admin.execute(fix)
            async with Database.open(as_role) as db:
                assert await db.pool.fetchval("SELECT count(*) FROM schema_migrations") == len(
                    migrations())
        finally:
            await admin.execute(f'DROP OWNED BY "{role}"')
            await admin.execute(f'DROP ROLE "{role}"')


async def test_the_migration_bookkeeping_lives_in_the_schema(db: Database) -> None:
    """The template's migrations are recorded in watchkeeper.schema_migrations, not public."""
    rows = await db.pool.fetch(
        "SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE c.relname = 'schema_migrations'")
    assert [r[0] for r in rows] == ["watchkeeper"]
    recorded = await db.pool.fetch(
        "SELECT version FROM watchkeeper.schema_migrations ORDER BY version")
    assert [r[0] for r in recorded] == [m.version for m in migrations()]

