"""``/v1/previews``, ``/v1/history``, ``/v1/tasks/{task_id}`` and its report."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import PlainTextResponse

from watchkeeper.runtime import usecases as uc
from watchkeeper.triggers import IDENTIFIER_PATTERN, parse_spec

from ._deps import Authenticated, Svc
from ._models import HistoryEntryOut, HistoryPageOut, PreviewIn, PreviewOut, ReportOut
from ._problems import PROBLEM_RESPONSES

__all__ = ["router"]

router = APIRouter(prefix="/v1", responses=PROBLEM_RESPONSES)

TaskId = Annotated[int, Path(ge=1, le=2**63 - 1)]
HistoryStatus = Literal[tuple(sorted(uc.HISTORY_STATUSES))]  # type: ignore[valid-type]
HISTORY_STATUS = Annotated[HistoryStatus | None, Query(description="A decision or a task status.")]
IdentifierQuery = Annotated[str | None, Query(pattern=IDENTIFIER_PATTERN, max_length=128)]
InstantQuery = Annotated[uc.Instant | None, Query(
    description="RFC 3339 with an offset, 1970-01-01T00:00:00Z to 2200-01-01T00:00:00Z.")]


@router.post("/previews", response_model=PreviewOut, tags=["definitions"],
             summary="Preview a spec")
async def preview(svc: Svc, principal: Authenticated, body: PreviewIn) -> dict[str, Any]:
    """The next occurrences of a spec (nothing is stored), with DST notes, and its
    summary in plain words. Every problem of the spec at once: 422."""
    uc.authorize(principal, uc.Capability.PREVIEW)
    spec = parse_spec(body.spec, min_interval=svc.settings.min_interval_delta)
    items = uc.preview_spec(spec, body.after or svc.clock.now(), body.count)
    return {"summary": uc.describe(spec), "next": [i.to_json() for i in items],
            "warnings": [w.to_json() for w in spec.warnings]}


@router.get("/history", response_model=HistoryPageOut, tags=["history"], summary="Task history")
async def history(svc: Svc, principal: Authenticated,
                  definition: IdentifierQuery = None, user: IdentifierQuery = None,
                  status: HISTORY_STATUS = None,
                  since: InstantQuery = None, until: InstantQuery = None,
                  limit: Annotated[int, Query(ge=1, le=500)] = 50,
                  cursor: Annotated[str | None, Query(max_length=2000)] = None) -> dict[str, Any]:
    """Each occurrence with its six facts (decision, admission lateness, task, runs, receipt,
    deliveries) and one recommended next step, newest first; keyset-paged with an opaque
    cursor (constant cost per page however deep). A user sees their own."""
    tenant, owner = uc.reading_scope(principal)
    if owner is not None and user not in (None, owner):
        return {"items": [], "events": [], "next_cursor": None}
    after = uc.decode_cursor(cursor, uc.HISTORY_CURSOR)
    page = await uc.history(svc.db, uc.HistoryQuery(
        tenant, definition, owner or user, status, since, until, limit,
        after))  # type: ignore[arg-type]
    return {"items": [_entry(e) for e in page.entries],
            "events": [] if owner else [dict(e.row) for e in page.events],
            "next_cursor": uc.encode_cursor(page.after)}


def _entry(entry: uc.HistoryEntry) -> dict[str, Any]:
    return {**entry.row, "outcome": entry.outcome, "next_step": entry.next_step}


@router.get("/tasks/{task_id}", response_model=HistoryEntryOut, tags=["history"],
            summary="One task and its six facts")
async def task(svc: Svc, principal: Authenticated, task_id: TaskId) -> dict[str, Any]:
    """The occurrence, its decision and admission lateness, the task, every run (attempt, outcome,
    fencing token, error), the receipt and the deliveries, and the next step."""
    tenant, _ = uc.reading_scope(principal)
    entry = await uc.task_entry(svc.db, tenant, task_id)
    uc.authorize(principal, uc.Capability.READ, tenant_id=entry["tenant_id"],
                 owner_user_id=entry["owner_user_id"])
    return _entry(entry)


@router.get("/tasks/{task_id}/report", response_model=ReportOut, tags=["history"],
            summary="A task's report and receipt",
            responses={200: {"content": {"text/markdown": {}}}})
async def report(svc: Svc, principal: Authenticated, task_id: TaskId,
                 request: Request) -> Any:
    """The committed markdown and its receipt (content hash, verification, output
    reference). ``Accept: text/markdown`` answers the markdown alone."""
    tenant, _ = uc.reading_scope(principal)
    entry = await uc.task_entry(svc.db, tenant, task_id)
    uc.authorize(principal, uc.Capability.READ, tenant_id=entry["tenant_id"],
                 owner_user_id=entry["owner_user_id"])
    row = await uc.report(svc.db, tenant, task_id)
    accept = request.headers.get("accept", "")
    if "text/markdown" in accept and "application/json" not in accept:
        return PlainTextResponse(row["content_md"], media_type="text/markdown; charset=utf-8")
    return {**row, "markdown": row["content_md"]}
