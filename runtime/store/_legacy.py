"""Moving an install of the first release out of ``public``, once.

The first release applied its migrations with the connection's default search path, so
its tables, its ``lease_tokens`` sequence and its bookkeeping table ``schema_migrations``
live in ``public``, where an application sharing the database keeps its own tables (and
may well have a ``users`` or a ``tasks``). When :meth:`Database.migrate` finds such an
install and its target schema holds none, it moves every object of ours there with
``ALTER ... SET SCHEMA``, in one transaction: rows, sequence positions (fencing tokens
keep rising), grants and OIDs are kept; indexes, constraints, row types and identity
sequences go along with their tables. Then the migrations the install lacks are applied
in the schema as usual.

What is ours is exact, never guessed: :data:`OBJECTS` lists what each of the first
release's migrations (0001-0003) creates, and an install is recognised by
``public.schema_migrations`` having exactly the first release's columns and a row for
0001 with the shipped file's name and hash. Anything else in ``public`` (another tool's
``schema_migrations``: Rails' has one column, ``version``; the application's tables) is
never touched. Migrations from 0004 on are only ever applied in a schema of our own, so
this list never grows.

Concurrency: the caller holds its schema's migration lock; the move itself also takes,
for its transaction, the database-wide key the first release migrated under
(:data:`LEGACY_MIGRATION_LOCK`), then looks again: two schemas' migrators cannot both
move one install, and a first-release process migrating ``public`` at that moment
finishes first. Processes of the first release must be stopped before the upgrade: one
left running loses its tables (its statements fail); one started afterwards would create
an empty install in ``public`` again (README, "Sharing an application's database").
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from .._errors import ConfigError

if TYPE_CHECKING:  # _db imports this module
    import asyncpg

    from ._db import Connection, Migration

__all__ = ["BOOKKEEPING", "BOOKKEEPING_COLUMNS", "LEGACY_MIGRATION_LOCK", "OBJECTS",
           "adopt_public_install"]

log = logging.getLogger("watchkeeper.store")

LEGACY_MIGRATION_LOCK = 0x77617463686B7072
"""``"watchkpr"``: the advisory-lock key the first release migrated ``public`` under."""

BOOKKEEPING = "schema_migrations"
BOOKKEEPING_COLUMNS = ["version integer", "name text", "sha256 text",
                       "applied_at timestamp with time zone"]
"""The first release's ``schema_migrations`` columns, as ``format_type`` spells them."""

_TABLE, _SEQUENCE = "r", "S"  # pg_class.relkind

OBJECTS: dict[int, tuple[tuple[str, str], ...]] = {
    1: tuple((name, _TABLE) for name in (
        "tenants", "users", "definitions", "definition_revisions", "occurrences",
        "schedule_events", "tasks", "runs", "reports", "deliveries", "budget_ledger",
        "effects", "supervisors")) + (("lease_tokens", _SEQUENCE),),
    2: tuple((name, _TABLE) for name in (
        "delivery_attempts", "webhook_endpoints", "webhook_secrets",
        "notification_preferences")),
    3: tuple((name, _TABLE) for name in (
        "condition_state", "condition_polls", "observation_receipts", "poll_budget_ledger")),
}
"""Migration version -> the (name, relkind) of every relation it creates by name (the
files in ``sql/migrations``; a test checks them against what the files create)."""


async def adopt_public_install(conn: Connection, schema: str,
                               shipped: Sequence[Migration]) -> list[str]:
    """Move a first-release install out of ``public`` into ``schema``, if there is one and
    ``schema`` holds none; return the names of the relations moved (``[]``: nothing to do).

    Raises:
        ConfigError: ``public`` holds a first-release install that cannot be moved as it
            is (a migration it records is not as shipped, one of its relations is
            missing, or ``schema`` already holds a relation of the same name without an
            install of its own); nothing was moved.
    """
    if await conn.fetchval("legacy_bookkeeping_columns") != BOOKKEEPING_COLUMNS:
        return []  # the common case, checked without taking the database-wide lock
    async with conn.transaction():
        await conn.execute("legacy_lock", LEGACY_MIGRATION_LOCK)
        if await conn.fetchval("legacy_bookkeeping_columns") != BOOKKEEPING_COLUMNS:
            return []  # another schema's migrator moved it while this one waited
        versions = _recognised(await conn.fetch("migrations_applied_in_public"), shipped, schema)
        if not versions:
            return []
        if await conn.fetch("relations_in", schema, [BOOKKEEPING]):
            log.warning("public holds a watchkeeper install of the first release (migrations "
                        "%s); schema %s has its own, so public was left alone", versions, schema)
            return []
        objects = [*(o for v in versions for o in OBJECTS[v]), (BOOKKEEPING, _TABLE)]
        await _check_movable(conn, schema, objects)
        await conn.execute_built("legacy_move_statements", schema, [n for n, _ in objects],
                                 [k for _, k in objects])
    log.warning("moved watchkeeper's %d tables and sequences (migrations %s) from schema "
                "public to schema %s", len(objects), versions, schema)
    return [name for name, _ in objects]


def _recognised(rows: Sequence[asyncpg.Record], shipped: Sequence[Migration],
                schema: str) -> list[int]:
    """The versions a first-release ``public.schema_migrations`` records; ``[]`` if its
    rows are not the first release's (another tool's table of the same shape)."""
    files = {m.version: m for m in shipped}
    if not rows or (rows[0]["version"], rows[0]["name"], rows[0]["sha256"]) != (
            1, files[1].name, files[1].sha256):
        return []
    versions = [row["version"] for row in rows]
    for row in rows:
        file = files.get(row["version"])
        if row["version"] not in OBJECTS or file is None or (
                row["name"], row["sha256"]) != (file.name, file.sha256):
            raise ConfigError(
                f"public.schema_migrations records migration {row['version']:04d}_{row['name']}, "
                "which is not one of the first release's migrations as shipped; nothing was "
                "moved. Fix: restore the install with the release that wrote it, or move its "
                f"tables yourself (ALTER TABLE public.NAME SET SCHEMA {schema}).")
    if versions != list(range(1, len(versions) + 1)):
        raise ConfigError(
            f"public.schema_migrations records migrations {versions}, with a gap; nothing was "
            "moved. Fix: restore the install with the release that wrote it.")
    return versions


async def _check_movable(conn: Connection, schema: str, objects: list[tuple[str, str]]) -> None:
    names = [name for name, _ in objects]
    found = {(r["name"], r["kind"]) for r in await conn.fetch("relations_in", "public", names)}
    missing = [name for name, kind in objects if (name, kind) not in found]
    if missing:
        raise ConfigError(
            f"public.schema_migrations records a watchkeeper install, but public lacks "
            f"{', '.join(missing)}; nothing was moved. Fix: restore them from a backup, or, "
            "if that install is gone, drop public.schema_migrations (watchkeeper then starts "
            f"empty in schema {schema}).")
    clash = [r["name"] for r in await conn.fetch("relations_in", schema, names)]
    if clash:
        raise ConfigError(
            f"schema {schema} has no schema_migrations but already holds {', '.join(clash)}, so "
            "the install in public cannot be moved there; nothing was moved. Fix: drop them if "
            "they are leftovers, or set WATCHKEEPER_SCHEMA to a new schema.")
