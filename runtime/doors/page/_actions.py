"""The owner's decisions on the page: confirm or reject a proposal; pause, resume,
cancel or run now an active definition.

Each is a plain HTML form POST to ``/definitions/{id}/{action}`` (no script): the
``Origin`` check and the session's CSRF token (``_session``), then the same use case as
the API's route, with the viewer recorded as ``user:<tenant>/<user> via page``; then a
redirect (303) back to the definition with a code saying what was done. Only a signed-in
user acts, on their own definitions: an operator session may read the tenant here but
never act for a user (403); another user's definition is 404, as everywhere.
"""

from __future__ import annotations

from dataclasses import replace
from enum import StrEnum
from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Path, Request, Response
from fastapi.responses import RedirectResponse

from watchkeeper.runtime import Forbidden
from watchkeeper.runtime import usecases as uc
from watchkeeper.triggers import SpecError

from ._render import PageRoute
from ._session import Viewer, check_csrf, check_origin, read_form, services

__all__ = ["DONE", "Action", "router"]

router = APIRouter(route_class=PageRoute)

VIA = "page"
"""How the page appears in audit columns: ``user:acme/alice via page``."""


class Action(StrEnum):
    """What the owner decides on the page."""

    CONFIRM = "confirm"
    REJECT = "reject"
    PAUSE = "pause"
    RESUME = "resume"
    CANCEL = "cancel"
    RUN = "run"


DONE = {
    Action.CONFIRM: "Confirmed: this revision is now in effect.",
    Action.REJECT: "Rejected: that revision will never run.",
    Action.PAUSE: "Paused: no new occurrence runs until you resume it.",
    Action.RESUME: "Resumed: the paused span is recorded as skipped and not replayed.",
    Action.CANCEL: "Cancelled: nothing more runs for this definition.",
    Action.RUN: "Started: a manual occurrence was admitted now.",
}
"""What the definition's page says after each action (the link carries the code only)."""

DefinitionId = Annotated[str, Path(min_length=1, max_length=128,
                                   pattern=r"^[A-Za-z0-9][A-Za-z0-9._:-]*$")]


def _owner(viewer: uc.Principal) -> uc.UserPrincipal:
    """The viewer as the acting user, recorded ``via page``.

    Raises:
        Forbidden: an operator session.
    """
    if not isinstance(viewer, uc.UserPrincipal):
        raise Forbidden("An operator session cannot act for a user here: the owner "
                        "decides, signed in with their own token (the operator may pause, "
                        "resume, cancel or trigger through the API or the CLI).")
    return replace(viewer, via=VIA)


def _revision(form: dict[str, str]) -> int:
    """The form's ``revision``.

    Raises:
        SpecError: field ``revision``: not a whole number from 1.
    """
    text = form.get("revision", "")
    if not text.isascii() or not text.isdigit() or not 1 <= int(text) <= 2**31 - 1:
        raise SpecError("revision", f"is {text[:20]!r}, not a revision number.",
                        "use the page's own buttons.")
    return int(text)


@router.post("/definitions/{definition_id}/{action}")
async def act(request: Request, viewer: Viewer, definition_id: DefinitionId,
              action: Action) -> Response:
    """Do ``action`` for the signed-in owner and go back to the definition's page."""
    check_origin(request)
    form = await read_form(request)
    check_csrf(request, form)
    actor = _owner(viewer)
    svc = services(request)
    db, clock, tenant = svc.db, svc.clock, actor.tenant_id
    if action is Action.CONFIRM:
        await uc.confirm(db, clock, actor, definition_id=definition_id,
                         revision=_revision(form), spec_hash=form.get("spec_hash", ""))
    elif action is Action.REJECT:
        await uc.reject(db, clock, actor, definition_id=definition_id,
                        revision=_revision(form))
    elif action is Action.PAUSE:
        await uc.pause(db, clock, actor, tenant, definition_id)
    elif action is Action.RESUME:
        await uc.resume(db, clock, actor, tenant, definition_id)
    elif action is Action.CANCEL:
        await uc.cancel(db, clock, actor, tenant, definition_id)
    else:
        await uc.trigger_now(db, clock, actor, tenant, definition_id)
    return RedirectResponse(f"/definitions/{quote(definition_id, safe='')}?done={action.value}",
                            status_code=303)
