"""Tick, phase 1: read due definitions and plan each one's decisions.

Reading and planning happen outside any transaction (a binding resolver may do
I/O); each plan carries the fence and cursor it was computed under, and
:mod:`watchkeeper.runtime.engine._admission` rechecks both under a row lock before writing anything.
Only the latest due slot of a definition is a candidate; older missed ones are
recorded once as a ``skipped_superseded`` range (DESIGN "Lateness").
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

import anyio
import orjson

from watchkeeper.triggers import (
    COMPILED_VERSION,
    USER_BINDING_ID,
    Binding,
    BindingSetError,
    CompiledSpec,
    Delivery,
    DueWindow,
    LatenessVerdict,
    Slot,
    Timing,
    decide_lateness,
    format_utc,
    occurrence_timing,
    user_payload,
    validate_bindings,
)

from ..store._db import Connection, Database, JsonText
from ..store._specs import spec_from_json
from ._gc import gc_paused
from ._registry import Registry

__all__ = ["FIRST_KEY", "Candidate", "DueDefinition", "DueKey", "Owner", "Plan", "compiled_specs",
           "due_definition", "epoch_us", "lock_due", "plan_one", "plan_tick", "read_due", "schedule_stamp",
           "trusted_schedule", "units_of", "wall_us"]

log = logging.getLogger("watchkeeper.tick")


class DueDefinition(NamedTuple):
    """A due definition as read in phase 1 (the state a plan is computed under).

    Attributes:
        compiled: what planning and admission need of the effective revision's spec.
        busy: whether the definition's owner binding has a task that has not ended, as
            read under the row lock (``None``: not read; admission reads the active
            tasks of every binding then).
    """

    tenant_id: str
    definition_id: str
    origin: str
    owner_user_id: str | None
    fence: int
    revision: int
    spec_hash: str
    cursor_at: datetime
    slots_seen: int
    compiled: CompiledSpec
    registration: Mapping[str, Any] | None
    busy: bool | None = None


class Owner(NamedTuple):
    """The one binding of a user-confirmed definition: its owner. The task's payload
    (agent, instructions, params, delivery, audiences) is the revision's own
    (``definition_revisions.payload``), copied in SQL by the admission statement."""

    user_id: str


class Candidate(NamedTuple):
    """The candidate occurrence of one binding.

    Attributes:
        binding: an operator binding (its payload is its own), the :class:`Owner` of a
            user-confirmed definition (the payload is the revision's), or ``None`` for a
            ``run`` terminal unit (no task).
    """

    binding: Binding | Owner | None
    tenant_id: str
    binding_id: str
    slot: Slot
    timing: Timing
    lateness: LatenessVerdict
    kind: str = "scheduled"


class Plan(NamedTuple):
    """What one tick intends for one definition.

    Attributes:
        window: the due slots (summarized) and the next one.
        candidates: one per binding when a slot is due; empty otherwise.
        units: the (tenant_id, binding_id) pairs the definition fans out to.
        bindings_error: why the resolved binding set was refused (nothing is claimed).
        manual: an explicit trigger-now: overrun is bypassed and the cursor is untouched.
        failure: why the definition could not be planned at all (it becomes ``failed``:
            a new revision is needed), else ``None``.
    """

    due: DueDefinition
    window: DueWindow
    candidates: tuple[Candidate, ...]
    units: tuple[tuple[str, str], ...]
    bindings_error: str | None = None
    manual: bool = False
    failure: str | None = None

    @property
    def new_cursor(self) -> datetime:
        """The cursor after this plan: the last due slot's instant."""
        return self.window.last.scheduled_for if self.window.last else self.due.cursor_at

    @property
    def next_due_at(self) -> datetime | None:
        """The instant the definition is next due, or ``None`` when it ended."""
        return None if self.window.next_slot is None else self.window.next_slot.scheduled_for


DueKey = tuple[datetime, str, str]
FIRST_KEY: DueKey = (datetime.min.replace(tzinfo=UTC), "", "")


async def lock_due(tx: Connection, now: datetime, limit: int, after: DueKey = FIRST_KEY
                   ) -> tuple[list[Any], dict[str, CompiledSpec], DueKey | None]:
    """Phase A: lock up to ``limit`` due user-confirmed calendar definitions (rows another
    replica holds are skipped: it admits them), oldest first, strictly after the keyset
    position ``after``. Returns the rows (``definitions_due_lock``), their compiled specs
    by spec_hash, and the position to continue from (``None`` after the last page).

    Their planning needs no I/O, so it happens inside ``tx``, under these locks.
    """
    rows = await tx.fetch("definitions_due_lock", now, limit, *after)
    last = rows[-1] if len(rows) == limit else None
    position = None if last is None else (last["next_due_at"], last["tenant_id"], last["definition_id"])
    return rows, await compiled_specs(tx, rows), position


def due_definition(row: Any, compiled: CompiledSpec) -> DueDefinition:
    """A locked row of :func:`lock_due` as a due definition for the general planning."""
    return DueDefinition(row["tenant_id"], row["definition_id"], "user", row["owner_user_id"],
                         row["fence"], row["effective_revision"], row["spec_hash"],
                         row["cursor_at"], row["slots_seen"], compiled, None, row["busy"])


async def read_due(db: Database, now: datetime, limit: int, after: DueKey = FIRST_KEY, *,
                   origin: str = "operator") -> tuple[list[DueDefinition], DueKey | None]:
    """Phase B: up to ``limit`` due calendar definitions of ``origin`` (the tick reads
    operator-registered ones here), unlocked (a binding resolver may do I/O before
    :func:`~._admission.admit` locks and rechecks them), oldest first, strictly after
    ``after``; and the position to continue from."""
    async with db.connection() as conn:
        rows = await conn.fetch("definitions_due", now, limit, *after, origin)
        compiled = await compiled_specs(conn, rows)
        missing = list({r["spec_hash"] for r in rows} - _REGISTRATIONS.keys())
        if missing:
            if len(_REGISTRATIONS) > 4096:
                _REGISTRATIONS.clear()
            for stored in await conn.fetch("registrations_by_hash", missing):
                _REGISTRATIONS[stored["spec_hash"]] = stored["registration"]
    last = rows[-1] if len(rows) == limit else None
    position = None if last is None else (last["next_due_at"], last["tenant_id"], last["definition_id"])
    due = [
        DueDefinition(r["tenant_id"], r["definition_id"], r["origin"], r["owner_user_id"],
                      r["fence"], r["effective_revision"], r["spec_hash"], r["cursor_at"],
                      r["slots_seen"], compiled[r["spec_hash"]], _REGISTRATIONS[r["spec_hash"]])
        for r in rows
    ]
    return due, position


_REGISTRATIONS: dict[str, Mapping[str, Any] | None] = {}
_COMPILED: dict[str, CompiledSpec] = {}
_COMPILED_LIMIT = 4096
"""Compiled specs kept per process, by spec_hash: definitions sharing a spec decode it
once; a chat app's distinct specs each decode theirs (a few microseconds) and the cache
stays bounded (DESIGN "Scale": a supervisor's memory must not grow with definitions)."""


async def compiled_specs(conn: Connection, rows: Sequence[Any]) -> dict[str, CompiledSpec]:
    """The compiled spec of each row's ``spec_hash`` (rows carry ``compiled`` as JSON
    text). A revision written before compiled specs existed (NULL, or an older layout)
    is compiled from its stored spec once, and the result stored for the next tick."""
    out: dict[str, CompiledSpec] = {}
    stale: list[str] = []
    for row in rows:
        digest = row["spec_hash"]
        if digest in out:
            continue
        text = row["compiled"]
        compiled = None if text is None else _COMPILED.get(digest)
        if compiled is None:
            compiled = None if text is None else CompiledSpec.from_json(orjson.loads(text))
            if compiled is None:
                stale.append(digest)
                continue
            if len(_COMPILED) >= _COMPILED_LIMIT:
                _COMPILED.clear()
            _COMPILED[digest] = compiled
        out[digest] = compiled
    if stale:
        hashes, compiled_json, payloads = [], [], []
        for stored in await conn.fetch("specs_by_hash", stale):
            spec = spec_from_json(stored["spec_hash"], stored["spec"])
            out[stored["spec_hash"]] = spec.compiled
            hashes.append(stored["spec_hash"])
            compiled_json.append(JsonText(json.dumps(spec.compiled.to_json())))
            payloads.append(JsonText(json.dumps(user_payload(spec))))
        await conn.execute("revisions_compile", hashes, compiled_json, payloads,
                           COMPILED_VERSION)
    return out


async def plan_tick(due: Sequence[DueDefinition], now: datetime, registry: Registry) -> list[Plan]:
    """Plan every due definition; resolvers of operator definitions are awaited here.

    Definitions that this process cannot resolve (a resolver or ``run`` callable it
    does not have) are left for a supervisor that has them. A window over a long outage
    is enumerated in a worker thread, so lease renewals on the event loop keep their
    timing.
    """
    windows: dict[tuple[str, datetime, int], DueWindow] = {}
    recent = now - _LONG_WINDOW
    if all(item.origin == "user" and item.cursor_at >= recent for item in due):
        with gc_paused():  # the tick's common case: nothing to await
            return [plan_one(item, now, windows) for item in due]
    plans = []
    for item in due:
        if item.origin == "user" and item.cursor_at >= recent:
            plans.append(plan_one(item, now, windows))
            continue
        try:
            key = (item.spec_hash, item.cursor_at, item.slots_seen)
            window = windows.get(key)
            if window is None:
                window = windows[key] = await anyio.to_thread.run_sync(
                    item.compiled.window, item.cursor_at, now, item.slots_seen)
            units = await units_of(item, registry)
            if units is None:
                continue
            plans.append(_plan(item, window, units, now))
        except Exception as exc:  # noqa: BLE001 - one bad definition must not stop the tick
            plans.append(_failed(item, exc))
    return plans


def plan_one(item: DueDefinition, now: datetime,
             windows: dict[tuple[str, datetime, int], DueWindow]) -> Plan:
    """The plan of a user-confirmed definition (no I/O: its one binding is its owner),
    its window shared through ``windows`` with definitions of the same spec and cursor."""
    try:
        key = (item.spec_hash, item.cursor_at, item.slots_seen)
        window = windows.get(key)
        if window is None:
            window = windows[key] = item.compiled.window(item.cursor_at, now, item.slots_seen)
        return _plan(item, window, [(item.tenant_id, USER_BINDING_ID,
                                     Owner(item.owner_user_id or ""))], now)
    except Exception as exc:  # noqa: BLE001 - one bad definition must not stop the tick
        return _failed(item, exc)


def _failed(item: DueDefinition, exc: Exception) -> Plan:
    log.exception("cannot plan %s/%s", item.tenant_id, item.definition_id, exc_info=exc)
    empty = DueWindow(0, None, None, None, None, None)
    return Plan(item, empty, (), (), failure=f"{type(exc).__name__}: {exc}")


_LONG_WINDOW = timedelta(days=1)
"""A cron window longer than this (an outage) is enumerated in a worker thread."""


Unit = tuple[str, str, Binding | Owner | None]


async def units_of(item: DueDefinition, registry: Registry) -> list[Unit] | str | None:
    """The fan-out units; a string is a refusal reason; ``None`` means not ours."""
    if item.origin == "user":
        assert item.owner_user_id is not None
        return [(item.tenant_id, USER_BINDING_ID, Owner(item.owner_user_id))]
    registration = item.registration or {}
    if registration.get("terminal") == "run":
        if registry.get(item.definition_id) is None:
            return None
        tenants = registration.get("tenants")
        return [(t, t, None) for t in tenants] if tenants else [(item.tenant_id, "*", None)]
    if "bindings" in registration:
        raw: Sequence[Any] = registration["bindings"]
    else:
        local = registry.get(item.definition_id)
        if local is None or not callable(local.bindings):
            return None
        try:
            raw = await local.bindings()
        except Exception as exc:  # noqa: BLE001 - a host resolver's failure is recorded, not fatal
            log.warning("resolver of %s failed: %r", item.definition_id, exc)
            return f"binding resolver failed: {type(exc).__name__}: {exc}"
    try:
        bindings = validate_bindings(raw)
    except BindingSetError as exc:
        return exc.problem
    except Exception as exc:  # noqa: BLE001 - whatever a host resolver returned
        return f"binding resolver returned an unusable value: {type(exc).__name__}: {exc}"
    return [(b.tenant_id, b.binding_id, b) for b in bindings]


def _plan(item: DueDefinition, window: DueWindow, units: list[Unit] | str, now: datetime) -> Plan:
    if isinstance(units, str):
        return Plan(item, window, (), (), units)
    pairs = tuple([(t, b) for t, b, _ in units])
    slot = window.candidate
    if slot is None:
        return Plan(item, window, (), pairs)
    spec = item.compiled
    candidates = []
    for tenant_id, binding_id, binding in units:
        timing = occurrence_timing(slot, jitter=spec.jitter, late_grace=spec.late_grace,
                                   key_parts=(item.definition_id, tenant_id, binding_id, slot.key))
        verdict = decide_lateness(slot, timing, now, spec.late_policy)
        candidates.append(Candidate(binding, tenant_id, binding_id, slot, timing, verdict))
    return Plan(item, window, tuple(candidates), pairs)


def trusted_schedule(definition_id: str, revision: int, slot: str, kind: str,
                     scheduled_for: datetime) -> dict[str, Any]:
    """The schedule fields the runtime stamps into a task's params (``params.schedule``);
    bindings may not set this key, so an agent can trust it."""
    return {"definition_id": definition_id, "revision": revision, "slot": slot, "kind": kind,
            "scheduled_for": format_utc(scheduled_for)}


def schedule_stamp(definition_id: str, revision: int, slot: str, kind: str,
                   scheduled_for: datetime) -> str:
    """``{"schedule": trusted_schedule(...)}`` as JSON text, the same as ``json.dumps``
    writes it, built without the encoder when no string needs escaping (identifiers,
    slot keys and zone names never do; anything else goes through ``json.dumps``).
    The part after the revision is remembered per (slot, kind, instant): the
    definitions due at one instant share it (``tests/test_quick_rows.py`` checks the
    text against ``json.dumps``)."""
    tail = _TAILS.get((slot, kind, scheduled_for))
    if tail is None:
        if not (_plain_json(slot) and _plain_json(kind)):
            return json.dumps({"schedule": trusted_schedule(definition_id, revision, slot, kind,
                                                            scheduled_for)})
        if len(_TAILS) >= 4096:
            _TAILS.clear()
        tail = _TAILS[(slot, kind, scheduled_for)] = (
            f', "slot": "{slot}", "kind": "{kind}", '
            f'"scheduled_for": "{format_utc(scheduled_for)}"}}}}')
    if not _plain_json(definition_id):
        return json.dumps({"schedule": trusted_schedule(definition_id, revision, slot, kind,
                                                        scheduled_for)})
    return f'{{"schedule": {{"definition_id": "{definition_id}", "revision": {int(revision)}' + tail


_TAILS: dict[tuple[str, str, datetime], str] = {}


def _plain_json(text: str) -> bool:
    """Whether ``json.dumps`` writes ``text`` as itself between quotes (ASCII printable,
    no quote, no backslash)."""
    return text.isascii() and text.isprintable() and '"' not in text and "\\" not in text


def epoch_us(instant: datetime | None) -> int | None:
    """An aware instant as ``wk_stage_admission`` stages it: whole microseconds since
    1970-01-01 00:00 UTC (``None`` stays ``None``); ``admission_write`` makes it an exact
    timestamptz again."""
    if instant is None:
        return None
    if instant.tzinfo is not UTC:
        instant = instant.astimezone(UTC)
    delta = instant - _EPOCH  # (timedelta // timedelta builds big ints: slower)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def wall_us(wall: datetime) -> int:
    """A naive wall time as staged: whole microseconds since 1970-01-01 00:00."""
    delta = wall - _WALL_EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_WALL_EPOCH = datetime(1970, 1, 1)  # noqa: DTZ001 - the epoch of naive wall times


def delivery_json(deliveries: Sequence[Delivery]) -> list[dict[str, Any]]:
    """Deliveries as stored on a task."""
    return [d.model_dump(mode="json") for d in deliveries]
