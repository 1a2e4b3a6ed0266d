"""Who is looking: sign in with a user token or an operator key, which opens a
server-side session; sign out, which ends it; and the ``Viewer`` dependency every view
takes.

The cookie holds a random session id, never the credential (``usecases`` stores only
its SHA-256, :mod:`watchkeeper.runtime.usecases._page_sessions`): ``HttpOnly`` (no
script reads it; the page has no script), ``SameSite=Strict`` (another site's link or
form arrives without it), ``Secure`` when the page is served over https, ``Path=/``,
for the session's 12 hours. Every request looks the session up again, so sign-out,
revoking the key or replacing the token signs the viewer out at the next click; the id
is no Bearer credential of the API.

CSRF: besides ``SameSite=Strict``, every POST form refuses a request whose
``Origin`` header (or, when a browser sends none, its ``Referer``) is not this page's
own scheme, host and port; a request with neither is refused too. (Behind a reverse
proxy, forward the original ``Host`` and, for https, ``X-Forwarded-Proto`` with
uvicorn's ``--proxy-headers``.) The action forms (``_actions``) also carry a token
derived from the session id (:func:`csrf_token`), checked by :func:`check_csrf`.
"""

from __future__ import annotations

import hashlib
import secrets
from typing import Annotated, Protocol
from urllib.parse import parse_qs, urlsplit

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.responses import RedirectResponse

from watchkeeper.runtime import AuthError, Clock, Database
from watchkeeper.runtime import usecases as uc
from watchkeeper.triggers import SpecError

from ._render import (
    COOKIE,
    SIGN_IN_REASONS,
    CrossSiteForm,
    PageRoute,
    SignInRequired,
    render,
    safe_next,
)

__all__ = ["Viewer", "check_csrf", "check_origin", "csrf_token", "read_form", "router",
           "viewer"]

router = APIRouter(route_class=PageRoute)

MAX_AGE_SECONDS = 12 * 3600
MAX_FORM_BYTES = 8192
PAGE_KINDS = frozenset({"user", "operator"})
"""The principals the page signs in: a person (user token) or the tenant's operator."""

_REFUSED = {
    "agent": "An agent key reads through the API and the MCP tools; the page is for "
             "people. Sign in with your user token or an operator key.",
    "tick": "The tick secret drives ticks and nothing else. Sign in with your user token "
            "or an operator key.",
}


class PageServices(Protocol):
    """What the page needs of the app's services (``doors.api.Services``)."""

    db: Database
    clock: Clock


def services(request: Request) -> PageServices:
    """The app's services, set by the API's app factory."""
    return request.app.state.services  # type: ignore[no-any-return]


async def viewer(request: Request) -> uc.Principal:
    """The signed-in user or operator of the request's session cookie.

    Raises:
        SignInRequired: no cookie; or (reason ``expired``, the cookie is cleared) a
            session that is unknown, expired, signed out, or whose key was revoked or
            token replaced.
    """
    session_id = request.cookies.get(COOKIE)
    if not session_id:
        raise SignInRequired()
    svc = services(request)
    principal = await uc.page_session_principal(svc.db, svc.clock, session_id)
    if principal is None:
        raise SignInRequired("expired")
    return principal


Viewer = Annotated[uc.Principal, Depends(viewer)]


def check_origin(request: Request) -> None:
    """Nothing when the form was posted from this page's own origin.

    Raises:
        CrossSiteForm: the ``Origin`` (or ``Referer``) names another origin, is
            ``null``, or neither header was sent.
    """
    own = f"{request.url.scheme}://{request.url.netloc}".lower()
    origin = request.headers.get("origin")
    if origin is None and (referer := request.headers.get("referer")):
        parts = urlsplit(referer)
        origin = f"{parts.scheme}://{parts.netloc}"
    if origin is None:
        raise CrossSiteForm("The request carried neither an Origin nor a Referer header.")
    if origin.lower() != own:
        raise CrossSiteForm(f"It came from {origin!r}, not from {own!r}.")


def csrf_token(session_id: str) -> str:
    """The token the page's action forms carry for the session ``session_id``: derived
    from the id (which no script and no other site can read), so it needs no storage
    and changes with every session."""
    return hashlib.sha256(b"watchkeeper page form\x00" + session_id.encode()).hexdigest()


def check_csrf(request: Request, form: dict[str, str]) -> None:
    """Nothing when the form carries the token of the request's session.

    Raises:
        CrossSiteForm: the ``csrf`` field is missing or belongs to no session of this
            cookie.
    """
    expected = csrf_token(request.cookies.get(COOKIE, ""))
    if not secrets.compare_digest(form.get("csrf", "").encode(), expected.encode()):
        raise CrossSiteForm("The form's token is missing or is not this session's.")


async def read_form(request: Request) -> dict[str, str]:
    """The fields of an ``application/x-www-form-urlencoded`` body (at most 8 KiB).

    Raises:
        SpecError: field ``form``: another content type, too large, or not UTF-8.
    """
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/x-www-form-urlencoded":
        raise SpecError("form", f"is sent as {kind or 'nothing'!r}.",
                        "post the page's own form (application/x-www-form-urlencoded).")
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            raise SpecError("form", f"is larger than {MAX_FORM_BYTES} bytes.",
                            "paste the token alone.")
    try:
        fields = parse_qs(body.decode(), keep_blank_values=True, max_num_fields=10)
    except (UnicodeDecodeError, ValueError) as exc:
        raise SpecError("form", "is not a form the page sent.", "post the page's own form.") \
            from exc
    return {name: values[0] for name, values in fields.items()}


@router.get("/sign-in")
async def sign_in_form(next_path: Annotated[str, Query(alias="next", max_length=2000)] = "/",
                       why: Annotated[str | None, Query(max_length=32)] = None) -> Response:
    """The sign-in form (``why``: a code saying why the viewer was sent here)."""
    return render("sign_in.html", next_path=safe_next(next_path),
                  message=SIGN_IN_REASONS.get(why or ""))


@router.post("/sign-in")
async def sign_in(request: Request) -> Response:
    """Check the pasted credential; a user token or an operator key opens a session,
    sets its id in the cookie and goes on to ``next``; anything else answers the form
    again with the reason (401, or 403 for an agent key or the tick secret)."""
    check_origin(request)
    form = await read_form(request)
    token, next_path = form.get("token", "").strip(), safe_next(form.get("next"))
    svc = services(request)
    try:
        principal = await uc.authenticate_bearer(svc.db, svc.clock, token or None)
    except AuthError as exc:
        hint = (" An app key acts for users its app signed in itself; sign in with your own "
                "user token." if token.startswith("wk_app_") else "")
        return render("sign_in.html", status_code=401, next_path=next_path,
                      message=f"That credential was not accepted ({exc}).{hint}")
    kind = uc.principal_kind(principal)
    if kind not in PAGE_KINDS:
        return render("sign_in.html", status_code=403, next_path=next_path, message=_REFUSED[kind])
    session = await uc.open_page_session(svc.db, svc.clock, principal, token,
                                         seconds=MAX_AGE_SECONDS)
    response = RedirectResponse(next_path, status_code=303)
    response.set_cookie(COOKIE, session.session_id, max_age=MAX_AGE_SECONDS, path="/",
                        secure=request.url.scheme == "https", httponly=True, samesite="strict")
    return response


@router.post("/sign-out")
async def sign_out(request: Request) -> Response:
    """End the session (server-side: its id no longer opens the page, wherever a copy
    of the cookie went), clear the cookie and go back to the sign-in form."""
    check_origin(request)
    session_id = request.cookies.get(COOKIE)
    if session_id:
        svc = services(request)
        await uc.close_page_session(svc.db, svc.clock, session_id)
    response = RedirectResponse("/sign-in", status_code=303)
    response.delete_cookie(COOKIE, path="/", secure=request.url.scheme == "https",
                           httponly=True, samesite="strict")
    return response
