"""The page's views: the definitions, one definition with its history, a condition's
poll timeline, one task with its report, and the style sheet.

Each view asks the use cases only: what a viewer sees comes from
``usecases.reading_scope`` (a user: their own; the operator: the tenant) and
``usecases.authorize`` (another tenant's or user's ids are :class:`NotFound`, 404),
exactly as the API's routes do.
"""

from __future__ import annotations

from dataclasses import astuple
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request, Response

from watchkeeper.runtime import Database, NotFound
from watchkeeper.runtime import usecases as uc

from ._actions import DONE, Action
from ._render import COOKIE, HERE, PageRoute, markdown, render
from ._session import Viewer, csrf_token, services

__all__ = ["router"]

router = APIRouter(route_class=PageRoute)

PAGE_SIZE = 20
"""Definitions or history entries per page."""
FOLLOW_LINK = "follow the page's own 'older' or 'more' link."
"""The fix named when a cursor in the address was not made by the page."""
POLLS_PAGE_SIZE = 100
LIST_PREVIEW = 3
"""Next occurrences shown per definition in the list (the definition's page shows 5)."""
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

DefinitionId = Annotated[str, Path(min_length=1, max_length=128,
                                   pattern=r"^[A-Za-z0-9][A-Za-z0-9._:-]*$")]
Cursor = Annotated[str | None, Query(max_length=2000)]
_CSS = (HERE / "static" / "page.css").read_text()


def _who(viewer: uc.Principal) -> dict[str, str]:
    kind = uc.principal_kind(viewer)
    user = getattr(viewer, "user_id", None)
    return {"kind": kind, "tenant": viewer.tenant_id,  # type: ignore[union-attr]
            "name": user if user else f"operator of {viewer.tenant_id}"}  # type: ignore[union-attr]


async def _visible(request: Request, viewer: uc.Principal, definition_id: str,
                   count: int = 5) -> uc.DefinitionReading:
    """The definition as the viewer may read it (else :class:`NotFound`): the same use
    case as the API's ``GET /v1/definitions/{id}`` and MCP ``show_agreement``."""
    svc = services(request)
    return await uc.read_definition(svc.db, svc.clock, viewer, definition_id, count=count)


async def _last(db: Database, tenant: str, owner: str | None,
                definition_id: str) -> dict[str, Any] | None:
    """The definition's latest occurrence (by due time): its ``outcome`` (the furthest
    fact reached: the task's status, else the decision), ``scheduled_for`` and
    ``task_id``; ``None`` before the first."""
    page = await uc.history(db, uc.HistoryQuery(tenant, definition_id, owner, limit=1))
    if not page.entries:
        return None
    entry = page.entries[0]
    return {"outcome": entry.outcome, "scheduled_for": entry["scheduled_for"],
            "task_id": entry["task_id"]}


@router.get("/")
async def index(request: Request, viewer: Viewer, cursor: Cursor = None) -> Response:
    """The definitions the viewer may see, by id, keyset-paged: each with its last
    outcome beside its next due time, its summary and next occurrences, and a revision
    awaiting confirmation."""
    svc = services(request)
    tenant, owner = uc.reading_scope(viewer)
    after = uc.decode_cursor(cursor, uc.DEFINITIONS_CURSOR, fix=FOLLOW_LINK)
    rows = await uc.list_definitions(svc.db, tenant, owner_user_id=owner, limit=PAGE_SIZE,
                                     after=after)  # type: ignore[arg-type]
    items = []
    for row in rows:
        reading = await _visible(request, viewer, row["definition_id"], LIST_PREVIEW)
        items.append({**row, "summary": reading.summary,
                      "upcoming": [i.to_json() for i in reading.next],
                      "proposal": reading.proposal_json(),
                      "last": await _last(svc.db, tenant, owner, row["definition_id"])})
    last = rows[-1] if len(rows) == PAGE_SIZE else None
    return render("index.html", viewer=_who(viewer), items=items, now=svc.clock.now(),
                  next_cursor=uc.encode_cursor(
                      (last["tenant_id"], last["definition_id"]) if last else None))


@router.get("/definitions/{definition_id}")
async def definition(request: Request, viewer: Viewer, definition_id: DefinitionId,
                     cursor: Cursor = None,
                     status: Annotated[str | None, Query(max_length=64)] = None,
                     done: Action | None = None) -> Response:
    """One definition: summary, a revision awaiting confirmation (with Confirm and
    Reject for its owner), Pause / Resume / Cancel / Run now, revisions, next
    occurrences with DST notes, and its history newest first (the six facts per
    occurrence), keyset-paged; ``done``: the action just taken."""
    svc = services(request)
    view = await _visible(request, viewer, definition_id)
    tenant, owner = uc.reading_scope(viewer)
    after = uc.decode_cursor(cursor, uc.HISTORY_CURSOR, fix=FOLLOW_LINK)
    page = await uc.history(svc.db, uc.HistoryQuery(
        tenant, definition_id, owner, status or None, None, None, PAGE_SIZE,
        after))  # type: ignore[arg-type]
    return render("definition.html", viewer=_who(viewer), d=view.definition,
                  revisions=view.revisions, title=view.title,
                  summary=view.summary if view.definition["spec"] is not None else None,
                  upcoming=[i.to_json() for i in view.next]
                  if view.definition["spec"] is not None else [],
                  proposal=view.proposal_json(), entries=page.entries,
                  can_act=uc.principal_kind(viewer) == "user",
                  csrf=csrf_token(request.cookies.get(COOKIE, "")),
                  done=DONE[done] if done else None,
                  events=[e.row for e in page.events] if after is None else [],
                  statuses=sorted(uc.HISTORY_STATUSES), status_filter=status or "",
                  first_page=after is None, next_cursor=uc.encode_cursor(page.after))


@router.get("/definitions/{definition_id}/polls")
async def polls(request: Request, viewer: Viewer, definition_id: DefinitionId,
                cursor: Cursor = None, start: bool = False, changes: bool = False) -> Response:
    """A condition's poll timeline, oldest first: the newest polls, or (``start``) the
    whole timeline from its first poll, page by page."""
    svc = services(request)
    view = await _visible(request, viewer, definition_id)
    position = uc.decode_cursor(cursor, uc.POLLS_CURSOR, fix=FOLLOW_LINK)
    after = None if position is None else uc.PollCursor(*position)
    since = EPOCH if start and after is None else None
    page = await uc.polls(svc.db, uc.PollsQuery(view.definition["tenant_id"], definition_id,
                                                since, after, POLLS_PAGE_SIZE, changes))
    return render("polls.html", viewer=_who(viewer), d=view.definition,
                  title=(view.definition["spec"] or {}).get("title"), polls=page.polls,
                  forwards=since is not None or after is not None, changes=changes,
                  next_cursor=uc.encode_cursor(
                      None if page.next_after is None else astuple(page.next_after)))


@router.get("/tasks/{task_id}")
async def task(request: Request, viewer: Viewer,
               task_id: Annotated[int, Path(ge=1, le=2**63 - 1)]) -> Response:
    """One task: its six facts and next step, the report's headline, every tool call of
    every run (refused ones included) with its status, the report, its receipt and
    deliveries."""
    svc = services(request)
    tenant, _ = uc.reading_scope(viewer)
    entry = await uc.task_entry(svc.db, tenant, task_id)
    uc.authorize(viewer, uc.Capability.READ, tenant_id=entry["tenant_id"],
                 owner_user_id=entry["owner_user_id"])
    try:
        report: dict[str, Any] | None = await uc.report(svc.db, tenant, task_id)
    except NotFound:
        report = None
    return render("task.html", viewer=_who(viewer), e=entry, report=report,
                  report_html=markdown(report["content_md"]) if report else None)


@router.get("/static/page.css")
async def css() -> Response:
    """The page's one style sheet."""
    return Response(_CSS, media_type="text/css; charset=utf-8",
                    headers={"Cache-Control": "public, max-age=3600"})
