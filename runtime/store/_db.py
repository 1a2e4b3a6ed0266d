"""PostgreSQL access: pool, named queries, migrations, error translation.

SQL lives in ``runtime/sql``: numbered migrations in ``migrations/NNNN_name.sql``
and every runtime statement in ``queries.sql`` under ``-- name: <name>`` headers
(procrastinate's layout). Every statement is parameterized. asyncpg errors are
translated here (:func:`translated`) and never leave :mod:`runtime`.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from datetime import datetime
from importlib import resources
from typing import Any

import asyncpg

from .._errors import CommitOutcomeUnknown, ConfigError, DatabaseUnavailable, WatchkeeperError

__all__ = ["Database", "JsonText", "StoreError", "load_queries", "migrations", "translated"]

_MIGRATION_LOCK = 0x77617463686B7072  # "watchkpr": pg_advisory_lock key for migrations
_HEADER = re.compile(r"^--\s*name:\s*([a-z_][a-z0-9_]*)\s*$")


class StoreError(WatchkeeperError):
    """PostgreSQL rejected a statement for a reason that retrying will not fix."""


_TRANSIENT = (
    asyncpg.exceptions.ConnectionDoesNotExistError,
    asyncpg.exceptions.ConnectionFailureError,
    asyncpg.exceptions.CannotConnectNowError,
    asyncpg.exceptions.TooManyConnectionsError,
    asyncpg.exceptions.SerializationError,
    asyncpg.exceptions.DeadlockDetectedError,
    asyncpg.exceptions.AdminShutdownError,
    asyncpg.exceptions.InterfaceError,
    ConnectionError,
    OSError,
    TimeoutError,
)


@contextmanager
def translated(what: str) -> Iterator[None]:
    """Translate asyncpg and socket errors raised inside into runtime errors.

    Raises:
        DatabaseUnavailable: connection-level or retryable failures.
        StoreError: any other PostgreSQL error.
    """
    try:
        yield
    except WatchkeeperError:
        raise
    except _TRANSIENT as exc:
        raise DatabaseUnavailable(f"{what}: {type(exc).__name__}: {exc}") from exc
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
        match = _HEADER.match(line)
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
        match = re.match(r"^(\d{4})_([a-z0-9_]+)\.sql$", entry.name)
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


async def _init_connection(conn: asyncpg.Connection) -> None:
    # jsonb's binary wire format is a version byte (1) and the JSON text; binary lets the
    # COPY-based admission staging carry jsonb values too.
    await conn.set_type_codec("jsonb", encoder=_jsonb_encode, decoder=_jsonb_decode,
                              schema="pg_catalog", format="binary")
    await conn.set_type_codec("json", encoder=json.dumps, decoder=json.loads, schema="pg_catalog")
    row = await conn.fetchrow(QUERIES["backend_identity"])
    if row is not None:
        _BACKENDS[row["pid"]] = row["backend_start"]
    await conn.execute(QUERIES["staging_tables"])


class Database:
    """A pool and the named queries.

    Use :meth:`open` (an async context manager). Methods take a query *name* from
    ``queries.sql`` and positional parameters.
    """

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    @classmethod
    @asynccontextmanager
    async def open(cls, dsn: str, *, min_size: int = 1, max_size: int = 10,
                   migrate: bool = True) -> AsyncIterator[Database]:
        """Connect, optionally apply migrations, yield, and close.

        Raises:
            DatabaseUnavailable: the server cannot be reached.
        """
        with translated("connect"):
            pool = await asyncpg.create_pool(
                dsn, min_size=min_size, max_size=max_size, init=_init_connection,
                command_timeout=60,
            )
        assert pool is not None
        try:
            db = cls(pool)
            if migrate:
                await db.migrate()
            yield db
        finally:
            await pool.close()

    async def migrate(self) -> list[int]:
        """Apply pending migrations under an advisory lock; return the versions applied.

        Raises:
            ConfigError: an applied migration's file changed since it was applied.
        """
        async with self.connection() as conn:
            return await _migrate(conn)

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[Connection]:
        """Acquire one connection from the pool."""
        with translated("acquire"):
            raw = await self.pool.acquire()
        try:
            yield Connection(raw)
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

        Raises:
            DatabaseUnavailable: the old session could not be confirmed gone.
        """
        if lost.backend_pid is None or lost.backend_start is None:
            raise DatabaseUnavailable("cannot settle a lost COMMIT: unknown server session")
        for _ in range(3):
            await self.fetch("backend_terminate", lost.backend_pid, lost.backend_start, timeout_ms)
            if not await self.fetchval("backend_alive", lost.backend_pid, lost.backend_start):
                return
        raise DatabaseUnavailable(
            f"the session {lost.backend_pid} that lost its COMMIT acknowledgement is still alive")

    async def server_now(self) -> datetime:
        """PostgreSQL's ``clock_timestamp()``, for the clock-skew measurement."""
        return await self.fetchval("server_clock")


class Connection:
    """One asyncpg connection, speaking named queries."""

    def __init__(self, raw: asyncpg.Connection) -> None:
        self.raw = raw

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[None]:
        """Start a transaction; commit on normal exit, roll back on error.

        Raises:
            CommitOutcomeUnknown: the connection failed while COMMIT was in flight.
        """
        tx = self.raw.transaction()
        with translated("begin"):
            await tx.start()
        try:
            yield
        except BaseException:
            if not self.raw.is_closed():
                with translated("rollback"):
                    await tx.rollback()
            raise
        pid = self.raw.get_server_pid()
        try:
            await tx.commit()
        except _TRANSIENT as exc:
            raise CommitOutcomeUnknown(f"commit: {type(exc).__name__}: {exc}", pid,
                                       _BACKENDS.get(pid)) from exc
        except asyncpg.PostgresError as exc:
            raise StoreError(f"commit: {exc}") from exc

    async def fetch(self, name: str, *args: Any) -> list[asyncpg.Record]:
        """Run a named query; all rows."""
        with translated(name):
            return await self.raw.fetch(QUERIES[name], *args)

    async def fetchrow(self, name: str, *args: Any) -> asyncpg.Record | None:
        """Run a named query; the first row or ``None``."""
        with translated(name):
            return await self.raw.fetchrow(QUERIES[name], *args)

    async def fetchval(self, name: str, *args: Any) -> Any:
        """Run a named query; the first column of the first row."""
        with translated(name):
            return await self.raw.fetchval(QUERIES[name], *args)

    async def execute(self, name: str, *args: Any) -> str:
        """Run a named statement; its status tag."""
        with translated(name):
            return await self.raw.execute(QUERIES[name], *args)

    async def stage(self, table: str, columns: Sequence[str], rows: Sequence[tuple[Any, ...]]) -> None:
        """COPY ``rows`` (binary) into this session's staging ``table`` (see the
        ``staging_tables`` query): far cheaper to encode than arrays of parameters."""
        with translated(f"stage {table}"):
            await self.raw.copy_records_to_table(table, records=rows, columns=list(columns))


async def _migrate(conn: Connection) -> list[int]:
    await conn.execute("migration_lock", _MIGRATION_LOCK)
    try:
        await conn.execute("migrations_table")
        applied = {r["version"]: r["sha256"] for r in await conn.fetch("migrations_applied")}
        done = []
        for migration in migrations():
            if migration.version in applied:
                if applied[migration.version] != migration.sha256:
                    raise ConfigError(
                        f"migration {migration.version:04d}_{migration.name} was changed after it "
                        "was applied; restore it and add a new numbered migration instead."
                    )
                continue
            async with conn.transaction():
                with translated(f"migration {migration.version:04d}"):
                    await conn.raw.execute(migration.sql)
                await conn.execute("migration_record", migration.version, migration.name,
                                   migration.sha256)
            done.append(migration.version)
        return done
    finally:
        await conn.execute("migration_unlock", _MIGRATION_LOCK)
