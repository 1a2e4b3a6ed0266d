"""Tick, phase 1: read due definitions and plan each one's decisions.

Reading and planning happen outside any transaction (a binding resolver may do
I/O); each plan carries the fence and cursor it was computed under, and
:mod:`watchkeeper.runtime.engine._admission` rechecks both under a row lock before writing anything.
Only the latest due slot of a definition is a candidate; older missed ones are
recorded once as a ``skipped_superseded`` range (DESIGN "Lateness").
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio

from watchkeeper.triggers import (
    USER_BINDING_ID,
    Binding,
    BindingSetError,
    Delivery,
    DueWindow,
    LatenessVerdict,
    Slot,
    Spec,
    Timing,
    decide_lateness,
    occurrence_timing,
    validate_bindings,
)

from ..store._db import Database
from ..store._specs import spec_from_json
from ._registry import Registry

__all__ = ["FIRST_KEY", "Candidate", "DueDefinition", "DueKey", "Plan", "plan_tick", "read_due"]

log = logging.getLogger("watchkeeper.tick")


@dataclass(frozen=True, slots=True)
class DueDefinition:
    """A due definition as read in phase 1 (the state a plan is computed under)."""

    tenant_id: str
    definition_id: str
    origin: str
    owner_user_id: str | None
    fence: int
    revision: int
    spec_hash: str
    cursor_at: datetime
    slots_seen: int
    spec: Spec
    registration: Mapping[str, Any] | None


@dataclass(frozen=True, slots=True)
class Candidate:
    """The candidate occurrence of one binding."""

    binding: Binding | None  # None for a `run` terminal unit
    tenant_id: str
    binding_id: str
    slot: Slot
    timing: Timing
    lateness: LatenessVerdict
    kind: str = "scheduled"


@dataclass(frozen=True, slots=True)
class Plan:
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


async def read_due(db: Database, now: datetime, limit: int,
                   after: DueKey = FIRST_KEY) -> tuple[list[DueDefinition], DueKey | None]:
    """Up to ``limit`` active definitions with ``next_due_at <= now``, oldest first,
    strictly after the keyset position ``after``; and the position to continue from
    (``None`` when this was the last page).

    Specs are fetched and parsed once per distinct ``spec_hash`` per process.
    """
    rows = await db.fetch("definitions_due", now, limit, *after)
    last = rows[-1] if len(rows) == limit else None
    position = None if last is None else (last["next_due_at"], last["tenant_id"], last["definition_id"])
    missing = list({r["spec_hash"] for r in rows} - _KNOWN.keys())
    if missing:
        if len(_KNOWN) > 65_536:
            _KNOWN.clear()
        for stored in await db.fetch("specs_by_hash", missing):
            _KNOWN[stored["spec_hash"]] = (
                spec_from_json(stored["spec_hash"], stored["spec"]), stored["registration"])
    due = [
        DueDefinition(
            r["tenant_id"], r["definition_id"], r["origin"], r["owner_user_id"], r["fence"],
            r["effective_revision"], r["spec_hash"], r["cursor_at"], r["slots_seen"],
            *_KNOWN[r["spec_hash"]],
        )
        for r in rows
    ]
    return due, position


_KNOWN: dict[str, tuple[Spec, Mapping[str, Any] | None]] = {}


async def plan_tick(due: Sequence[DueDefinition], now: datetime, registry: Registry) -> list[Plan]:
    """Plan every due definition; resolvers of operator definitions are awaited here.

    Definitions that this process cannot resolve (a resolver or ``run`` callable it
    does not have) are left for a supervisor that has them.
    """
    windows: dict[tuple[str, datetime, int], DueWindow] = {}
    plans = []
    for item in due:
        try:
            key = (item.spec_hash, item.cursor_at, item.slots_seen)
            window = windows.get(key)
            if window is None:
                window = windows[key] = await _window(item, now)
            units = await units_of(item, registry)
            if units is None:
                continue
            plans.append(_plan(item, window, units, now))
        except Exception as exc:  # noqa: BLE001 - one bad definition must not stop the tick
            log.exception("cannot plan %s/%s", item.tenant_id, item.definition_id)
            empty = DueWindow(0, None, None, None, None, None)
            plans.append(Plan(item, empty, (), (), failure=f"{type(exc).__name__}: {exc}"))
    return plans


async def _window(item: DueDefinition, now: datetime) -> DueWindow:
    """The due window; a cron window spanning over a day (a long outage) is enumerated in
    a worker thread so lease renewals on the event loop keep their timing."""
    if now - item.cursor_at <= timedelta(days=1):
        return item.spec.window(item.cursor_at, now, item.slots_seen)
    return await anyio.to_thread.run_sync(item.spec.window, item.cursor_at, now, item.slots_seen)


Unit = tuple[str, str, Binding | None]


async def units_of(item: DueDefinition, registry: Registry) -> list[Unit] | str | None:
    """The fan-out units; a string is a refusal reason; ``None`` means not ours."""
    if item.origin == "user":
        return [(item.tenant_id, USER_BINDING_ID, _user_binding(item))]
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


_USER_BINDINGS: dict[tuple[str, str, str], Binding] = {}


def _user_binding(item: DueDefinition) -> Binding:
    """The one binding of a user definition, built once per (spec, tenant, owner)."""
    assert item.owner_user_id is not None
    key = (item.spec_hash, item.tenant_id, item.owner_user_id)
    binding = _USER_BINDINGS.get(key)
    if binding is None:
        if len(_USER_BINDINGS) > 65_536:
            _USER_BINDINGS.clear()
        spec = item.spec
        binding = _USER_BINDINGS[key] = Binding(
            tenant_id=item.tenant_id, binding_id=USER_BINDING_ID,
            owner_user_id=item.owner_user_id, agent=spec.agent.name, message=spec.instructions,
            params=dict(spec.agent.params), delivery=tuple(spec.delivery),
            audiences=tuple(spec.audiences) or None)
    return binding


def _plan(item: DueDefinition, window: DueWindow, units: list[Unit] | str, now: datetime) -> Plan:
    if isinstance(units, str):
        return Plan(item, window, (), (), units)
    pairs = tuple((t, b) for t, b, _ in units)
    slot = window.candidate
    if slot is None:
        return Plan(item, window, (), pairs)
    spec = item.spec
    candidates = []
    for tenant_id, binding_id, binding in units:
        timing = occurrence_timing(
            slot, jitter=spec.jitter, late_grace=spec.lateness.late_grace,
            key_parts=(item.definition_id, tenant_id, binding_id, slot.key),
        )
        verdict = decide_lateness(slot, timing, now, spec.lateness.policy)
        candidates.append(Candidate(binding, tenant_id, binding_id, slot, timing, verdict))
    return Plan(item, window, tuple(candidates), pairs)


def delivery_json(deliveries: Sequence[Delivery]) -> list[dict[str, Any]]:
    """Deliveries as stored on a task."""
    return [d.model_dump(mode="json") for d in deliveries]
