"""watchkeeper behind PgBouncer in transaction-pooling mode (Debian's ``pgbouncer``).

Each test starts its own PgBouncer (``start_pgbouncer``): ``pool_mode = transaction`` and
a ``default_pool_size`` of 1 or 2 server sessions, so the many client connections of a
:class:`Database` really share them transaction by transaction. What the tests assert
is read back over a direct connection to the same database, never through PgBouncer.

The traps of transaction pooling, each met here: named prepared statements (the
statement cache is off behind a pooler), session state (``search_path`` set by every
transaction for itself; PgBouncer 1.18 refuses it as a startup parameter), the
admission staging tables (temporary: made and dropped by each transaction), session advisory locks
(migrations and replays hold transaction-scoped ones), and settling a lost COMMIT by a
server session the pooler may have handed on. There is no LISTEN anywhere.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, urlsplit

import anyio
import asyncpg
import pytest
from _helpers import TEST_KEYRING, confirmed, owner, utc
from _pgproxy import Fault, PgProxy, Upstream

from watchkeeper.outbox import Receiver, serve
from watchkeeper.runtime import CommitOutcomeUnknown, ConfigError
from watchkeeper.runtime.engine._clock import FakeClock
from watchkeeper.runtime.engine._supervisor import Supervisor, SupervisorConfig
from watchkeeper.runtime.store._db import QUERIES, Database, Pooler, migrations, server_settings
from watchkeeper.runtime.usecases import add_endpoint, load_replay_definitions, prune_replays, replay
from watchkeeper.sources import SeriesSource
from watchkeeper.triggers._spec import DEFAULT_MIN_INTERVAL

pytestmark = pytest.mark.anyio

INSTALL = ("pgbouncer is not installed, and these tests need it (never skipped). Fix: "
           "apt-get install pgbouncer (Debian/Ubuntu; .ci/run does it), or put a "
           "pgbouncer binary (1.18 or newer) on PATH.")
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
READY_SECONDS = 10.0  # how long a starting PgBouncer may take to say "process up"

StartPgBouncer = Callable[..., Awaitable[str]]


class PgBouncer:
    """One PgBouncer process in front of the server of ``upstream_dsn`` (TCP, or the
    embedded server's unix socket), its log read by a thread (so its stderr pipe never
    fills) that says when it is up."""

    def __init__(self, upstream_dsn: str, folder: Path, *, pool_mode: str,
                 pool_size: int) -> None:
        binary = shutil.which("pgbouncer", path=f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin")
        if binary is None:
            pytest.fail(INSTALL, pytrace=False)
        parts, upstream = urlsplit(upstream_dsn), Upstream.from_dsn(upstream_dsn)
        socket_dir = None if upstream.path is None else str(Path(upstream.path).parent)
        self.user = unquote(parts.username or "postgres")
        password = unquote(parts.password or "")
        self.port = _free_port()
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "userlist.txt").write_text(f'"{self.user}" "{password}"\n')
        (folder / "pgbouncer.ini").write_text(
            "[databases]\n"
            f"* = host={socket_dir or upstream.host} port={upstream.port}\n"
            "[pgbouncer]\n"
            "listen_addr = 127.0.0.1\n"
            f"listen_port = {self.port}\n"
            "unix_socket_dir =\n"
            "auth_type = trust\n"
            f"auth_file = {folder / 'userlist.txt'}\n"
            f"pool_mode = {pool_mode}\n"
            f"default_pool_size = {pool_size}\n"
            "max_client_conn = 500\n"
            "log_connections = 0\n"
            "log_disconnections = 0\n")
        command = [binary, str(folder / "pgbouncer.ini")]
        if os.geteuid() == 0:  # "PgBouncer should not run as root": it switches user itself
            command[1:1] = ["-u", _unprivileged_user(socket_dir)]
        self.log: list[str] = []
        self._up = threading.Event()
        self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                        text=True)
        self._reader = threading.Thread(target=self._read_log, daemon=True)
        self._reader.start()

    def _read_log(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.log.append(line.rstrip())
            if "process up" in line:
                self._up.set()
        self._up.set()  # it exited: wait_up reports why

    def wait_up(self) -> None:
        """Return once PgBouncer logged "process up"; fail with its log otherwise."""
        up = self._up.wait(READY_SECONDS)
        if not up or self.process.poll() is not None:
            self.stop()
            pytest.fail("pgbouncer did not start:\n" + "\n".join(self.log), pytrace=False)

    def dsn(self, database: str) -> str:
        """A DSN of ``database`` through this PgBouncer."""
        return f"postgresql://{quote(self.user)}@127.0.0.1:{self.port}/{quote(database)}"

    def stop(self) -> None:
        """SIGTERM (immediate shutdown), then wait for it and its log."""
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)
        self._reader.join(10)
        if self.process.stderr is not None:
            self.process.stderr.close()


def _free_port() -> int:
    with socket.create_server(("127.0.0.1", 0)) as probe:
        return int(probe.getsockname()[1])


def _unprivileged_user(socket_dir: str | None) -> str:
    """Who PgBouncer runs as under root: the owner of the server's socket directory (the
    embedded server's is only theirs), else postgres, else nobody."""
    owner = None if socket_dir is None else Path(socket_dir).stat().st_uid
    if owner:
        return pwd.getpwuid(owner).pw_name
    for name in ("postgres", "nobody"):
        try:
            pwd.getpwnam(name)
        except KeyError:
            continue
        return name
    pytest.fail("running as root, and neither a postgres nor a nobody user exists for "
                "pgbouncer -u", pytrace=False)


def _database(dsn: str) -> str:
    return unquote(urlsplit(dsn).path.lstrip("/"))


@pytest.fixture
def start_pgbouncer(server_dsn: str, tmp_path: Path) -> Iterator[StartPgBouncer]:
    """``await start(dsn, pool_mode=..., pool_size=...)``: a PgBouncer in front of the
    server, up; returns ``dsn``'s database through it. Stopped after the test."""
    running: list[PgBouncer] = []

    async def start(dsn: str, *, pool_mode: str = "transaction", pool_size: int = 2) -> str:
        bouncer = PgBouncer(server_dsn, tmp_path / f"pgbouncer{len(running)}",
                            pool_mode=pool_mode, pool_size=pool_size)
        running.append(bouncer)
        await anyio.to_thread.run_sync(bouncer.wait_up)
        return bouncer.dsn(_database(dsn))

    yield start
    for bouncer in running:
        bouncer.stop()


@asynccontextmanager
async def direct(dsn: str, schema: str = "watchkeeper") -> AsyncIterator[asyncpg.Connection]:
    """A connection straight to PostgreSQL (not through PgBouncer) in ``schema``."""
    conn = await asyncpg.connect(dsn, server_settings=server_settings(schema))
    try:
        yield conn
    finally:
        await conn.close()


async def test_a_supervisor_through_pgbouncer_migrates_admits_runs_and_delivers(
        fresh_dsn: str, start_pgbouncer: StartPgBouncer, tmp_path: Path) -> None:
    """Through a transaction-pooling PgBouncer with 2 server sessions for a pool of 10:
    the empty database is migrated; a supervisor admits 2 slots of 3 definitions (one
    task per occurrence), runs each, commits its report and delivers each notice to a
    live webhook receiver; no named prepared statement is left on a server session."""
    through = await start_pgbouncer(fresh_dsn, pool_size=2)
    clock = FakeClock(utc("2026-06-01T00:00:30Z"))
    receiver = Receiver((), now=clock.now)
    spec = {"trigger": {"type": "interval", "every": 60},
            "delivery": [{"channel": "webhook", "destination": "ops"}]}
    async with serve(receiver) as url, Database.open(through, max_size=10,
                                                     keyring=TEST_KEYRING) as db:
        assert db.pooler is Pooler.TRANSACTION
        me = await owner(db, clock)
        receiver.secrets = (await add_endpoint(db, clock, "acme", "ops", url),)
        for name in ("d1", "d2", "d3"):
            await confirmed(db, clock, spec, definition_id=name, principal=me)
        supervisor = Supervisor(db, clock, SupervisorConfig(
            home=tmp_path, skew_budget=None, supervisor_id="sup-pgb"))
        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                await tg.start(supervisor.run)
                await supervisor.wait_idle()
                for _ in range(2):
                    clock.advance(30)
                    await supervisor.wait_idle()
                    clock.advance(30)
                    await supervisor.wait_idle()
                supervisor.stop()
        async with db.connection() as conn, conn.transaction():
            left = await conn.raw.fetchval("SELECT count(*) FROM pg_prepared_statements")
    stats = supervisor.statistics()
    assert (stats.admitted, stats.completed, stats.deliveries) == (6, 6, 6)
    assert stats.wake == ("polling every 1 s: LISTEN is not available behind a transaction "
                          "pooler (a session's LISTEN ends with its transaction there)")
    async with direct(fresh_dsn) as conn:
        applied = await conn.fetch("SELECT version FROM schema_migrations ORDER BY version")
        rows = await conn.fetch(
            "SELECT o.definition_id, o.slot, o.decision, count(t.task_id) AS tasks, "
            "min(t.status) AS status, count(r.task_id) AS reports, "
            "count(d.delivery_id) FILTER (WHERE d.status = 'delivered') AS delivered "
            "FROM occurrences o "
            "LEFT JOIN tasks t USING (tenant_id, definition_id, binding_id, slot, kind) "
            "LEFT JOIN reports r ON r.tenant_id = t.tenant_id AND r.task_id = t.task_id "
            "LEFT JOIN deliveries d ON d.tenant_id = t.tenant_id AND d.task_id = t.task_id "
            "GROUP BY 1, 2, 3 ORDER BY 1, 2")
    assert [r["version"] for r in applied] == [m.version for m in migrations()]
    slots = ["2026-06-01T00:01:00Z", "2026-06-01T00:02:00Z"]
    assert [tuple(r) for r in rows] == [(d, slot, "admitted", 1, "completed", 1, 1)
                                        for d in ("d1", "d2", "d3") for slot in slots]
    bodies = [r.payload for r in receiver.seen.values()]
    assert (receiver.processed, receiver.rejected) == (6, 0)
    assert sorted((b["data"]["definition_id"], b["data"]["slot"]) for b in bodies if b) == [
        (d, slot) for d in ("d1", "d2", "d3") for slot in slots]
    assert left == 0


async def test_two_schemas_sharing_one_server_session_each_keep_their_own(
        db_dsn: str, start_pgbouncer: StartPgBouncer) -> None:
    """WATCHKEEPER_SCHEMA=wk_a and =wk_b through a PgBouncer with one server session:
    both migrate and write in turn on that same session, each time just after another
    client left a session-level SET search_path TO public on it, and each finds only
    its own rows; public and the template's watchkeeper schema get nothing."""
    through = await start_pgbouncer(db_dsn, pool_size=1)
    clock = FakeClock(datetime(2026, 6, 1, tzinfo=UTC))
    spec = {"trigger": {"type": "interval", "every": 3600}}
    stray = await asyncpg.connect(through, statement_cache_size=0)
    try:
        async with Database.open(through, schema="wk_a") as a, \
                Database.open(through, schema="wk_b") as b:
            pids = set()
            for db in (a, b, a):
                async with db.transaction() as tx:
                    pids.add(await tx.raw.fetchval("SELECT pg_backend_pid()"))
            await stray.execute("SET search_path TO public")
            leaked = await stray.fetchval("SHOW search_path")  # in a transaction of its own
            alice = await owner(a, clock, user="alice")
            await stray.execute("SET search_path TO public")
            bea = await owner(b, clock, user="bea")
            for n in range(3):
                await stray.execute("SET search_path TO public")
                await confirmed(a, clock, spec, definition_id=f"a{n}", principal=alice)
                await stray.execute("SET search_path TO public")
                await confirmed(b, clock, spec, definition_id=f"b{n}", principal=bea)
            open_in = []
            for db in (a, b):
                await stray.execute("SET search_path TO public")
                open_in.append((await db.fetchval("definition_is_open", "acme", "a0"),
                                await db.fetchval("definition_is_open", "acme", "b0")))
    finally:
        await stray.close()
    assert len(pids) == 1  # one server session served every transaction
    assert leaked == "public"  # a session SET does outlive its transaction there
    assert open_in == [(True, None), (None, True)]
    async with direct(db_dsn) as conn:
        found = {schema: [tuple(r) for r in await conn.fetch(
                    f'SELECT definition_id, owner_user_id FROM "{schema}".definitions '
                    "ORDER BY 1")] for schema in ("wk_a", "wk_b", "watchkeeper")}
        public = await conn.fetchval(
            "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = 'public'")
    assert found == {"wk_a": [("a0", "alice"), ("a1", "alice"), ("a2", "alice")],
                     "wk_b": [("b0", "bea"), ("b1", "bea"), ("b2", "bea")],
                     "watchkeeper": []}
    assert public == 0


async def test_concurrent_migrations_through_pgbouncer_apply_once(
        fresh_dsn: str, start_pgbouncer: StartPgBouncer) -> None:
    """Two processes' migrators racing on one empty schema through PgBouncer with one
    server session (where a session lock taken by one would be held by the other too):
    the transaction-scoped lock lets one apply every migration and the other none."""
    through = await start_pgbouncer(fresh_dsn, pool_size=1)
    results: list[list[int]] = []
    async with Database.open(through, migrate=False) as one, \
            Database.open(through, migrate=False) as two:

        async def migrate(db: Database) -> None:
            results.append(await db.migrate())

        async with anyio.create_task_group() as tg:
            tg.start_soon(migrate, one)
            tg.start_soon(migrate, two)
    assert sorted(results, key=len) == [[], [m.version for m in migrations()]]


async def test_a_lost_commit_through_pgbouncer_ends_only_its_own_transaction(
        db: Database, db_dsn: str, start_pgbouncer: StartPgBouncer) -> None:
    """A lost COMMIT acknowledgement behind PgBouncer carries the transaction's real
    server session and start, and settling ends that session only while it is still
    inside that transaction: a COMMIT held in flight is settled by ending it (the COMMIT
    that arrives later commits nothing); one that committed before PgBouncer handed its
    session on leaves the session alive. (Two server sessions: settling needs one while
    the held COMMIT keeps the other.)"""
    through = await start_pgbouncer(db_dsn, pool_size=2)
    clock = FakeClock(datetime(2026, 6, 1, tzinfo=UTC))
    async with PgProxy(through) as proxy, \
            Database.open(proxy.dsn, migrate=False, min_size=1, max_size=2) as proxied:
        assert proxied.pooler is Pooler.TRANSACTION
        proxy.arm(Fault.HOLD_COMMIT)
        with pytest.raises(CommitOutcomeUnknown) as raised:
            async with proxied.transaction() as tx:
                await tx.execute("tenant_ensure", "held", clock.now())
                pid = await tx.raw.fetchval("SELECT pg_backend_pid()")
        lost = raised.value
        assert (lost.backend_pid, lost.backend_start) == (pid, None)
        assert isinstance(lost.transaction_start, datetime)
        assert await _alive(db, pid)  # idle in its transaction, COMMIT not yet arrived
        await proxied.settle(lost)
        assert not await _alive(db, pid)
        assert await proxy.release_held() == 1
        async with proxied.transaction() as tx:
            await tx.execute("tenant_ensure", "moved_on", clock.now())
            pid, started = tuple(await tx.raw.fetchrow("SELECT pg_backend_pid(), now()"))
        # as if its acknowledgement had been lost after PgBouncer took the session back
        await proxied.settle(CommitOutcomeUnknown("commit: ack lost", pid, None, started))
        assert await _alive(db, pid)
    tenants = await db.pool.fetch("SELECT tenant_id FROM tenants ORDER BY tenant_id")
    assert [r["tenant_id"] for r in tenants] == ["moved_on"]


async def _alive(db: Database, pid: int | None) -> bool:
    return bool(await db.pool.fetchval(
        "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1)", pid))


async def test_a_replay_through_pgbouncer_is_left_alone_by_prune_while_it_runs(
        db_dsn: str, start_pgbouncer: StartPgBouncer, tmp_path: Path) -> None:
    """A replay through PgBouncer (two server sessions: its lock's open transaction
    keeps one, its work uses the other), blocked inside its first source read: prune
    through another pool removes nothing of it; once released it runs to the end and
    removes its own tenant."""
    through = await start_pgbouncer(db_dsn, pool_size=2)
    definitions = load_replay_definitions(EXAMPLES / "conditions" / "stocks.toml",
                                          min_interval=DEFAULT_MIN_INTERVAL)
    series = SeriesSource.from_csv(EXAMPLES / "series" / "stocks.csv")
    span = series.span()
    assert span is not None
    reading, release = anyio.Event(), anyio.Event()

    class Blocking:
        name, version = series.name, series.version

        async def read(self, subject: str, at: datetime) -> Any:
            reading.set()
            await release.wait()
            return await series.read(subject, at)

    summaries = []
    async with Database.open(through, migrate=False) as one, \
            Database.open(through, migrate=False) as two:

        async def run() -> None:
            summaries.append(await replay(one, definitions, Blocking(), start=span[0],
                                          end=span[0] + timedelta(days=40), home=tmp_path))

        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                tg.start_soon(run)
                await reading.wait()
                tenants = [r["tenant_id"] for r in await two.fetch(
                    "replay_tenants_before", datetime.now(UTC) + timedelta(seconds=1))]
                pruned = await prune_replays(two, datetime.now(UTC) + timedelta(seconds=1))
                release.set()
    async with direct(db_dsn) as conn:
        left = await conn.fetchval("SELECT count(*) FROM tenants")
    assert (len(tenants), pruned, left) == (1, [], 0)
    assert summaries[0].polls > 0


async def test_unworkable_pgbouncer_setups_are_refused_naming_the_setting(
        db_dsn: str, start_pgbouncer: StartPgBouncer) -> None:
    """pool_mode = statement cannot run a transaction: refused naming pool_mode.
    WATCHKEEPER_POOLER=session through a transaction pooler sends search_path as a
    startup parameter, which PgBouncer 1.18 refuses: refused naming WATCHKEEPER_POOLER."""
    statement = await start_pgbouncer(db_dsn, pool_mode="statement")
    with pytest.raises(ConfigError) as by_mode:
        async with Database.open(statement, migrate=False):
            pass
    assert "Fix: set pool_mode = transaction (or session)" in str(by_mode.value)
    transaction = await start_pgbouncer(db_dsn)
    with pytest.raises(ConfigError) as by_setting:
        async with Database.open(transaction, migrate=False, pooler="session"):
            pass
    assert "unsupported startup parameter: search_path" in str(by_setting.value)
    assert "Fix: unset WATCHKEEPER_POOLER (auto) or set it to transaction" in str(
        by_setting.value)


async def test_a_direct_session_keeps_its_statement_cache(db: Database) -> None:
    """Straight to PostgreSQL the probe finds a session of its own: named prepared
    statements stay cached on it, and the search path is the startup parameter's."""
    assert db.pooler is Pooler.SESSION
    async with db.connection() as conn:
        await conn.fetchval("server_clock")
        await conn.fetchval("server_clock")
        cached = await conn.raw.fetchval(
            "SELECT count(*) FROM pg_prepared_statements WHERE statement = $1",
            QUERIES["server_clock"])
        path = await conn.raw.fetchval("SHOW search_path")
    assert (cached, path) == (1, '"watchkeeper"')
