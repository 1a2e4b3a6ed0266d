"""PostgreSQL access: pool, named queries, migrations, error translation.

SQL lives in ``runtime/store/sql``: numbered migrations in ``migrations/NNNN_name.sql``
and every runtime statement in ``queries.sql`` under ``-- name: <name>`` headers
(procrastinate's layout). Every statement is parameterized. asyncpg errors are
translated here (:func:`translated`) and never leave :mod:`runtime`.

Everything watchkeeper creates lives in one schema of its own (``watchkeeper`` unless
``WATCHKEEPER_SCHEMA`` says otherwise), never in ``public``, so it can share an
application's database. The mechanism is the connection's ``search_path``, sent as a
startup parameter (:func:`server_settings`) rather than a ``SET`` after connecting.
Every pooled connection checks on arrival that the setting reached the server
(:class:`ConfigError` if not), so something in between that drops it cannot make
watchkeeper write into ``public``. The search path names only our schema: an
unqualified name never falls back to an application's table of the same name
(``users``, ``tasks``, ...).

Behind a pooler in transaction mode (PgBouncer ``pool_mode = transaction``,
:class:`Pooler`) a client connection is a server session only for the length of one
transaction, and the next transaction may run on a session another client used. So
nothing may outlive a transaction there: the statement cache is off (no named prepared
statements), the search path is set by every transaction for itself (``set_config(...,
true)``: PgBouncer before 1.20 refuses it as a startup parameter, and no pooler carries
a ``SET`` from one transaction to the next), a statement outside a transaction gets a
transaction of its own for that, a staging table is created (when a batch is too large
to send with its statement) by the transaction that fills it, migrations run in one
transaction under a transaction-scoped advisory lock, and a lost COMMIT is settled by the transaction's own
server session and start, never by a session the pooler may since have handed to other
work. A direct session keeps its statement cache and pays for none of this.
:meth:`Database.open` tells the two apart by the server pid: the one a connection
announces at startup is its own session's on PostgreSQL, a pooler's invention behind one.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import random
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from datetime import datetime
from importlib import resources
from typing import Any, TypeVar

import anyio
import asyncpg

from .._errors import (
    CommitOutcomeUnknown,
    ConfigError,
    DatabaseUnavailable,
    LockStall,
    WatchkeeperError,
)
from . import _legacy
from ._config import DEFAULT_SCHEMA, Pooler, check_schema
from ._sealing import Keyring, SealedSecret

__all__ = ["DEFAULT_SCHEMA", "Database", "JsonText", "Pooler", "StoreError", "Timeouts",
           "check_schema",
           "load_queries", "migration_lock_key", "migrations", "server_settings", "translated"]

log = logging.getLogger("watchkeeper.store")
T = TypeVar("T")

# matched whole (fullmatch): "$" would also match before a final newline
_HEADER = re.compile(r"--\s*name:\s*([a-z_][a-z0-9_]*)\s*")


class StoreError(WatchkeeperError):
    """PostgreSQL rejected a statement for a reason that retrying will not fix."""


def server_settings(schema: str) -> dict[str, str]:
    """The startup parameters of every watchkeeper connection: ``{"search_path": '"schema"'}``.

    For a connection made outside :class:`Database` (a benchmark, a test's second writer)
    that must see watchkeeper's tables: ``asyncpg.connect(dsn, server_settings=...)``.

    Raises:
        ConfigError: ``schema`` fails :func:`check_schema`.
    """
    return {"search_path": f'"{check_schema(schema)}"'}


def migration_lock_key(schema: str) -> int:
    """The advisory-lock key (a signed 64-bit int) that serializes migrations of ``schema``.

    Advisory locks are per database; the key carries the schema, so two watchkeeper
    schemas in one database migrate independently.
    """
    digest = hashlib.sha256(f"watchkeeper migrations of schema {schema}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


# PgBouncer's words when it refuses a transaction block (pool_mode = statement)
_STATEMENT_POOLING = "transaction blocks not allowed in statement pooling mode"
_TRANSIENT = (
    asyncpg.exceptions.ConnectionDoesNotExistError,
    asyncpg.exceptions.ConnectionFailureError,
    asyncpg.exceptions.CannotConnectNowError,
    asyncpg.exceptions.TooManyConnectionsError,
    asyncpg.exceptions.SerializationError,
    asyncpg.exceptions.DeadlockDetectedError,
    asyncpg.exceptions.AdminShutdownError,
    asyncpg.exceptions.InterfaceError,
    # a backend terminated while a statement starts on it leaves that connection
    # unusable ("cannot switch to state ...; another operation is in progress")
    asyncpg.exceptions.InternalClientError,
    # a write on a standby (a failover demoted the server this session is on, or the URL
    # names a standby): an outage until a session reaches the primary, never a crash
    asyncpg.exceptions.ReadOnlySQLTransactionError,
    ConnectionError,
    OSError,
    TimeoutError,
)


def _closed(raw: asyncpg.Connection) -> bool:
    """Whether ``raw`` is gone: closed, or a pool proxy asyncpg already detached (when the
    server closes a pooled connection, asyncpg releases it back to the pool by itself and
    the proxy then refuses every call, ``is_closed`` included, with ``InterfaceError``)."""
    try:
        return raw.is_closed()
    except asyncpg.exceptions.InterfaceError:
        return True


@contextmanager
def translated(what: str) -> Iterator[None]:
    """Translate asyncpg and socket errors raised inside into runtime errors.

    Raises:
        ConfigError: a pooler in statement mode refused a transaction (names its
            ``pool_mode`` setting).
        LockStall: cancelled by ``lock_timeout`` (55P03) or ``statement_timeout`` (57014).
        DatabaseUnavailable: connection-level or retryable failures.
        StoreError: any other PostgreSQL error.
    """
    try:
        yield
    except WatchkeeperError:
        raise
    except _TRANSIENT as exc:
        if _STATEMENT_POOLING in str(exc):
            raise ConfigError(
                f"{what}: the pooler in front of PostgreSQL says: {exc}. Fix: set pool_mode = "
                "transaction (or session) for watchkeeper's database in pgbouncer.ini: "
                "watchkeeper needs transactions.") from exc
        raise DatabaseUnavailable(f"{what}: {type(exc).__name__}: {exc}") from exc
    except (asyncpg.exceptions.LockNotAvailableError,
            asyncpg.exceptions.QueryCanceledError) as exc:
        setting = ("lock_timeout" if isinstance(exc, asyncpg.exceptions.LockNotAvailableError)
                   else "statement_timeout")
        raise LockStall(f"{what}: {exc} ({setting})", setting) from exc
    except asyncpg.PostgresError as exc:
        raise StoreError(f"{what}: {exc}") from exc


def load_queries(text: str | None = None) -> dict[str, str]:
    """Parse ``queries.sql`` into ``{name: sql}``.

    Raises:
        ConfigError: a duplicate name or SQL before the first header.
    """
    if text is None:
        text = resources.files("watchkeeper.runtime.store").joinpath("sql/queries.sql").read_text("utf-8")
    queries: dict[str, list[str]] = {}
    current: str | None = None
    for line in text.splitlines():
        match = _HEADER.fullmatch(line)
        if match:
            current = match.group(1)
            if current in queries:
                raise ConfigError(f"queries.sql: duplicate query name {current!r}")
            queries[current] = []
        elif current is not None:
            queries[current].append(line)
        elif line.strip() and not line.startswith("--"):
            raise ConfigError("queries.sql: SQL before the first '-- name:' header")
    return {name: "\n".join(lines).strip() for name, lines in queries.items()}


QUERIES = load_queries()


@dataclass(frozen=True, slots=True)
class Migration:
    """One numbered migration file."""

    version: int
    name: str
    sql: str

    @property
    def sha256(self) -> str:
        """Hash of the file's text; an applied migration must never change."""
        return hashlib.sha256(self.sql.encode()).hexdigest()


def migrations() -> list[Migration]:
    """The migration files shipped in ``runtime/sql/migrations``, in order."""
    folder = resources.files("watchkeeper.runtime.store").joinpath("sql/migrations")
    found = []
    for entry in folder.iterdir():
        match = re.fullmatch(r"([0-9]{4})_([a-z0-9_]+)\.sql", entry.name)
        if match:
            found.append(Migration(int(match.group(1)), match.group(2), entry.read_text("utf-8")))
    return sorted(found, key=lambda m: m.version)


class JsonText(str):
    """JSON that is already serialized: sent to a jsonb column as is."""


def _jsonb_encode(value: Any) -> bytes:
    text = value if isinstance(value, JsonText) else json.dumps(value)
    return b"\x01" + text.encode()


def _jsonb_decode(data: bytes) -> Any:
    return json.loads(data[1:])


_BACKENDS: dict[int, datetime] = {}
"""Server pid -> backend_start of this process's connections (to settle a lost COMMIT)."""


async def _init_connection(conn: asyncpg.Connection, schema: str = DEFAULT_SCHEMA, *,
                           pooler: Pooler = Pooler.SESSION, standby: bool = False) -> None:
    """Prepare a new pooled connection: check its search path, then
    :func:`_prepare_connection` (on a ``standby``, a read-only copy, the codecs only: it
    refuses the staging tables). Behind a transaction pooler only the codecs: the server
    session seen now is not the one later transactions run on.

    Raises:
        ConfigError: the ``search_path`` startup parameter did not reach the server.
    """
    if pooler is Pooler.TRANSACTION:
        await _register_codecs(conn)
        return
    expected = server_settings(schema)["search_path"]
    actual = await conn.fetchval(QUERIES["search_path"])
    if actual != expected and standby:
        raise ConfigError(
            f"the read standby's search_path is {actual!r}, not {expected!r}: something between "
            "watchkeeper and the standby dropped the startup parameter. Fix: remove "
            "search_path and options from DATABASE_READ_URL.")
    if actual != expected:
        raise ConfigError(
            f"the connection's search_path is {actual!r}, not {expected!r}: something between "
            "watchkeeper and PostgreSQL dropped or replaced the startup parameter. Fix: remove "
            "search_path and options from DATABASE_URL; behind a pooler in transaction mode "
            "unset WATCHKEEPER_POOLER (or set it to transaction); behind PgBouncer in session "
            "mode set track_extra_parameters = search_path (1.20+) and keep search_path out "
            "of ignore_startup_parameters.")
    if standby:
        await _register_codecs(conn)
    else:
        await _prepare_connection(conn)


async def _register_codecs(conn: asyncpg.Connection) -> None:
    # jsonb's binary wire format is a version byte (1) and the JSON text; binary lets the
    # COPY-based admission staging carry jsonb values too.
    await conn.set_type_codec("jsonb", encoder=_jsonb_encode, decoder=_jsonb_decode,
                              schema="pg_catalog", format="binary")
    await conn.set_type_codec("json", encoder=json.dumps, decoder=json.loads, schema="pg_catalog")


async def _prepare_connection(conn: asyncpg.Connection) -> None:
    """Codecs, the session's identity (for a lost COMMIT), and whether it may create
    the temporary staging tables (:meth:`Connection.stage` creates them in the
    transaction that fills them; none is made here, see ``staging_tables``).

    Raises:
        ConfigError: the user lacks the TEMPORARY privilege on the database.
        asyncpg.ReadOnlySQLTransactionError: the session is read-only (a hot standby, or
            ``default_transaction_read_only``): it is not pooled, and the pool's caller
            sees an outage (:func:`translated`), as it would at its first write there.
    """
    await _register_codecs(conn)
    row = await conn.fetchrow(QUERIES["backend_identity"])
    if row["pid"] is not None:
        _BACKENDS[row["pid"]] = row["backend_start"]
    if not row["temporary"]:
        raise ConfigError(
            "permission denied to create temporary tables in this database (each "
            "transaction that admits stages its rows in temporary tables). Fix: have the "
            "database owner GRANT TEMPORARY ON DATABASE to the user in DATABASE_URL, or "
            "connect as another user.")
    if row["read_only"]:
        raise asyncpg.ReadOnlySQLTransactionError(
            "the session is read-only (a standby, or default_transaction_read_only): "
            "not pooled for writes")


def _staging_statements() -> dict[str, str]:
    """Table name -> its ``CREATE TEMP TABLE IF NOT EXISTS ... ON COMMIT DROP``
    statement, from the ``staging_tables`` query."""
    found = re.findall(r"(CREATE TEMP TABLE IF NOT EXISTS (\w+) \(.*?\) ON COMMIT DROP;)",
                       QUERIES["staging_tables"], re.DOTALL)
    return {table: statement for statement, table in found}


STAGING = _staging_statements()
"""Each staging table's statement (:meth:`Connection.stage` runs it before its COPY)."""


def _staging_columns() -> dict[str, tuple[tuple[str, str], ...]]:
    """Table name -> its ``(column, type)`` pairs, in order, from its statement."""
    found = {}
    for table, statement in STAGING.items():
        body = statement[statement.index("(") + 1:statement.rindex(")")]
        found[table] = tuple((name, kind.strip()) for name, kind in
                             (column.strip().split(" ", 1) for column in body.split(",")))
    return found


STAGING_COLUMNS = _staging_columns()
"""Each staging table's ``(column, type)`` pairs."""

STAGING_JSONB = {table: frozenset(i for i, (_, kind) in enumerate(columns) if kind == "jsonb")
                 for table, columns in STAGING_COLUMNS.items()}
"""Each staging table's jsonb columns, by position."""


def _json_text(value: Any) -> Any:
    """A jsonb value as :class:`JsonText` (``None`` as is): sent in a ``jsonb[]`` array,
    a list would be taken for one of the array's dimensions."""
    return value if value is None or isinstance(value, JsonText) else JsonText(json.dumps(value))


INLINE_VALUES = 8192
"""A batch of at most this many values (rows x the table's columns) is not COPYed into
its staging table but sent with the statement that reads it, as one array per column
(``unnest``): for a small batch that is several times cheaper than creating the table
(catalog rows written and removed again, and every statement that reads the table planned
anew), for a large one asyncpg's array encoding costs more than the COPY saves."""

_STAGE_REF = re.compile(r"\b(FROM|JOIN)(\s+)(wk_stage_\w+)(\s+\w+)")
_PARAM = re.compile(r"\$(\d+)")


def _code(sql: str) -> str:
    """``sql`` without its ``--`` comments."""
    return "\n".join(line.split("--", 1)[0] for line in sql.splitlines())


def _staging_reads() -> dict[str, frozenset[str]]:
    """Query name -> the staging tables it reads (only queries that read one).

    Raises:
        ConfigError: a query names a staging table other than as ``FROM``/``JOIN
            <table> <alias>`` (the form :func:`_inlined` rewrites).
    """
    reads = {}
    for name, sql in QUERIES.items():
        if name == "staging_tables":
            continue
        code = _code(sql)
        named = re.findall(r"\bwk_stage_\w+", code)
        if not named:
            continue
        tables = set(named)
        if len(_STAGE_REF.findall(code)) != len(named) or not tables <= STAGING.keys():
            raise ConfigError(f"queries.sql: {name} reads a staging table other than as "
                              "FROM/JOIN <table> <alias>")
        reads[name] = frozenset(tables)
    return reads


STAGING_READS = _staging_reads()
"""Query name -> the staging tables it reads."""


@functools.cache
def _inlined(name: str, tables: frozenset[str]) -> str:
    """Query ``name`` reading ``tables`` from arrays sent after its own parameters (one
    per column, the tables in sorted order) instead of from the staging tables."""
    code = _code(QUERIES[name])
    first = max((int(n) for n in _PARAM.findall(code)), default=0) + 1
    sources = {}
    for table in sorted(tables):
        columns = STAGING_COLUMNS[table]
        arrays = ", ".join(f"${first + i}::{kind}[]" for i, (_, kind) in enumerate(columns))
        sources[table] = (f"(SELECT * FROM unnest({arrays}) AS u "
                          f"({', '.join(column for column, _ in columns)}))")
        first += len(columns)
    return _STAGE_REF.sub(lambda m: m.group(1) + m.group(2) + sources.get(m.group(3), m.group(3))
                          + m.group(4), code)


class Database:
    """A pool and the named queries.

    Use :meth:`open` (an async context manager). Methods take a query *name* from
    ``queries.sql`` and positional parameters.
    """

    def __init__(self, pool: asyncpg.Pool | None, schema: str = DEFAULT_SCHEMA,
                 pooler: Pooler = Pooler.SESSION, dsn: str | None = None) -> None:
        self._pool = pool
        self._opened = anyio.Event()
        if pool is not None:
            self._opened.set()
        self._why_not_open = "connecting"
        self.keyring: Keyring | None = None
        """The keys webhook secrets are sealed under (:mod:`._sealing`); ``None``: this
        handle cannot store or read a webhook secret."""
        self.schema = schema
        self.pooler = pooler
        """``SESSION`` or ``TRANSACTION``: what :meth:`open` found or was told."""
        self.dsn = dsn
        """The DSN the pool connects with (for :meth:`listening`'s own connection)."""
        self.standby: Any = None
        """The hot standby the use cases send reads to (:class:`._standby.Standby`,
        attached for ``DATABASE_READ_URL``), or ``None``: every statement here still goes
        to this pool."""

    @property
    def pool(self) -> asyncpg.Pool:
        """The connection pool.

        Raises:
            DatabaseUnavailable: not open yet (:meth:`opening` is still trying).
        """
        if self._pool is None:
            raise DatabaseUnavailable(f"not connected yet: {self._why_not_open}")
        return self._pool

    @property
    def is_open(self) -> bool:
        """Whether the pool is open (and the schema migrated, when asked)."""
        return self._opened.is_set()

    async def wait_open(self) -> None:
        """Return once the database is open (at once for :meth:`open`'s)."""
        await self._opened.wait()

    @classmethod
    @asynccontextmanager
    async def opening(cls, dsn: str, *, schema: str = DEFAULT_SCHEMA, min_size: int = 1,
                      max_size: int = 10, migrate: bool = True,
                      pooler: Pooler | str = Pooler.AUTO, retry_base: float = 1.0,
                      retry_cap: float = 30.0, timeouts: Timeouts | None = None,
                      keyring: Keyring | None = None) -> AsyncIterator[Database]:
        """Yield a :class:`Database` at once and open it meanwhile: probe, pool, first
        connection and migrations as :meth:`open` does, each failure for want of the
        server (:class:`DatabaseUnavailable`: refused, reset, terminated backends, a
        server starting up or shutting down) retried after a capped backoff (full
        jitter under ``retry_base`` seconds doubling up to ``retry_cap``, the
        supervisor loops' backoff), for as long as it takes. Until it is open every
        statement raises :class:`DatabaseUnavailable` naming the last failure, and
        :meth:`wait_open` waits; a process can serve its readiness probe meanwhile.

        Raises:
            ConfigError: as :meth:`open`: a problem a retry will not fix ends the block.
        """
        check_schema(schema)
        db = cls(None, schema, _pooler(pooler), dsn)
        db.keyring = keyring
        async with anyio.create_task_group() as tg:
            tg.start_soon(db._open_retrying, min_size, max_size, migrate, retry_base, retry_cap,
                          timeouts)
            try:
                yield db
            finally:
                tg.cancel_scope.cancel()
                if db._pool is not None:
                    with anyio.CancelScope(shield=True):
                        await db._pool.close()

    async def _open_retrying(self, min_size: int, max_size: int, migrate: bool,
                             base: float, cap: float, timeouts: Timeouts | None) -> None:
        assert self.dsn is not None
        failures = 0
        while True:
            pool: asyncpg.Pool | None = None
            try:
                pool, found = await _connect(self.dsn, self.schema, min_size, max_size,
                                             self.pooler, timeouts)
                ready = Database(pool, self.schema, found, self.dsn)
                ready.keyring = self.keyring
                if migrate:  # before anyone else may use the pool
                    await ready.migrate()
                if self.keyring is not None:
                    await ready.secure_secrets()
                self._pool, self.pooler = pool, found
            except BaseException as exc:
                if pool is not None:
                    pool.terminate()
                if not isinstance(exc, DatabaseUnavailable):
                    raise
                failures += 1
                self._why_not_open = str(exc)
                delay = random.uniform(0, min(cap, base * 2 ** (failures - 1)))
                log.warning("database unreachable at start (%s); attempt %d, trying again in "
                            "%.1f s", exc, failures, delay)
                await anyio.sleep(delay)
                continue
            if failures:
                log.info("database reachable after %d failed attempt(s)", failures)
            self._opened.set()
            return

    @classmethod
    @asynccontextmanager
    async def open(cls, dsn: str, *, schema: str = DEFAULT_SCHEMA, min_size: int = 1,
                   max_size: int = 10, migrate: bool = True,
                   pooler: Pooler | str = Pooler.AUTO,
                   timeouts: Timeouts | None = None,
                   keyring: Keyring | None = None) -> AsyncIterator[Database]:
        """Connect, optionally apply migrations, yield, and close.

        Args:
            dsn: a ``postgresql://`` URL (libpq defaults fill in what it leaves out).
            schema: where every watchkeeper table lives (:func:`check_schema`); created
                by the migration if missing, with an install of the first release moved
                into it out of ``public`` (:mod:`._legacy`).
            pooler: what a connection is on the server (:class:`Pooler` or its value);
                ``auto`` and ``transaction`` cost one probe connection before the pool
                is made, ``session`` none.
            timeouts: ``lock_timeout`` and ``statement_timeout`` of every pooled
                connection (startup parameters; not behind a transaction pooler, where
                they are set on the role); migrations run without them.
            keyring: the keys webhook secrets are sealed under; given, every secret
                still in clear is sealed and every stored one checked to open
                (:meth:`secure_secrets`) before the block runs.

        Raises:
            ConfigError: bad configuration, with the fix in the message: an invalid
                ``schema`` or ``pooler``, an unparsable DSN, a database that does not
                exist, a login refused, a role not allowed to connect or to create the
                schema or its tables, a pooler that drops ``search_path``, a pooler in
                statement mode, ``track_activities`` off behind a transaction pooler; a
                ``keyring`` that does not open the stored webhook secrets (naming
                ``WATCHKEEPER_SECRET_KEY``).
            DatabaseUnavailable: the server cannot be reached (refused, timed out, host
                not resolved, too many connections, starting up or shutting down).
        """
        check_schema(schema)
        pool, found = await _connect(dsn, schema, min_size, max_size, _pooler(pooler), timeouts)
        try:
            db = cls(pool, schema, found, dsn)
            db.keyring = keyring
            if migrate:
                await db.migrate()
            if keyring is not None:
                await db.secure_secrets()
            yield db
        finally:
            await pool.close()

    async def secure_secrets(self) -> int:
        """Seal every webhook secret still stored in clear (those of before migration
        0010) under :attr:`keyring`, then check that the keyring opens a secret of every
        key that wrapped one; return how many were sealed.

        Raises:
            ConfigError: no keyring; or one that does not hold a key the stored secrets
                were sealed under, or cannot open them (:class:`~._sealing.UnknownKey`,
                naming ``WATCHKEEPER_SECRET_KEY`` and the fix).
            DatabaseUnavailable: the store failed.
        """
        keyring = self.sealing_keyring()
        async with self.transaction() as tx:
            rows = await tx.fetch("webhook_secrets_unsealed")
            for r in rows:
                box = keyring.seal(r["secret"], r["tenant_id"], r["endpoint"])
                await tx.execute("webhook_secret_seal", r["tenant_id"], r["endpoint"],
                                 r["secret_id"], box.sealed, box.data_key, box.key_id)
        if rows:
            log.info("sealed %d webhook secret(s) stored in clear under key %s", len(rows),
                     keyring.current_id)
        for r in await self.fetch("webhook_secret_keys"):
            keyring.open(SealedSecret(bytes(r["sealed"]), bytes(r["data_key"]), r["key_id"]),
                         r["tenant_id"], r["endpoint"])
        return len(rows)

    def sealing_keyring(self) -> Keyring:
        """:attr:`keyring`.

        Raises:
            ConfigError: this handle has none (opened without ``keyring``).
        """
        if self.keyring is None:
            raise ConfigError(
                "this database handle holds no key to seal or open webhook secrets with. "
                "Fix: open it with keyring=Keyring.load(settings.secret_key, settings.home) "
                "(WATCHKEEPER_SECRET_KEY, or the key file under WATCHKEEPER_HOME).")
        return self.keyring

    async def migrate(self) -> list[int]:
        """Apply pending migrations to :attr:`schema` under its advisory lock; return
        the versions applied.

        Creates the schema if missing; first moves an install of the first release out
        of ``public`` if there is one and the schema holds none (:mod:`._legacy`).

        Raises:
            ConfigError: an applied migration's file changed since it was applied; the
                role may not create the schema or its tables; the schema holds a
                relation of the same name as one of ours that is not ours.
        """
        async with self.connection() as conn:
            return await _migrate(conn, self.schema, pooled=self.pooler is Pooler.TRANSACTION)

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[Connection]:
        """Acquire one connection from the pool (behind a transaction pooler, a server
        session only within each of its transactions)."""
        with translated("acquire"):
            raw = await self.pool.acquire()
        try:
            yield Connection(raw, self.schema if self.pooler is Pooler.TRANSACTION else None)
        except DatabaseUnavailable as exc:
            if isinstance(exc.__cause__, asyncpg.exceptions.ReadOnlySQLTransactionError):
                raw.terminate()  # the next session connects anew: to the primary, by the URL
            raise
        finally:
            with translated("release"):
                await self.pool.release(raw)

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Connection]:
        """A connection inside one transaction, committed on normal exit.

        Raises:
            CommitOutcomeUnknown: the connection dropped during COMMIT.
        """
        async with self.connection() as conn, conn.transaction():
            yield conn

    def listen_unavailable(self) -> str | None:
        """Why :meth:`listening` cannot work here, or ``None`` when it can."""
        if self.pooler is Pooler.TRANSACTION:
            return ("LISTEN is not available behind a transaction pooler (a session's LISTEN "
                    "ends with its transaction there)")
        if self.dsn is None:
            return "no DSN to open a listening connection with"
        return None

    @asynccontextmanager
    async def listening(self, channels: Sequence[str],
                        on_notice: Callable[[str], None]) -> AsyncIterator[Callable[[], Awaitable[None]]]:
        """LISTEN on ``channels`` on a connection of its own (outside the pool) and call
        ``on_notice(channel)`` for each notification, until the context exits.

        A channel is named as the migrations notify it, without the schema: ``"due"``
        listens on ``"<schema>_due"`` (migration 0007: a definition due sooner),
        ``"work"`` (new tasks), ``"deliver"`` (new deliveries). Yields a probe: awaiting
        it runs a trivial statement, so a connection that died quietly is noticed.

        Raises:
            ConfigError: :meth:`listen_unavailable` says why not.
            DatabaseUnavailable: the server cannot be reached, now or at a probe.
        """
        why = self.listen_unavailable()
        if why is not None:
            raise ConfigError(why)
        assert self.dsn is not None
        with _connecting():
            raw = await asyncpg.connect(self.dsn, server_settings=server_settings(self.schema))
        names = {f"{self.schema}_{c}": c for c in channels}

        def notified(_conn: Any, _pid: int, channel: str, _payload: str) -> None:
            on_notice(names.get(channel, channel))

        async def probe() -> None:
            with translated("listen probe"):
                await raw.execute("SELECT 1", timeout=10)

        try:
            with translated("listen"):
                for full in names:
                    await raw.add_listener(full, notified)
            yield probe
        finally:
            with contextlib.suppress(Exception):
                await raw.close(timeout=5)

    async def fetch(self, name: str, *args: Any) -> list[asyncpg.Record]:
        """Run a named query on a pooled connection; all rows."""
        async with self.connection() as conn:
            return await conn.fetch(name, *args)

    async def fetchrow(self, name: str, *args: Any) -> asyncpg.Record | None:
        """Run a named query; the first row or ``None``."""
        async with self.connection() as conn:
            return await conn.fetchrow(name, *args)

    async def fetchval(self, name: str, *args: Any) -> Any:
        """Run a named query; the first column of the first row."""
        async with self.connection() as conn:
            return await conn.fetchval(name, *args)

    async def execute(self, name: str, *args: Any) -> str:
        """Run a named statement; its status tag."""
        async with self.connection() as conn:
            return await conn.execute(name, *args)

    async def settle(self, lost: CommitOutcomeUnknown, timeout_ms: int = 5000) -> None:
        """Make a lost COMMIT's outcome final before anyone reads it back.

        The old session may still be inside its transaction (its COMMIT not yet
        arrived, or arriving late); a read-back now could see "not committed" and be
        contradicted a moment later. Ending that session (``pg_terminate_backend`` with
        a wait) fixes the outcome: committed if COMMIT was processed, else rolled back.

        Behind a transaction pooler the session is ended only while it is still inside
        the lost transaction (its pid and ``xact_start``,
        :attr:`CommitOutcomeUnknown.transaction_start`): once out of it the outcome is
        final already, and the pooler may have handed the session to other work. (One
        that leaves the transaction in the instant between the check and the signal is
        ended all the same; its next client sees a dropped connection, a retryable error.)

        Raises:
            DatabaseUnavailable: the old session could not be confirmed gone.
        """
        since = lost.backend_start if lost.transaction_start is None else lost.transaction_start
        if lost.backend_pid is None or since is None:
            raise DatabaseUnavailable("cannot settle a lost COMMIT: unknown server session")
        terminate, alive = (("backend_terminate", "backend_alive")
                            if lost.transaction_start is None
                            else ("transaction_terminate", "transaction_alive"))
        for _ in range(3):
            await self.fetch(terminate, lost.backend_pid, since, timeout_ms)
            if not await self.fetchval(alive, lost.backend_pid, since):
                return
        raise DatabaseUnavailable(
            f"the session {lost.backend_pid} that lost its COMMIT acknowledgement is still alive")

    async def pending_migrations(self) -> list[int]:
        """The shipped migrations not applied to this schema (empty when current).

        Raises:
            DatabaseUnavailable: the server cannot be reached.
            StoreError: the schema has no watchkeeper bookkeeping table.
        """
        applied = {r["version"] for r in await self.fetch("migrations_applied")}
        return [m.version for m in migrations() if m.version not in applied]

    async def server_now(self) -> datetime:
        """PostgreSQL's ``clock_timestamp()``, for the clock-skew measurement."""
        return await self.fetchval("server_clock")


class Connection:
    """One asyncpg connection, speaking named queries.

    Args:
        pooled_schema: behind a transaction pooler only (:class:`Pooler`): the schema
            every transaction puts on its own search path.
    """

    def __init__(self, raw: asyncpg.Connection, pooled_schema: str | None = None) -> None:
        self.raw = raw
        self._path = None if pooled_schema is None else server_settings(pooled_schema)["search_path"]
        self._xact: tuple[int, datetime] | None = None
        """Behind a transaction pooler: (server pid, start) of the open transaction."""
        self._inline: dict[str, list[tuple[Any, ...]]] = {}
        """Staging table -> the rows staged in the open transaction, not COPYed (small)."""
        self._copied: set[str] = set()
        """The staging tables the open transaction created and COPYed into."""
        self._depth = 0
        """Transactions (and savepoints) open through :meth:`transaction`."""

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[None]:
        """Start a transaction (a savepoint inside one); commit on normal exit, roll back
        on error.

        Raises:
            CommitOutcomeUnknown: the connection failed while COMMIT was in flight.
        """
        with translated("begin"):  # a proxy asyncpg detached refuses even this
            outermost = not self.raw.is_in_transaction()
            tx = self.raw.transaction()
            await tx.start()
        # what was staged before a savepoint is what a rollback to it leaves staged
        staged = None if outermost else (
            {table: list(rows) for table, rows in self._inline.items()}, set(self._copied))
        self._depth += 1
        try:
            if outermost:
                self._inline.clear()
                self._copied.clear()
            if outermost and self._path is not None:
                with translated("begin"):
                    row = await self.raw.fetchrow(QUERIES["transaction_begin"], self._path)
                assert row is not None
                self._xact = (row["pid"], row["xact_start"])
            yield
        except BaseException:
            if not _closed(self.raw):
                with translated("rollback"):
                    await tx.rollback()
            if staged is not None:
                self._inline, self._copied = staged
            raise
        finally:
            self._depth -= 1
            if outermost:  # staged rows end with their transaction
                self._inline.clear()
                self._copied.clear()
        with translated("commit"):  # not sent yet: a detached proxy means rolled back
            pid = self.raw.get_server_pid()
        backend_start, started = _BACKENDS.get(pid), None
        if self._xact is not None:
            (pid, started), backend_start = self._xact, None
        try:
            await tx.commit()
        except _TRANSIENT as exc:
            raise CommitOutcomeUnknown(f"commit: {type(exc).__name__}: {exc}", pid,
                                       backend_start, started) from exc
        except asyncpg.PostgresError as exc:
            raise StoreError(f"commit: {exc}") from exc

    async def _run(self, what: str, call: Callable[..., Awaitable[T]], *args: Any) -> T:
        """``call(*args)``, errors translated. Behind a transaction pooler, outside a
        transaction: inside one of its own, with the search path set (outside any, a
        statement would run with whatever search path the server session's last client
        left)."""
        with translated(what):
            if self._path is None or self.raw.is_in_transaction():
                return await call(*args)
            async with self.raw.transaction():
                await self.raw.fetchval(QUERIES["search_path_local"], self._path)
                return await call(*args)

    def _statement(self, name: str, args: tuple[Any, ...]) -> tuple[Any, ...]:
        """The text and arguments of named query ``name``: the rows :meth:`stage` kept
        for the staging tables it reads appended, one array per column (see
        :func:`_inlined`)."""
        tables = STAGING_READS.get(name)
        if tables is None or not self._inline:
            return (QUERIES[name], *args)
        inline = frozenset(t for t in tables if t in self._inline)
        if not inline:
            return (QUERIES[name], *args)
        arrays: list[list[Any]] = []
        for table in sorted(inline):
            rows, width = self._inline[table], len(STAGING_COLUMNS[table])
            arrays.extend([list(column) for column in zip(*rows, strict=True)] if rows
                          else [[] for _ in range(width)])
        return (_inlined(name, inline), *args, *arrays)

    async def fetch(self, name: str, *args: Any) -> list[asyncpg.Record]:
        """Run a named query; all rows."""
        return await self._run(name, self.raw.fetch, *self._statement(name, args))

    async def fetchrow(self, name: str, *args: Any) -> asyncpg.Record | None:
        """Run a named query; the first row or ``None``."""
        return await self._run(name, self.raw.fetchrow, *self._statement(name, args))

    async def fetchval(self, name: str, *args: Any) -> Any:
        """Run a named query; the first column of the first row."""
        return await self._run(name, self.raw.fetchval, *self._statement(name, args))

    async def execute(self, name: str, *args: Any) -> str:
        """Run a named statement; its status tag."""
        return await self._run(name, self.raw.execute, *self._statement(name, args))

    async def execute_built(self, name: str, *args: Any) -> list[str]:
        """Run a named query that builds utility statements (DDL takes no parameters: the
        query quotes identifiers with ``format('%I')``), execute each in order, return them."""
        statements = [row[0] for row in await self.fetch(name, *args)]
        for statement in statements:
            await self._run(statement, self.raw.execute, statement)
        return statements

    async def stage(self, table: str, columns: Sequence[str], rows: Sequence[tuple[Any, ...]]) -> None:
        """Stage ``rows`` (tuples of ``columns``, a subset of the table's in any order;
        the others are NULL) for the staging ``table`` (see the ``staging_tables``
        query), inside the transaction whose statements read them back. Rows add to what
        the transaction staged for ``table`` before; stage a table the transaction reads
        even when it has no rows for it.

        A small batch (:data:`INLINE_VALUES`) is kept here and sent with each statement
        that reads the table, as arrays (:meth:`_statement`). A larger one is COPYed
        (binary: far cheaper to encode than arrays) into the table, created first unless
        this transaction made it already, and dropped by the transaction's end (ON COMMIT
        DROP): no session keeps a temporary table, so none has one to drop when it exits
        (that drop's COMMIT would wait for a synchronous standby, for ever when it is
        gone), and behind a transaction pooler nothing is left on a server session.
        Staged rows follow the transaction: a savepoint rolled back takes back what was
        staged inside it, and nothing staged outlives the transaction.

        Raises:
            StoreError: ``table`` is not a staging table, a column is not one of its,
                or no transaction is open through :meth:`transaction`.
            DatabaseUnavailable: as every statement.
        """
        if table not in STAGING or not self._depth or not self.raw.is_in_transaction():
            raise StoreError(f"stage {table}: a staging table ({', '.join(STAGING)}), filled "
                             "inside a transaction (Connection.transaction)")
        full = [column for column, _ in STAGING_COLUMNS[table]]
        if list(columns) != full:
            if not set(columns) <= set(full):
                raise StoreError(f"stage {table}: columns {sorted(set(columns) - set(full))} "
                                 f"are not the table's ({', '.join(full)})")
            at = {column: i for i, column in enumerate(columns)}
            picks = [at.get(column) for column in full]
            rows = [tuple(None if i is None else row[i] for i in picks) for row in rows]
        if table not in self._copied:
            kept = self._inline.setdefault(table, [])
            if (len(kept) + len(rows)) * len(full) <= INLINE_VALUES:
                jsonb = STAGING_JSONB[table]
                if jsonb and rows:  # in a jsonb[] parameter a list would be a dimension
                    rows = [tuple(_json_text(v) if i in jsonb else v for i, v in enumerate(row))
                            for row in rows]
                kept.extend(rows)
                return
            rows = [*self._inline.pop(table), *rows]
        with translated(f"stage {table}"):
            if table not in self._copied:
                await self.raw.execute(STAGING[table])
                self._copied.add(table)
            if rows:
                await self.raw.copy_records_to_table(table, records=rows, columns=full)


@dataclass(frozen=True, slots=True)
class Timeouts:
    """PostgreSQL's ``lock_timeout`` and ``statement_timeout`` for a pool, seconds (> 0;
    sent in whole milliseconds, at least 1). A statement past either is cancelled and
    raises :class:`LockStall`."""

    lock_seconds: float
    statement_seconds: float

    def __post_init__(self) -> None:
        if not (self.lock_seconds > 0 and self.statement_seconds > 0):
            raise ValueError(f"timeouts of {self.lock_seconds} s and {self.statement_seconds} s: "
                             "give seconds > 0")

    def settings(self) -> dict[str, str]:
        """The startup parameters: ``{"lock_timeout": "5000ms", ...}``."""
        return {"lock_timeout": f"{max(1, round(self.lock_seconds * 1000))}ms",
                "statement_timeout": f"{max(1, round(self.statement_seconds * 1000))}ms"}


async def _connect(dsn: str, schema: str, min_size: int, max_size: int,
                   pooler: Pooler, timeouts: Timeouts | None = None, *,
                   standby: bool = False, connect_timeout: float | None = None
                   ) -> tuple[asyncpg.Pool, Pooler]:
    """Settle ``pooler`` (a probe unless ``SESSION``), make the pool and its first
    connection; return the pool and what the connections are on the server. A
    ``standby`` pool (``DATABASE_READ_URL``) prepares its connections for reads only;
    ``connect_timeout`` bounds the probe and each connection (seconds; asyncpg's 60 s
    when ``None``).

    Raises:
        ConfigError, DatabaseUnavailable: as :meth:`Database.open`.
    """
    found = pooler
    if found is not Pooler.SESSION:
        with _connecting(), anyio.fail_after(connect_timeout):
            found = await _probe(dsn, found)
    pooled = found is Pooler.TRANSACTION
    init = functools.partial(_init_connection, schema=schema, pooler=found, standby=standby)
    with _connecting():
        pool = await asyncpg.create_pool(
            dsn, min_size=min_size, max_size=max_size, init=init, command_timeout=60,
            timeout=60 if connect_timeout is None else connect_timeout,
            server_settings=None if pooled else {
                **server_settings(schema), **(timeouts.settings() if timeouts else {})},
            statement_cache_size=0 if pooled else 100,  # asyncpg's default
        )
    assert pool is not None
    try:
        with _connecting():  # with min_size=0 the first connection is made here
            await pool.release(await pool.acquire())
    except BaseException:
        pool.terminate()
        raise
    return pool, found


@contextmanager
def _connecting() -> Iterator[None]:
    """Translate a failure to connect: configuration (:class:`ConfigError`, with the
    fix) or the server out of reach (:class:`DatabaseUnavailable`, by :func:`translated`)."""
    fix_login = ("Fix: check the user and password in DATABASE_URL, and that the server's "
                 "pg_hba.conf admits this user from this host.")
    with translated("connect"):
        try:
            yield
        except (ConnectionRefusedError, TimeoutError) as exc:
            raise DatabaseUnavailable(
                f"connect: {type(exc).__name__}: {exc}. Fix: start PostgreSQL, or point "
                "DATABASE_URL at a server that is up (unset it for the embedded one).") from exc
        except asyncpg.UndefinedObjectError as exc:  # a query parameter sent as a setting
            raise ConfigError(
                f"DATABASE_URL names a setting PostgreSQL does not know ({exc}). Fix: remove "
                "that ?parameter (asyncpg reads sslmode, host, port, user, password, dbname; "
                "any other is sent to the server as a setting).") from exc
        except (ValueError, OverflowError) as exc:  # ClientConfigurationError is a ValueError
            raise ConfigError(
                f"DATABASE_URL is not a usable PostgreSQL URL: {str(exc).rstrip('.')}. Fix: set it to "
                "postgresql://USER[:PASSWORD]@HOST[:PORT]/DATABASE.") from exc
        except asyncpg.ProtocolViolationError as exc:
            if "unsupported startup parameter" not in str(exc):
                raise
            raise ConfigError(
                f"the server refused a connection: {exc} (PgBouncer says so of search_path, "
                "through which watchkeeper keeps to its schema). Fix: unset WATCHKEEPER_POOLER "
                "(auto) or set it to transaction for pool_mode = transaction; in session mode "
                "set track_extra_parameters = search_path (PgBouncer 1.20+).") from exc
        except asyncpg.InvalidCatalogNameError as exc:
            found = re.search(r'database "(.+)" does not exist', str(exc))
            name = found.group(1) if found else "NAME"
            raise ConfigError(
                f'database "{name}" does not exist. Fix: create it with `createdb {name}` or '
                "point DATABASE_URL at an existing database.") from exc
        except (asyncpg.InvalidPasswordError,
                asyncpg.InvalidAuthorizationSpecificationError) as exc:
            raise ConfigError(f"PostgreSQL refused the login: {exc}. {fix_login}") from exc
        except asyncpg.InsufficientPrivilegeError as exc:
            grant = "TEMPORARY" if "temporary" in str(exc).lower() else "CONNECT"
            why = (" (each connection stages admissions in temporary tables)"
                   if grant == "TEMPORARY" else "")
            raise ConfigError(
                f"{exc}{why}. Fix: have the database owner GRANT {grant} ON DATABASE to the "
                "user in DATABASE_URL, or connect as another user.") from exc


def _pooler(value: Pooler | str) -> Pooler:
    try:
        return Pooler(value)
    except ValueError:
        raise ConfigError(
            f"pooler {value!r} is not one of auto, session, transaction. Fix: set "
            "WATCHKEEPER_POOLER to one of them, or unset it (auto).") from None


async def _probe(dsn: str, wanted: Pooler) -> Pooler:
    """Settle ``auto`` on one connection made without watchkeeper's startup parameters
    (PgBouncer before 1.20 refuses a search_path): ``TRANSACTION`` when the server
    session's pid is not the one announced at startup (a pooler answers for the server
    with keys of its own: PgBouncer, PgCat, Odyssey, Supavisor), else ``SESSION``.
    Behind a transaction pooler, check that pg_stat_activity reports transaction starts.

    Raises:
        ConfigError: ``track_activities`` is off behind a transaction pooler.
    """
    conn = await asyncpg.connect(dsn, statement_cache_size=0)
    try:
        probe = conn.transaction()  # refused by a pooler in statement mode
        await probe.start()
        row = await conn.fetchrow(QUERIES["session_probe"])
        await probe.rollback()  # it wrote nothing: no COMMIT to count or lose
    finally:
        await conn.close()
    assert row is not None
    if wanted is Pooler.AUTO:
        wanted = Pooler.SESSION if row["pid"] == conn.get_server_pid() else Pooler.TRANSACTION
        if wanted is Pooler.TRANSACTION:
            log.info("behind a pooler (the server pid differs from the one announced at "
                     "startup): every transaction sets its own search path, no statement cache")
    if wanted is Pooler.TRANSACTION and not row["track_activities"]:
        raise ConfigError(
            "track_activities is off, so pg_stat_activity does not say which transaction a "
            "server session is in: behind a pooler in transaction mode a lost COMMIT could "
            "not be settled. Fix: set track_activities = on (the default) for watchkeeper's "
            "role or database.")
    return wanted


async def _migrate(conn: Connection, schema: str, *, pooled: bool = False) -> list[int]:
    async with _migration_lock(conn, migration_lock_key(schema), pooled=pooled):
        who = await conn.fetchrow("session_identity")
        role, database = (who["role"], who["database"]) if who else ("ROLE", "DATABASE")
        with _permission(
                f'role "{role}" may not create schema "{schema}" in database "{database}"',
                f'as the database owner run CREATE SCHEMA "{schema}" AUTHORIZATION "{role}" '
                f'(or GRANT CREATE ON DATABASE "{database}" TO "{role}"), or set '
                "WATCHKEEPER_SCHEMA to a schema this role owns"):
            await _ensure_schema(conn, schema)
        with _permission(
                f'role "{role}" may not use or create tables in schema "{schema}"',
                f'as the schema\'s owner run GRANT USAGE, CREATE ON SCHEMA "{schema}" TO '
                f'"{role}" (or migrate as the owner and open with migrate=False)'), \
                _foreign(schema):
            await _legacy.adopt_public_install(conn, schema, migrations())
            if not await conn.fetch("relations_in", schema, ["schema_migrations"]):
                await conn.execute("migrations_table")
            return await _apply(conn, schema)


@asynccontextmanager
async def _migration_lock(conn: Connection, key: int, *, pooled: bool) -> AsyncIterator[None]:
    """The schema's migration lock: on a session of its own, session-scoped (each
    migration then commits in a transaction of its own); behind a transaction pooler,
    transaction-scoped, with every migration inside that one transaction (a session lock
    would stay on whichever server session the pooler picked, and be released, or not,
    by whichever client came next)."""
    if pooled:
        async with conn.transaction():
            await conn.execute("migration_xact_lock", key)
            yield
        return
    # a migration may wait for another process's migration, and take its time: not under
    # the pool's lock_timeout and statement_timeout (restored to them after)
    await conn.execute("migration_timeouts_off")
    try:
        await conn.execute("migration_lock", key)
        try:
            yield
        finally:
            await conn.execute("migration_unlock", key)
    finally:
        await conn.execute("migration_timeouts_reset")


async def _ensure_schema(conn: Connection, schema: str) -> None:
    """CREATE SCHEMA unless it exists (checked first: a role that may use a schema a
    DBA created for it need not be allowed to create schemas)."""
    if not await conn.fetchval("schema_present", schema):
        await conn.execute_built("schema_create", schema)
        log.info("created schema %s", schema)


@contextmanager
def _permission(problem: str, fix: str) -> Iterator[None]:
    """A "permission denied" inside becomes :class:`ConfigError` ``"<problem> (<server's
    words>). Fix: <fix>."``"""
    try:
        yield
    except StoreError as exc:
        if isinstance(exc.__cause__, asyncpg.InsufficientPrivilegeError):
            raise ConfigError(f"{problem} ({exc.__cause__}). Fix: {fix}.") from exc
        raise


@contextmanager
def _foreign(schema: str) -> Iterator[None]:
    """An "already exists" from a migration means the schema holds a relation of one of
    our names that is not ours (no bookkeeping of ours recorded it)."""
    try:
        yield
    except StoreError as exc:
        if isinstance(exc.__cause__, (asyncpg.DuplicateTableError, asyncpg.DuplicateObjectError)):
            raise ConfigError(
                f'schema "{schema}" already holds something watchkeeper did not create '
                f"({exc.__cause__}). Fix: set WATCHKEEPER_SCHEMA to a schema of watchkeeper's "
                "own.") from exc
        raise


async def _apply(conn: Connection, schema: str) -> list[int]:
    try:
        applied = {r["version"]: r["sha256"] for r in await conn.fetch("migrations_applied")}
    except StoreError as exc:  # a schema_migrations table of another tool
        raise ConfigError(
            f'schema "{schema}" holds a schema_migrations table that is not watchkeeper\'s '
            f"({exc}). Fix: set WATCHKEEPER_SCHEMA to a schema of watchkeeper's own.") from exc
    done = []
    for migration in migrations():
        if migration.version in applied:
            if applied[migration.version] != migration.sha256:
                raise ConfigError(
                    f"migration {migration.version:04d}_{migration.name} in schema {schema} was "
                    "changed after it was applied; restore it and add a new numbered "
                    "migration instead."
                )
            continue
        async with conn.transaction():
            with translated(f"migration {migration.version:04d}"):
                await conn.raw.execute(migration.sql)
            await conn.execute("migration_record", migration.version, migration.name,
                               migration.sha256)
        done.append(migration.version)
    return done
