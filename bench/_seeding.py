"""Seeding for the benches: many confirmed definitions due at one instant, fast, and a
check that the fast road writes what the public one does.

Two shapes (issue 17):

* ``shared``: N definitions over a few specs (:data:`SHARED_EXPRS`), as when many users
  confirm the same template.
* ``distinct``: N definitions whose (cron expression, zone) pairs are all different but
  all due at the same instant T (:func:`distinct_crons`: the minute and hour lists and
  the day fields vary and still match T's local time, over every zone a new spec may
  name), each with its own instructions: the shape of a chat app.

:func:`bulk_seed` writes each definition as propose + confirm would (users, definitions
and definition_revisions rows built with the runtime's own functions: ``parse_spec``,
``compiled_columns``, the confirmation's first slot) and COPYs them in: about 20 s for
100k instead of 12 minutes through the use cases. :func:`check_bulk` seeds a sample
through the public path (``add_user``, ``propose``, ``confirm``) into another database
and compares every column of every row, but the token digests (random by design).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import zoneinfo
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import asyncpg

from watchkeeper.runtime.engine._clock import FakeClock
from watchkeeper.runtime.engine._ledger import EPSILON
from watchkeeper.runtime.store._db import Database, server_settings
from watchkeeper.runtime.store._specs import compiled_columns
from watchkeeper.runtime.usecases import UserPrincipal, add_user, confirm, propose
from watchkeeper.triggers import SpecError, check_zone, parse_spec

TENANT = "bench"
SHARED_EXPRS = (("0 9 * * *", "Europe/Paris"), ("0 3 * * *", "America/New_York"),
                ("0,30 8 * * *", "Europe/London"), ("0 17 * * 1-5", "Asia/Tokyo"))
"""The shared shape's four specs, as (expr, zone); :func:`shared_crons` moves them to T."""


def place_zones() -> list[str]:
    """Every zone a new spec may name (:func:`triggers.check_zone`), sorted."""
    out = []
    for name in sorted(zoneinfo.available_timezones()):
        try:
            check_zone(name)
        except SpecError:
            continue
        out.append(name)
    return out


def _weekday(local: datetime) -> int:
    return (local.weekday() + 1) % 7  # cron's day of week: Sunday 0


def distinct_crons(n: int, due: datetime, seed: int = 17) -> list[tuple[str, str]]:
    """``n`` different (expression, zone) pairs that all match the instant ``due``."""
    rng = random.Random(seed)
    zones = place_zones()
    seen: set[tuple[str, str]] = set()
    while len(seen) < n:
        zone = rng.choice(zones)
        local = due.astimezone(zoneinfo.ZoneInfo(zone))
        minutes = sorted({local.minute, *rng.sample(range(60), rng.randint(0, 4))})
        hours = sorted({local.hour, *rng.sample(range(24), rng.randint(0, 3))})
        dom = rng.choice(["*", "*", _list({local.day, rng.randint(1, 28)})])
        month = rng.choice(["*", "*", _list({local.month, rng.randint(1, 12)})])
        dow = rng.choice(["*", "*", _list({_weekday(local), rng.randint(0, 6)})])
        seen.add((f"{_list(minutes)} {_list(hours)} {dom} {month} {dow}", zone))
    return sorted(seen)


def shared_crons(n: int, due: datetime) -> list[tuple[str, str]]:
    """``n`` pairs cycling over :data:`SHARED_EXPRS`' zones, each moved to match ``due``."""
    specs = []
    for _, zone in SHARED_EXPRS:
        local = due.astimezone(zoneinfo.ZoneInfo(zone))
        specs.append((f"{local.minute} {local.hour} * * *", zone))
    return [specs[i % len(specs)] for i in range(n)]


def _list(values: Any) -> str:
    return ",".join(str(v) for v in sorted(values))


def spec_data(expr: str, zone: str, index: int | None) -> dict[str, Any]:
    """A cron spec; ``index`` gives it instructions of its own (``None``: shared ones)."""
    what = "the shared holdings" if index is None else f"the holdings of account {index}"
    return {"version": 1, "trigger": {"type": "cron", "expr": expr, "zone": zone},
            "instructions": f"Review {what}; tell me only what changed."}


@dataclass(frozen=True)
class Seeded:
    """What :func:`bulk_seed` wrote: ids (user id = definition id) and the due instant."""

    ids: list[str]
    next_due_at: datetime


def definition_id(prefix: str, number: int) -> str:
    return f"{prefix}{number:07d}"


async def bulk_seed(dsn: str, crons: Sequence[tuple[str, str]], *, prefix: str,
                    confirmed_at: datetime, distinct: bool, schema: str = "watchkeeper",
                    ) -> Seeded:
    """Write ``len(crons)`` confirmed definitions (one owner each) as propose + confirm at
    ``confirmed_at`` would; return their ids and the first due instant (the same for all).

    Raises:
        AssertionError: the crons are not all first due at one instant.
    """
    parsed: dict[str, Any] = {}
    users, definitions, revisions = [], [], []
    due: datetime | None = None
    ids = []
    for number, (expr, zone) in enumerate(crons):
        key = json.dumps(spec_data(expr, zone, number if distinct else None))
        spec = parsed.get(key)
        if spec is None:
            spec = parsed[key] = parse_spec(json.loads(key))
        first = spec.window(confirmed_at - EPSILON, confirmed_at - EPSILON).next_slot
        assert first is not None
        due = first.scheduled_for if due is None else due
        assert first.scheduled_for == due, (expr, zone, first.scheduled_for, due)
        ident = definition_id(prefix, number)
        ids.append(ident)
        users.append((TENANT, ident, "", "UTC", hashlib.sha256(os.urandom(16)).digest(),
                      confirmed_at))
        definitions.append((TENANT, ident, "user", ident, "active", 1, 1, 1, confirmed_at,
                            confirmed_at - EPSILON, 0, first.scheduled_for, None, confirmed_at,
                            confirmed_at, "calendar", "", None))
        compiled, payload = compiled_columns(spec)
        revisions.append((TENANT, ident, 1, json.dumps(spec.to_json()), spec.spec_hash, None,
                          "confirmed", None, "agent:bench", confirmed_at,
                          f"user:{TENANT}/{ident}", confirmed_at, str(compiled), str(payload)))
    conn = await asyncpg.connect(dsn, server_settings=server_settings(schema))
    try:
        await conn.execute("INSERT INTO tenants VALUES ($1, $2) ON CONFLICT DO NOTHING", TENANT,
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
        await conn.execute("DROP TABLE seed_revisions")
    finally:
        await conn.close()
    assert due is not None
    return Seeded(ids, due)


_USER_COLUMNS = ("tenant_id", "user_id", "display_name", "zone", "token_sha256", "created_at")
_DEFINITION_COLUMNS = (
    "tenant_id", "definition_id", "origin", "owner_user_id", "status", "fence",
    "latest_revision", "effective_revision", "effective_since", "cursor_at", "slots_seen",
    "next_due_at", "paused_at", "created_at", "updated_at", "trigger_kind", "status_note",
    "status_by")
_REVISION_COLUMNS = (
    "tenant_id", "definition_id", "revision", "spec", "spec_hash", "registration", "status",
    "based_on", "proposed_by", "proposed_at", "confirmed_by", "confirmed_at", "compiled",
    "payload")


async def public_seed(db: Database, crons: Sequence[tuple[str, str]], numbers: Sequence[int], *,
                      prefix: str, confirmed_at: datetime, distinct: bool) -> None:
    """Seed the definitions ``numbers`` of ``crons`` through the use cases."""
    clock = FakeClock(confirmed_at)
    for number in numbers:
        expr, zone = crons[number]
        ident = definition_id(prefix, number)
        await add_user(db, clock, TENANT, ident)
        spec = parse_spec(spec_data(expr, zone, number if distinct else None))
        made = await propose(db, clock, tenant_id=TENANT, definition_id=ident,
                             owner_user_id=ident, spec=spec, proposed_by="agent:bench")
        await confirm(db, clock, UserPrincipal(TENANT, ident), definition_id=ident,
                      revision=made.revision, spec_hash=made.spec_hash)


_COMPARE = {
    "users": ("SELECT * FROM users WHERE user_id = ANY($1) ORDER BY user_id", {"token_sha256"}),
    "definitions": ("SELECT * FROM definitions WHERE definition_id = ANY($1) "
                    "ORDER BY definition_id", set()),
    "definition_revisions": ("SELECT * FROM definition_revisions WHERE definition_id = ANY($1) "
                             "ORDER BY definition_id, revision", set()),
    "schedule_events": ("SELECT count(*) AS events FROM schedule_events "
                        "WHERE definition_id = ANY($1)", set()),
}


async def check_bulk(bulk_dsn: str, public_dsn: str, ids: Sequence[str],
                     schema: str = "watchkeeper") -> tuple[bool, str]:
    """Compare every column of the rows of ``ids`` in the two databases (token digests
    aside). Returns (ok, a one-line summary)."""
    differ, rows = 0, 0
    found: dict[str, list[dict[str, Any]]] = {}
    for dsn in (bulk_dsn, public_dsn):
        conn = await asyncpg.connect(dsn, server_settings=server_settings(schema))
        try:
            for table, (query, skip) in _COMPARE.items():
                got = [{k: v for k, v in dict(r).items() if k not in skip}
                       for r in await conn.fetch(query, list(ids))]
                found.setdefault(table, []).append(got)  # type: ignore[arg-type]
        finally:
            await conn.close()
    problems = []
    for table, (bulk, public) in found.items():  # type: ignore[misc]
        rows += len(public)
        if len(bulk) != len(public):
            problems.append(f"{table}: {len(bulk)} rows vs {len(public)}")
            continue
        for a, b in zip(bulk, public, strict=True):
            if a != b:
                differ += 1
                column = next(k for k in sorted({*a, *b}) if a.get(k) != b.get(k))
                problems.append(f"{table}.{column}: {a.get(column, '(no column)')!r} vs "
                                f"{b.get(column, '(no column)')!r}")
    ok = not problems
    return ok, (f"ok ({rows} rows of {len(ids)} definitions, 0 differ)" if ok
                else f"DIFFER ({differ} rows): " + "; ".join(problems[:5]))


def confirmed_before(due: datetime) -> datetime:
    """When the seeded definitions are confirmed: 30 s before their first due instant."""
    return due - timedelta(seconds=30)
