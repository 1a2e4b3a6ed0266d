"""Users, definitions and revisions: propose, confirm, pause, resume, cancel.

DESIGN "Definitions, revisions, confirmation": a chat agent proposes a revision;
only the owner user, authenticated by a token, confirms it by presenting the
``spec_hash`` they were shown. Only the confirmed (effective) revision creates
tasks. Every confirm / pause / resume / cancel increments the definition's fence;
admission discards anything computed under an older fence.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from watchkeeper.triggers import (
    EventKind,
    Spec,
    SpecError,
    check_identifier,
)

from .._errors import Conflict, NotFound
from ..engine._clock import Clock
from ..engine._ledger import EPSILON, check_destinations, record_replaced_span, record_span
from ..store._db import Connection, Database
from ..store._specs import compiled_columns, spec_from_row
from ._principals import Actor, UserPrincipal, check_tenant

__all__ = [
    "Confirmation",
    "Proposal",
    "cancel",
    "confirm",
    "pause",
    "propose",
    "reject",
    "resume",
]

@dataclass(frozen=True, slots=True)
class Proposal:
    """The answer to a proposal.

    Attributes:
        revision: the new revision number.
        spec_hash: what the owner must present to confirm it.
        needs_confirmation: False for a descriptive-only edit of the effective
            revision, which took effect at once.
    """

    tenant_id: str
    definition_id: str
    revision: int
    spec_hash: str
    needs_confirmation: bool


async def propose(db: Database, clock: Clock, *, tenant_id: str, definition_id: str,
                  owner_user_id: str, spec: Spec, proposed_by: str,
                  based_on: int | None = None, replay: bool = False) -> Proposal:
    """Record a proposed revision (status ``proposed``); nothing runs until confirmed.

    Args:
        proposed_by: the proposing agent principal (free text, for the audit trail).
        based_on: the revision the edit started from; required once the definition
            exists, and it must be the latest revision (optimistic concurrency).

    Raises:
        SpecError: invalid ids, or a webhook destination that names no endpoint of the
            tenant (``delivery.<i>.destination``).
        NotFound: the owner user does not exist.
        Conflict: ``based_on`` is stale or missing, the owner differs, the definition
            is cancelled, or the id belongs to an operator-registered definition.
    """
    check_tenant(tenant_id, replay)
    check_identifier(definition_id, "definition_id")
    check_identifier(owner_user_id, "owner")
    now = clock.now()
    async with db.transaction() as tx:
        if await tx.fetchrow("user_get", tenant_id, owner_user_id) is None:
            raise NotFound(f"no user {tenant_id}/{owner_user_id}; create it with "
                           f"'watchkeeper users add {tenant_id} {owner_user_id}'")
        if await tx.fetchval("definition_id_is_operator", definition_id) is not None:
            raise Conflict(f"{definition_id!r} is an operator-registered definition id")
        row = await tx.fetchrow("definition_lock", tenant_id, definition_id)
        if row is None:
            await tx.execute("definition_insert", tenant_id, definition_id, "user", owner_user_id, now)
            row = await tx.fetchrow("definition_lock", tenant_id, definition_id)
            assert row is not None
        _check_proposal(row, owner_user_id, based_on)
        await check_destinations(tx, tenant_id, spec.delivery)
        revision = row["latest_revision"] + 1
        descriptive = await _effective_hash(tx, row) == spec.spec_hash
        confirmer = await _confirmer(tx, row) if descriptive else None
        await tx.execute(
            "revision_insert", tenant_id, definition_id, revision, spec.to_json(), spec.spec_hash,
            None, "confirmed" if descriptive else "proposed", based_on, proposed_by, now,
            confirmer, now if descriptive else None, *compiled_columns(spec),
        )
        await tx.execute("definition_set_latest", tenant_id, definition_id, revision, now)
        if descriptive:
            await tx.execute("revisions_retire", tenant_id, definition_id, revision)
            await tx.execute("definition_set_descriptive", tenant_id, definition_id, revision, now)
    return Proposal(tenant_id, definition_id, revision, spec.spec_hash, not descriptive)


def _check_proposal(row: Any, owner_user_id: str, based_on: int | None) -> None:
    if row["owner_user_id"] != owner_user_id:
        raise Conflict(f"definition {row['definition_id']} belongs to {row['owner_user_id']}")
    if row["status"] == "cancelled":
        raise Conflict(f"definition {row['definition_id']} is cancelled; propose a new id")
    latest = row["latest_revision"]
    if latest and based_on is None:
        raise Conflict(
            f"definition {row['definition_id']} exists (revision {latest}); an edit must say "
            f"which revision it is based on: propose again based on revision {latest} "
            f"(based_on = {latest}; on the CLI --based-on {latest})."
        )
    if not latest and based_on is not None:
        raise Conflict(
            f"definition {row['definition_id']} has no revision yet; your proposal is based on "
            f"{based_on}. Propose it without based_on (on the CLI without --based-on)."
        )
    if latest and based_on != latest:
        raise Conflict(
            f"definition {row['definition_id']} is at revision {latest}; your edit is based on "
            f"{based_on}. Re-read it and propose again based on revision {latest} (based_on = "
            f"{latest}; on the CLI --based-on {latest})."
        )


async def _effective_hash(tx: Connection, row: Any) -> str | None:
    if row["effective_revision"] is None:
        return None
    rev = await tx.fetchrow("revision_get", row["tenant_id"], row["definition_id"],
                            row["effective_revision"])
    return None if rev is None else rev["spec_hash"]


async def _confirmer(tx: Connection, row: Any) -> str | None:
    rev = await tx.fetchrow("revision_get", row["tenant_id"], row["definition_id"],
                            row["effective_revision"])
    return None if rev is None else rev["confirmed_by"]


@dataclass(frozen=True, slots=True)
class Confirmation:
    """The answer to a confirmation: the revision is now effective.

    Attributes:
        fence: the definition's new fence.
        effective_since: the confirmation instant; no slot before it is ever produced.
        next_due_at: the first occurrence's instant (UTC), or None when paused.
    """

    revision: int
    fence: int
    effective_since: datetime
    next_due_at: datetime | None


async def confirm(db: Database, clock: Clock, principal: UserPrincipal, *, definition_id: str,
                  revision: int, spec_hash: str) -> Confirmation:
    """Make a proposed revision effective. Only the owner may; they present the hash.

    Raises:
        NotFound: no such definition or revision in the principal's tenant.
        NotFound: the principal is not the owner (another user's definition does not exist
            for them).
        Conflict: the hash differs from the proposal (you would confirm something you
            did not see), the revision is not the latest open proposal, the definition
            is cancelled, or the schedule has no occurrence after now.
        SpecError: a webhook destination names no endpoint of the tenant (it may have
            been removed since the proposal).
    """
    now = clock.now()
    tenant_id = principal.tenant_id
    async with db.transaction() as tx:
        row = await tx.fetchrow("definition_lock", tenant_id, definition_id)
        if row is None:
            raise NotFound(f"no definition {tenant_id}/{definition_id}")
        if row["owner_user_id"] != principal.user_id:
            # another user's definition does not exist for this user (DESIGN "Who may do
            # what"): not found, never a hint that it is there
            raise NotFound(f"no definition {tenant_id}/{definition_id}")
        rev = await tx.fetchrow("revision_get", tenant_id, definition_id, revision)
        _check_confirmable(row, rev, revision, spec_hash)
        spec = spec_from_row(rev)
        await check_destinations(tx, tenant_id, spec.delivery)
        window = spec.window(now - EPSILON, now - EPSILON)
        if window.next_slot is None:
            raise Conflict(f"revision {revision} has no occurrence after {now.isoformat()}; "
                           "propose a later time")
        status = "paused" if row["status"] == "paused" else "active"
        await record_replaced_span(tx, row, now, principal.label)
        await tx.execute("revision_confirm", tenant_id, definition_id, revision,
                         principal.label, now)
        await tx.execute("revisions_retire", tenant_id, definition_id, revision)
        fence = await tx.fetchval(
            "definition_make_effective", tenant_id, definition_id, revision, now, now - EPSILON,
            window.next_slot.scheduled_for, status,
            "condition" if spec.trigger.type == "condition" else "calendar",
        )
    return Confirmation(revision, fence, now, window.next_slot.scheduled_for)


def _check_confirmable(row: Any, rev: Any, revision: int, spec_hash: str) -> None:
    if rev is None:
        raise NotFound(f"no revision {revision} of {row['definition_id']}")
    if row["status"] == "cancelled":
        raise Conflict(f"definition {row['definition_id']} is cancelled")
    if rev["status"] != "proposed":
        raise Conflict(f"revision {revision} is {rev['status']}, not an open proposal")
    if revision != row["latest_revision"]:
        raise Conflict(f"revision {revision} is superseded by revision {row['latest_revision']}")
    expected = rev["spec_hash"]
    if not secrets.compare_digest(expected.encode(), spec_hash.encode()):
        if len(spec_hash) != len(expected):
            raise Conflict(
                f"spec hash mismatch: the spec_hash you presented has {len(spec_hash)} "
                f"characters; a spec_hash is {len(expected)} hexadecimal digits (SHA-256). "
                "Fix: present the whole spec_hash printed with the proposal, untruncated")
        raise Conflict(
            f"spec hash mismatch: revision {revision} has {expected[:12]}…, you presented "
            f"{spec_hash[:12]}…; re-read the proposal before confirming"
        )


async def reject(db: Database, clock: Clock, principal: UserPrincipal, *, definition_id: str,
                 revision: int) -> None:
    """The owner declines a proposed revision: it is ``rejected`` (by the principal's
    label, now) and can never be confirmed; the effective revision, if any, goes on
    unchanged and the fence does not move (nothing that runs changed). An agent may
    propose again, based on the latest revision.

    Raises:
        NotFound: no such definition or revision in the principal's tenant, or the
            principal is not the owner.
        Conflict: the revision is not an open proposal, or the definition is cancelled.
    """
    now = clock.now()
    tenant_id = principal.tenant_id
    async with db.transaction() as tx:
        row = await tx.fetchrow("definition_lock", tenant_id, definition_id)
        if row is None or row["owner_user_id"] != principal.user_id:
            raise NotFound(f"no definition {tenant_id}/{definition_id}")
        rev = await tx.fetchrow("revision_get", tenant_id, definition_id, revision)
        if rev is None:
            raise NotFound(f"no revision {revision} of {definition_id}")
        if row["status"] == "cancelled":
            raise Conflict(f"definition {definition_id} is cancelled")
        if rev["status"] != "proposed":
            raise Conflict(f"revision {revision} is {rev['status']}, not an open proposal")
        await tx.execute("revision_reject", tenant_id, definition_id, revision,
                         principal.label, now)


async def _lock_for_change(tx: Connection, actor: Actor, tenant_id: str,
                           definition_id: str) -> Any:
    row = await tx.fetchrow("definition_lock", tenant_id, definition_id)
    if row is None:
        raise NotFound(f"no definition {tenant_id}/{definition_id}")
    if isinstance(actor, UserPrincipal) and (
        actor.tenant_id != tenant_id or actor.user_id != row["owner_user_id"]
    ):
        raise NotFound(f"no definition {tenant_id}/{definition_id}")
    if row["status"] == "cancelled":
        raise Conflict(f"definition {definition_id} is cancelled")
    return row


async def pause(db: Database, clock: Clock, actor: Actor, tenant_id: str,
                definition_id: str, *, note: str = "") -> int:
    """Suppress new occurrences; a running task goes on. Returns the new fence.

    Raises:
        NotFound (also: a user who is not the owner), Conflict (not active).
    """
    now = clock.now()
    async with db.transaction() as tx:
        row = await _lock_for_change(tx, actor, tenant_id, definition_id)
        if row["status"] != "active":
            raise Conflict(f"definition {definition_id} is {row['status']}, not active")
        return int(await tx.fetchval(
            "definition_set_status", tenant_id, definition_id, "paused", now, row["cursor_at"],
            row["slots_seen"], row["next_due_at"], now, _note(note), actor.label))


async def resume(db: Database, clock: Clock, actor: Actor, tenant_id: str,
                 definition_id: str, *, recorded_by: str = "operator", note: str = "") -> int:
    """Resume a paused definition. The paused span is recorded once as a
    ``skipped_paused`` range and never replayed. Returns the new fence.

    Raises:
        NotFound (also: a user who is not the owner), Conflict (not paused).
    """
    now = clock.now()
    async with db.transaction() as tx:
        row = await _lock_for_change(tx, actor, tenant_id, definition_id)
        if row["status"] != "paused":
            raise Conflict(f"definition {definition_id} is {row['status']}, not paused")
        spec = spec_from_row(await tx.fetchrow("revision_get", tenant_id, definition_id,
                                               row["effective_revision"]))
        pivot = max(row["paused_at"], row["cursor_at"])
        before = spec.window(row["cursor_at"], pivot, row["slots_seen"])
        seen = row["slots_seen"] + before.count
        during = spec.window(pivot, now, seen)
        await record_span(tx, row, before.span, EventKind.SKIPPED_SUPERSEDED,
                           "missed before the pause", now, actor.label)
        await record_span(tx, row, during.span, EventKind.SKIPPED_PAUSED, "definition was paused",
                           now, actor.label)
        last = during.last or before.last
        status = "completed" if during.ended else "active"
        next_due = None if during.next_slot is None else during.next_slot.scheduled_for
        return int(await tx.fetchval(
            "definition_set_status", tenant_id, definition_id, status, None,
            last.scheduled_for if last else row["cursor_at"], seen + during.count, next_due, now,
            _note(note), actor.label))


async def cancel(db: Database, clock: Clock, actor: Actor, tenant_id: str, definition_id: str,
                 *, running: bool = False, note: str = "") -> int:
    """End the definition. Tasks not yet started are cancelled; with ``running``,
    cancellation of started tasks is requested too. Returns the new fence.

    Raises:
        NotFound (also: a user who is not the owner), Conflict (already cancelled).
    """
    now = clock.now()
    async with db.transaction() as tx:
        row = await _lock_for_change(tx, actor, tenant_id, definition_id)
        fence = int(await tx.fetchval(
            "definition_set_status", tenant_id, definition_id, "cancelled", row["paused_at"],
            row["cursor_at"], row["slots_seen"], None, now, _note(note), actor.label))
        reason = f"definition cancelled by {actor.label}"
        await tx.execute("tasks_cancel_waiting", tenant_id, definition_id, reason, now)
        await tx.execute("tasks_request_cancel_later_roots", tenant_id, definition_id, now)
        if running:
            await tx.execute("tasks_request_cancel", tenant_id, definition_id, now)
    return fence



MAX_NOTE = 1000


def _note(note: str) -> str:
    """A status note (why a definition was paused, resumed or cancelled).

    Raises:
        SpecError: field ``note``: longer than 1000 characters, or holding a NUL.
    """
    if len(note) > MAX_NOTE or "\x00" in note:
        raise SpecError("note", f"is {len(note)} characters or holds a NUL.",
                        f"write at most {MAX_NOTE} characters of plain text.")
    return note
