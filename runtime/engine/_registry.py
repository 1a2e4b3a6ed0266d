"""Operator-registered definitions: a cadence, a fan-out and a terminal (seed 001).

The host application registers :class:`ScheduleDef` objects from code (or static
ones from TOML with ``watchkeeper register``). Registering the same id again
replaces the definition, never duplicates it; re-registering an identical one is a
no-op. The terminal is exactly one of ``bindings`` (an agent task per binding,
through the same admission gate as user work) or ``run`` (a plain async callable
for housekeeping: no user, no agent, no task; still claimed per occurrence).
"""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from watchkeeper.triggers import (
    OPERATOR_TENANT,
    Binding,
    LatePolicy,
    Limits,
    OverrunPolicy,
    Spec,
    SpecError,
    SpecProblems,
    canonical_json,
    check_identifier,
    parse_spec,
    validate_bindings,
)

from .._errors import Conflict, NotFound
from ..store._db import Connection, Database
from ..store._specs import compiled_columns
from ._clock import Clock
from ._ledger import EPSILON, check_destinations, record_replaced_span

__all__ = ["Registry", "RunContext", "ScheduleDef", "register"]

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class RunContext:
    """What a ``run`` terminal receives: the tenant it fans out to (or ``None``), the
    occurrence's slot key and its resolved UTC instant."""

    definition_id: str
    tenant_id: str | None
    slot: str
    scheduled_for: datetime


BindingsResolver = Callable[[], Awaitable[Sequence[Binding | Mapping[str, Any]]]]
RunFn = Callable[[RunContext], Awaitable[None]]


@dataclass(frozen=True, kw_only=True)
class ScheduleDef:
    """An operator-registered definition.

    Exactly one of ``cron`` (with a required ``zone``) and ``every`` (a duration,
    anchored at ``anchor``, default the Unix epoch) gives the cadence; exactly one of
    ``bindings`` (a static list or an async resolver called at tick time) and ``run``
    gives the terminal. ``tenants`` optionally fans a ``run`` out per tenant.
    ``stale_claim_after`` bounds a ``run``: size it above the callable's worst case.

    Raises:
        SpecError: on construction, listing every problem: both or neither cadence or
            terminal, or any invalid field (the same checks as a user spec, named by
            this class's fields).
    """

    id: str
    cron: str | None = None
    zone: str | None = None
    every: timedelta | None = None
    anchor: datetime = EPOCH
    dst_gap: str = "skip"
    jitter: timedelta = timedelta(0)
    overrun: OverrunPolicy = OverrunPolicy.SKIP
    late_policy: LatePolicy = LatePolicy.SKIP_EXPIRED
    late_grace: timedelta = timedelta(minutes=10)
    limits: Limits = field(default_factory=Limits)
    instructions: str = ""
    bindings: Sequence[Binding | Mapping[str, Any]] | BindingsResolver | None = None
    run: RunFn | None = None
    tenants: Sequence[str] | None = None
    stale_claim_after: timedelta = timedelta(minutes=2)
    min_interval: timedelta = timedelta(seconds=60)

    def __post_init__(self) -> None:
        found = SpecProblems()
        with found.check():
            check_identifier(self.id, "id")
        cadence = (self.cron is None) != (self.every is None)
        if not cadence:
            found.add("cron", "declare exactly one of cron and every.",
                      "remove one; both or neither is ambiguous.")
        if (self.bindings is None) == (self.run is None):
            found.add("bindings", "declare exactly one terminal: bindings or run.",
                      "an agent schedule uses bindings; housekeeping uses run.")
        if self.run is not None and not inspect.iscoroutinefunction(self.run):
            found.add("run", "must be an async function.", "declare it with 'async def'.")
        if self.bindings is not None and not callable(self.bindings):
            with found.check():
                validate_bindings(self.bindings)
        if self.tenants is not None:
            with found.check():
                _check_tenants(self.tenants)
        if cadence:
            with found.check():
                self.spec()  # validates cadence and policies
        found.raise_if_any()

    @property
    def static_bindings(self) -> tuple[Binding, ...] | None:
        """The bindings when they are a static list, else ``None``."""
        if self.bindings is None or callable(self.bindings):
            return None
        return validate_bindings(self.bindings)

    def spec(self) -> Spec:
        """The calendar and policy part as a version-1 spec.

        Raises:
            SpecError: naming this class's fields (``zone``, ``late_policy``, ...), not
                the spec's (``trigger.zone``, ``lateness.policy``).
        """
        if self.cron is not None:
            trigger: dict[str, Any] = {"type": "cron", "expr": self.cron, "zone": self.zone,
                                       "dst_gap": self.dst_gap}
        else:
            trigger = {"type": "interval", "every": self.every, "anchor": self.anchor}
        try:
            return parse_spec({
                "version": 1, "trigger": trigger, "jitter": self.jitter,
                "overrun": self.overrun,
                "lateness": {"policy": self.late_policy, "late_grace": self.late_grace},
                "limits": self.limits.model_dump(), "instructions": self.instructions,
                "title": self.id,
            }, min_interval=self.min_interval)
        except SpecError as exc:
            raise exc.renamed(lambda field: _SPEC_FIELDS.get(field, field)) from exc

    def registration(self) -> dict[str, Any]:
        """The terminal and fan-out as JSON-compatible data (callables by name)."""
        if self.run is not None:
            return {"terminal": "run", "run": _qualname(self.run),
                    "tenants": list(self.tenants) if self.tenants is not None else None,
                    "stale_claim_after": self.stale_claim_after.total_seconds()}
        static = self.static_bindings
        if static is not None:
            return {"terminal": "agent",
                    "bindings": [b.model_dump(mode="json") for b in static]}
        assert callable(self.bindings)
        return {"terminal": "agent", "resolver": _qualname(self.bindings)}

    def spec_hash(self) -> str:
        """Hash over the spec's effective part and the registration."""
        text = canonical_json({"spec": self.spec().effective(), "registration": self.registration()})
        return hashlib.sha256(text.encode()).hexdigest()


_SPEC_FIELDS = {
    "trigger.expr": "cron", "trigger.zone": "zone", "trigger.dst_gap": "dst_gap",
    "trigger.every": "every", "trigger.anchor": "anchor", "lateness.policy": "late_policy",
    "lateness.late_grace": "late_grace",
}
"""A spec field -> the :class:`ScheduleDef` field it comes from (others keep their name)."""


def _check_tenants(tenants: Sequence[str]) -> None:
    """A run terminal's fan-out: unique, valid, not reserved."""
    if isinstance(tenants, str):
        raise SpecError("tenants", "must be a list of tenant ids.", "write tenants = ['acme'].")
    for tenant in tenants:
        check_identifier(tenant, "tenants")
        if tenant.startswith("_"):
            raise SpecError("tenants", f"{tenant!r} is reserved.", "use real tenant ids.")
    if len(set(tenants)) != len(tenants):
        raise SpecError("tenants", "lists a tenant twice.", "list each tenant once.")


def _qualname(fn: Callable[..., Any]) -> str:
    return f"{fn.__module__}:{getattr(fn, '__qualname__', repr(fn))}"


class Registry:
    """The operator definitions registered in this process, by id."""

    def __init__(self, defs: Sequence[ScheduleDef] = ()) -> None:
        self._defs: dict[str, ScheduleDef] = {}
        for item in defs:
            self.add(item)

    def add(self, definition: ScheduleDef) -> None:
        """Add or replace a definition by id."""
        self._defs[definition.id] = definition

    def get(self, definition_id: str) -> ScheduleDef | None:
        """The in-process definition, or ``None`` if this process does not have it."""
        return self._defs.get(definition_id)

    def __iter__(self) -> Any:
        return iter(self._defs.values())

    def __len__(self) -> int:
        return len(self._defs)


async def _require_owners(tx: Connection, definition: ScheduleDef) -> None:
    """Static bindings must name users that exist (no synthetic actor)."""
    static = definition.static_bindings or ()
    pairs = sorted({(b.tenant_id, b.owner_user_id) for b in static})
    if not pairs:
        return
    rows = await tx.fetch("users_existing", [t for t, _ in pairs], [u for _, u in pairs])
    missing = set(pairs) - {(r["tenant_id"], r["user_id"]) for r in rows}
    if missing:
        first = sorted(missing)[0]
        raise NotFound(f"{definition.id}: owner user(s) {', '.join(f'{t}/{u}' for t, u in sorted(missing))}"
                       f" do not exist; create them first, e.g. "
                       f"'watchkeeper users add {first[0]} {first[1]}'")


async def register(db: Database, clock: Clock, definition: ScheduleDef) -> int:
    """Store ``definition`` under the operator pseudo-tenant; return its effective
    revision. Re-registering an identical definition changes nothing; a changed one
    becomes a new revision, effective at once (fence incremented, no slot before now).

    Raises:
        Conflict: the id is used by a user-confirmed definition.
        Conflict: the definition has no occurrence after now.
        NotFound: a static binding's owner user does not exist.
        SpecError: a static binding's webhook destination names no endpoint of its tenant.
    """
    now = clock.now()
    spec, digest = definition.spec(), definition.spec_hash()
    async with db.transaction() as tx:
        if await tx.fetchval("definition_id_is_user", definition.id) is not None:
            raise Conflict(f"{definition.id!r} is already a user definition id")
        await _require_owners(tx, definition)
        for index, binding in enumerate(definition.static_bindings or ()):
            await check_destinations(tx, binding.tenant_id, binding.delivery,
                                     f"{definition.id}.bindings.{index}.delivery")
        row = await tx.fetchrow("definition_lock", OPERATOR_TENANT, definition.id)
        if row is None:
            await tx.execute("tenant_ensure", OPERATOR_TENANT, now)
            await tx.execute("definition_insert", OPERATOR_TENANT, definition.id, "operator",
                             None, now)
            row = await tx.fetchrow("definition_lock", OPERATOR_TENANT, definition.id)
            assert row is not None
        elif row["effective_revision"] is not None:
            current = await tx.fetchrow("revision_get", OPERATOR_TENANT, definition.id,
                                        row["effective_revision"])
            if current is not None and current["spec_hash"] == digest:
                # unchanged: a no-op; a cancelled one stays cancelled (a restart of the host
                # that still registers it must not revive what an operator ended)
                return int(row["effective_revision"])
        window = spec.window(now - EPSILON, now - EPSILON)
        if window.next_slot is None:
            raise Conflict(f"{definition.id} has no occurrence after {now.isoformat()}")
        revision = row["latest_revision"] + 1
        await record_replaced_span(tx, row, now, "operator")
        await tx.execute("revision_insert", OPERATOR_TENANT, definition.id, revision, spec.to_json(),
                         digest, definition.registration(), "registered", None, "operator", now,
                         "operator", now, *compiled_columns(spec))
        await tx.execute("definition_set_latest", OPERATOR_TENANT, definition.id, revision, now)
        await tx.execute("revisions_retire", OPERATOR_TENANT, definition.id, revision)
        status = "paused" if row["status"] == "paused" else "active"
        await tx.execute("definition_make_effective", OPERATOR_TENANT, definition.id, revision, now,
                         now - EPSILON, window.next_slot.scheduled_for, status, "calendar")
    return revision
