"""``/v1/definitions``: list and show, propose a revision, confirm or reject it, pause, resume,
cancel, trigger now, review, and a condition's poll timeline.

Every route acts in the principal's tenant. A definition is first looked up (another
tenant's, or for a user another user's, is 404), then the principal's permission is
checked (an agent asking to confirm is 403).
"""

from __future__ import annotations

from dataclasses import astuple
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Response

from watchkeeper.runtime import usecases as uc
from watchkeeper.triggers import IDENTIFIER_PATTERN

from ._deps import Authenticated, Svc
from ._models import (
    CancelIn,
    ConfirmationOut,
    ConfirmIn,
    DefinitionList,
    DefinitionOut,
    FenceOut,
    NoteIn,
    PollList,
    ProposalOut,
    ProposeIn,
    RejectionOut,
    ReviewIn,
    ReviewOut,
    TriggerIn,
    TriggerOut,
)
from ._problems import PROBLEM_RESPONSES

__all__ = ["router"]

router = APIRouter(prefix="/v1/definitions", tags=["definitions"], responses=PROBLEM_RESPONSES)

DefinitionId = Annotated[str, Path(pattern=IDENTIFIER_PATTERN, max_length=128,
                                   description="The definition's id in the caller's tenant.")]
ProposedId = Annotated[str, Path(max_length=1000, json_schema_extra={
    "pattern": IDENTIFIER_PATTERN, "maxLength": 128},
    description="The definition's id in the caller's tenant (checked with the proposal, so "
                "a refusal lists its problem with every other).")]


async def _visible(svc: Svc, principal: uc.Principal, definition_id: str,
                   capability: uc.Capability) -> uc.DefinitionView:
    """The definition, if the principal may see it and exercise ``capability`` on it."""
    tenant, _ = uc.reading_scope(principal) if capability is uc.Capability.READ else (
        uc.visible_tenant(principal), None)
    if tenant is None:
        uc.authorize(principal, capability)
    view = await uc.show_definition(svc.db, tenant, definition_id)  # type: ignore[arg-type]
    uc.authorize(principal, uc.Capability.READ, tenant_id=view.definition["tenant_id"],
                 owner_user_id=view.definition["owner_user_id"])
    uc.authorize(principal, capability, tenant_id=view.definition["tenant_id"],
                 owner_user_id=view.definition["owner_user_id"])
    return view


@router.get("", response_model=DefinitionList, summary="List definitions")
async def list_definitions(svc: Svc, principal: Authenticated,
                           limit: Annotated[int, Query(ge=1, le=500)] = 100,
                           cursor: Annotated[str | None, Query(max_length=2000)] = None,
                           ) -> dict[str, Any]:
    """The caller's definitions (a user's own; an agent's or operator's whole tenant), by
    id, with status, revisions, fence and next due time; keyset-paged."""
    tenant, owner = uc.reading_scope(principal)
    after = uc.decode_cursor(cursor, uc.DEFINITIONS_CURSOR)
    rows = await uc.list_definitions(svc.db, tenant, owner_user_id=owner, limit=limit,
                                     after=after)  # type: ignore[arg-type]
    last = rows[-1] if len(rows) == limit else None
    return {"items": rows, "next_cursor": uc.encode_cursor(
        (last["tenant_id"], last["definition_id"]) if last else None)}


@router.get("/{definition_id}", response_model=DefinitionOut, summary="Show a definition")
async def show_definition(svc: Svc, principal: Authenticated,
                          definition_id: DefinitionId) -> dict[str, Any]:
    """Status, revisions, fence, next due, the effective spec in plain words with its
    next occurrences and DST notes, and the revision awaiting the owner's confirmation
    (``proposal``) as its proposal showed it. Before the first confirmation, ``spec``,
    ``spec_hash``, ``summary`` and ``next`` show that proposal (``shows_revision``)."""
    reading = await uc.read_definition(svc.db, svc.clock, principal, definition_id)
    return reading.to_json()


@router.post("/{definition_id}/revisions", status_code=201, response_model=ProposalOut,
             summary="Propose a revision")
async def propose(svc: Svc, principal: Authenticated, definition_id: ProposedId,
                  body: ProposeIn, response: Response) -> dict[str, Any]:
    """Record a proposed revision (nothing runs until the owner confirms it). Answers the
    revision, its ``spec_hash``, the effective part the hash covers, a summary for the
    user, the next occurrences with DST notes, and where the owner confirms. Every
    problem of the spec at once: 422. A stale ``based_on``: 409."""
    view = await uc.propose_spec(svc.db, svc.clock, principal, definition_id=definition_id,
                                 spec=body.spec, owner_user_id=body.owner,
                                 based_on=body.based_on,
                                 min_interval=svc.settings.min_interval_delta)
    response.headers["Location"] = f"/v1/definitions/{definition_id}"
    return {**view.to_json(), "confirm": view.confirm_at()}


@router.post("/{definition_id}/revisions/{revision}/confirm", response_model=ConfirmationOut,
             summary="Confirm a revision (the owner)")
async def confirm(svc: Svc, principal: Authenticated, definition_id: DefinitionId,
                  revision: Annotated[int, Path(ge=1, le=2**31 - 1)],
                  body: ConfirmIn) -> dict[str, Any]:
    """The owner makes the proposed revision effective by presenting the ``spec_hash``
    they were shown (with their token, or through an app key acting for them). An
    agent or operator key: 403. A different hash: 409."""
    await _visible(svc, principal, definition_id, uc.Capability.CONFIRM)
    assert isinstance(principal, uc.UserPrincipal)
    done = await uc.confirm(svc.db, svc.clock, principal, definition_id=definition_id,
                            revision=revision, spec_hash=body.spec_hash)
    return {"definition_id": definition_id, "revision": done.revision, "fence": done.fence,
            "effective_since": done.effective_since, "next_due_at": done.next_due_at}


@router.post("/{definition_id}/revisions/{revision}/reject", response_model=RejectionOut,
             summary="Reject a proposed revision (the owner)")
async def reject(svc: Svc, principal: Authenticated, definition_id: DefinitionId,
                 revision: Annotated[int, Path(ge=1, le=2**31 - 1)]) -> dict[str, Any]:
    """The owner declines a proposed revision: it never runs; the effective revision,
    if any, goes on. An agent or operator key: 403. Not an open proposal: 409."""
    await _visible(svc, principal, definition_id, uc.Capability.CONFIRM)
    assert isinstance(principal, uc.UserPrincipal)
    await uc.reject(svc.db, svc.clock, principal, definition_id=definition_id, revision=revision)
    return {"definition_id": definition_id, "revision": revision, "status": "rejected"}


async def _control(svc: Svc, principal: uc.Principal, definition_id: str, verb: str,
                   note: str, running: bool = False) -> dict[str, Any]:
    view = await _visible(svc, principal, definition_id, uc.Capability.CONTROL)
    tenant = view.definition["tenant_id"]
    actor: Any = principal
    if verb == "pause":
        fence = await uc.pause(svc.db, svc.clock, actor, tenant, definition_id, note=note)
    elif verb == "resume":
        fence = await uc.resume(svc.db, svc.clock, actor, tenant, definition_id, note=note)
    else:
        fence = await uc.cancel(svc.db, svc.clock, actor, tenant, definition_id,
                                running=running, note=note)
    after = await uc.show_definition(svc.db, tenant, definition_id)
    return {"definition_id": definition_id, "status": after.definition["status"], "fence": fence}


@router.post("/{definition_id}/pause", response_model=FenceOut, summary="Pause")
async def pause(svc: Svc, principal: Authenticated, definition_id: DefinitionId,
                body: NoteIn | None = None) -> dict[str, Any]:
    """Suppress new occurrences (recorded ``skipped_paused``); a running task goes on."""
    return await _control(svc, principal, definition_id, "pause", body.note if body else "")


@router.post("/{definition_id}/resume", response_model=FenceOut, summary="Resume")
async def resume(svc: Svc, principal: Authenticated, definition_id: DefinitionId,
                 body: NoteIn | None = None) -> dict[str, Any]:
    """Resume; the paused span is recorded once and not replayed."""
    return await _control(svc, principal, definition_id, "resume", body.note if body else "")


@router.post("/{definition_id}/cancel", response_model=FenceOut, summary="Cancel")
async def cancel(svc: Svc, principal: Authenticated, definition_id: DefinitionId,
                 body: CancelIn | None = None) -> dict[str, Any]:
    """End the definition (``running``: also request cancellation of the active task)."""
    return await _control(svc, principal, definition_id, "cancel", body.note if body else "",
                          running=body.running if body else False)


@router.post("/{definition_id}/trigger", response_model=TriggerOut, summary="Trigger now")
async def trigger(svc: Svc, principal: Authenticated, definition_id: DefinitionId,
                  body: TriggerIn | None = None) -> dict[str, Any]:
    """A ``manual`` occurrence now: bypasses pause and overrun, never the budget."""
    view = await _visible(svc, principal, definition_id, uc.Capability.CONTROL)
    result = await uc.trigger_now(svc.db, svc.clock, principal,  # type: ignore[arg-type]
                                  view.definition["tenant_id"], definition_id)
    return {"slot": result.slot, "recovered": result.recovered, "decisions": [
        {"tenant_id": t, "binding_id": b, "decision": d}
        for (t, b), d in result.decisions.items()]}


@router.post("/{definition_id}/reviews", response_model=ReviewOut, summary="Review an occurrence")
async def review(svc: Svc, principal: Authenticated, definition_id: DefinitionId,
                 body: ReviewIn) -> dict[str, Any]:
    """Approve (admit it late, through overrun and budget) or skip an occurrence waiting
    in ``review_required``."""
    view = await _visible(svc, principal, definition_id, uc.Capability.CONTROL)
    tenant = view.definition["tenant_id"]
    decision = await uc.review(svc.db, svc.clock, principal, tenant,  # type: ignore[arg-type]
                               definition_id, body.slot, approve=body.decision == "approve")
    return {"decision": decision}


@router.get("/{definition_id}/polls", response_model=PollList, summary="A condition's polls")
async def polls(svc: Svc, principal: Authenticated, definition_id: DefinitionId,
                since: Annotated[uc.Instant | None, Query(
                    description="RFC 3339 with an offset, 1970-01-01T00:00:00Z to "
                                "2200-01-01T00:00:00Z.")] = None,
                cursor: Annotated[str | None, Query(max_length=2000)] = None,
                limit: Annotated[int, Query(ge=1, le=10_000)] = 100,
                changes: bool = False) -> dict[str, Any]:
    """The poll timeline, oldest first: the newest ``limit``, or forwards from ``since``
    or a cursor; ``changes`` keeps polls whose verdict changed or that did something
    (filtered before the limit)."""
    view = await _visible(svc, principal, definition_id, uc.Capability.READ)
    after = uc.decode_cursor(cursor, uc.POLLS_CURSOR)
    page = await uc.polls(svc.db, uc.PollsQuery(
        view.definition["tenant_id"], definition_id, since,
        uc.PollCursor(*after) if after else None, limit, changes))  # type: ignore[arg-type]
    position = page.next_after
    return {"items": list(page.polls), "next_cursor": uc.encode_cursor(
        astuple(position) if position else None)}
