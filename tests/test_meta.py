"""Project-level guards: every named query is valid SQL against the migrated schema and
is used; migrations are idempotent and tamper-evident (package boundaries: test_packaging)."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest

from watchkeeper.runtime._errors import ConfigError
from watchkeeper.runtime.store._db import (
    QUERIES,
    STAGING_COLUMNS,
    STAGING_READS,
    Database,
    _inlined,
    load_queries,
    migrations,
)

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.anyio
async def test_every_named_query_prepares(db: Database) -> None:
    """PostgreSQL parses and plans each query in queries.sql against the schema (the
    staging tables made first, in the transaction, as Connection.stage makes them)."""
    async with db.connection() as conn, conn.raw.transaction():
        await conn.raw.execute(QUERIES["staging_tables"])  # ON COMMIT DROP
        for name, sql in QUERIES.items():
            if name.startswith("migration") or sql.count(";") > 1:
                continue  # bookkeeping, and multi-statement scripts (run as scripts)
            await conn.raw.prepare(sql)


@pytest.mark.anyio
async def test_every_staging_reader_prepares_with_its_batches_inline(db: Database) -> None:
    """A query that reads staging tables also prepares with any of them sent inline
    (Connection.stage's small batches), taking one array parameter per column of each,
    typed as the table's column, after its own parameters."""
    checked = 0
    async with db.connection() as conn, conn.raw.transaction():
        await conn.raw.execute(QUERIES["staging_tables"])  # ON COMMIT DROP
        for name, tables in STAGING_READS.items():
            own = len((await conn.raw.prepare(QUERIES[name])).get_parameters())
            for size in range(1, len(tables) + 1):
                for chosen in itertools.combinations(sorted(tables), size):
                    statement = await conn.raw.prepare(_inlined(name, frozenset(chosen)))
                    types = [p.name for p in statement.get_parameters()[own:]]
                    assert types == [f"{TYPE_NAMES[kind]}[]" for table in chosen
                                     for _, kind in STAGING_COLUMNS[table]], name
                    checked += 1
    assert checked >= len(STAGING_READS) >= 5


TYPE_NAMES = {"integer": "int4", "text": "text", "bigint": "int8", "smallint": "int2",
              "boolean": "bool", "double precision": "float8", "jsonb": "jsonb",
              "timestamptz": "timestamptz", "numeric": "numeric"}


def test_every_named_query_is_used() -> None:
    """No dead SQL: each query name appears in the runtime's Python code."""
    code = "\n".join(p.read_text() for p in (ROOT / "runtime").rglob("*.py"))
    unused = [name for name in QUERIES if f'"{name}"' not in code]
    assert unused == []


def test_no_sql_outside_the_sql_files() -> None:
    """Runtime Python passes query names, never SQL text (no scattered f-string SQL)."""
    pattern = re.compile(r"""["'](SELECT\s.*\sFROM\s|INSERT\s+INTO\s|UPDATE\s+\w+\s+SET\s|"""
                         r"""DELETE\s+FROM\s|(CREATE|ALTER|DROP)\s+(TABLE|INDEX|DATABASE)\s)""")
    offenders = [p.name for p in (ROOT / "runtime").rglob("*.py") if pattern.search(p.read_text())]
    assert offenders == []


def test_query_file_rejects_duplicates() -> None:
    """Two queries with one name is a configuration error, not a silent override."""
    with pytest.raises(ConfigError, match="duplicate"):
        load_queries("-- name: a\nSELECT 1;\n-- name: a\nSELECT 2;\n")


@pytest.mark.anyio
async def test_migrations_are_idempotent_and_tamper_evident(db: Database) -> None:
    """A second migrate applies nothing; a changed applied file is refused."""
    assert await db.migrate() == []
    versions = [m.version for m in migrations()]
    applied = await db.pool.fetch("SELECT version FROM schema_migrations ORDER BY version")
    assert [r["version"] for r in applied] == versions
    await db.pool.execute("UPDATE schema_migrations SET sha256 = 'x' WHERE version = 1")
    with pytest.raises(ConfigError, match="was changed after it was applied"):
        await db.migrate()


def test_doors_run_no_queries() -> None:
    """A door calls use cases; it never runs a named query itself (no .fetch/.execute on
    a database handle anywhere under runtime/doors)."""
    pattern = re.compile(r"\.(fetch|fetchrow|fetchval|execute)\(")
    offenders = [str(p.relative_to(ROOT)) for p in (ROOT / "runtime" / "doors").rglob("*.py")
                 if pattern.search(p.read_text())]
    assert offenders == []
