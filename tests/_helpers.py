"""Small helpers shared by the database tests (setup through the public paths, and
read-only SQL for assertions)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from watchkeeper.runtime.engine._clock import FakeClock
from watchkeeper.runtime.store._db import Database
from watchkeeper.runtime.store._sealing import Keyring
from watchkeeper.runtime.usecases import UserPrincipal, add_user, authenticate, confirm, propose
from watchkeeper.triggers import parse_spec
from watchkeeper.triggers._spec import DEFAULT_MIN_INTERVAL

TEST_KEYRING = Keyring([bytes(range(32))], source="the tests' key")
"""The key the tests' databases seal webhook secrets under (conftest's ``db``)."""


def utc(text: str) -> datetime:
    """An aware datetime from ISO 8601 (a trailing Z is fine)."""
    value = datetime.fromisoformat(text)
    assert value.tzinfo is not None, text
    return value.astimezone(UTC)


async def owner(db: Database, clock: FakeClock, tenant: str = "acme",
                user: str = "alice", zone: str = "UTC") -> UserPrincipal:
    """Create a user and return them authenticated."""
    return await authenticate(db, await add_user(db, clock, tenant, user, zone=zone))


async def confirmed(db: Database, clock: FakeClock, spec: dict[str, Any], *,
                    definition_id: str = "d1", principal: UserPrincipal | None = None,
                    min_interval: Any = DEFAULT_MIN_INTERVAL) -> UserPrincipal:
    """Propose and confirm ``spec`` as a new definition; return its owner."""
    me = principal or await owner(db, clock)
    parsed = parse_spec({"version": 1, **spec}, min_interval=min_interval)
    proposal = await propose(db, clock, tenant_id=me.tenant_id, definition_id=definition_id,
                             owner_user_id=me.user_id, spec=parsed, proposed_by="agent:test")
    await confirm(db, clock, me, definition_id=definition_id, revision=proposal.revision,
                  spec_hash=proposal.spec_hash)
    return me


async def occurrences(db: Database, definition_id: str = "d1") -> list[dict[str, Any]]:
    """Occurrence rows of a definition, oldest first."""
    rows = await db.pool.fetch(
        "SELECT o.*, t.task_id, t.status AS task_status FROM occurrences o "
        "LEFT JOIN tasks t USING (tenant_id, definition_id, binding_id, slot, kind) "
        "WHERE o.definition_id = $1 ORDER BY o.scheduled_for, o.binding_id, o.kind",
        definition_id)
    return [dict(r) for r in rows]


async def tasks(db: Database, definition_id: str = "d1") -> list[dict[str, Any]]:
    """Task rows of a definition, in admission order."""
    rows = await db.pool.fetch(
        "SELECT * FROM tasks WHERE definition_id = $1 ORDER BY task_id", definition_id)
    return [dict(r) for r in rows]


async def events(db: Database, definition_id: str = "d1") -> list[dict[str, Any]]:
    """schedule_events rows of a definition, in order."""
    rows = await db.pool.fetch(
        "SELECT * FROM schedule_events WHERE definition_id = $1 ORDER BY event_id", definition_id)
    return [dict(r) for r in rows]


async def definition(db: Database, definition_id: str = "d1", tenant: str = "acme") -> dict[str, Any]:
    """The definitions row."""
    row = await db.pool.fetchrow(
        "SELECT * FROM definitions WHERE tenant_id = $1 AND definition_id = $2", tenant,
        definition_id)
    assert row is not None
    return dict(row)


def decisions(rows: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(slot, decision) pairs."""
    return [(r["slot"], r["decision"]) for r in rows]
