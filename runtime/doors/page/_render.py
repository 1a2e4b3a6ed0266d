"""Rendering the page: the Jinja2 environment (autoescaped), markdown without HTML, the
security headers of every answer, and the one mapping from the runtime's exceptions to
error pages (as ``doors/api/_problems.py`` maps them to problem details).

======================= ====== ==========================================
raised                  status page
======================= ====== ==========================================
SignInRequired          303    to ``/sign-in`` (the cookie cleared when it
                               no longer signs anyone in)
CrossSiteForm           403    "sent from another site"
NotFound                404    also another tenant's or user's ids, and a
                               path parameter of the wrong type
SpecError, bad query    400    the field and the fix
Conflict                409    what stands in the way (an action the
                               definition's state does not allow)
Forbidden               403
DatabaseUnavailable     503    with ``Retry-After``
WatchkeeperError        500    no detail
======================= ====== ==========================================
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

from fastapi import Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.routing import APIRoute
from jinja2 import Environment, FileSystemLoader, StrictUndefined
from markdown_it import MarkdownIt
from markupsafe import Markup

from watchkeeper.runtime import (
    Conflict,
    DatabaseUnavailable,
    Forbidden,
    NotFound,
    WatchkeeperError,
)
from watchkeeper.runtime import usecases as uc
from watchkeeper.triggers import SpecError

__all__ = ["COOKIE", "SIGN_IN_REASONS", "CrossSiteForm", "PageRoute", "SignInRequired", "markdown",
           "render", "safe_next"]

HERE = Path(__file__).resolve().parent
COOKIE = "watchkeeper_session"
"""The session cookie: the viewer's credential, ``HttpOnly``, ``SameSite=Strict``."""

SECURITY_HEADERS = {
    # Nothing but this origin's style sheet: no script at all, no remote image (a
    # report's ![](https://...) cannot call home), no framing, forms post here only.
    "Content-Security-Policy": "default-src 'none'; style-src 'self'; img-src 'self'; "
                               "form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}

_env = Environment(loader=FileSystemLoader(HERE / "templates"), autoescape=True,
                   undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)
# CommonMark with raw HTML off: a tag in a report is text (escaped), never markup;
# markdown-it's own link check refuses javascript:, vbscript:, file: and data: URLs.
_markdown = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False})


SIGN_IN_REASONS = {
    "expired": "Your sign-in no longer holds (the token was replaced, the key revoked, or "
               "the cookie is not a user's or an operator's): sign in again.",
}
"""Why a viewer was sent to the sign-in form: a code in the link, the text here (a link
never carries text the page would show)."""


class SignInRequired(Exception):  # noqa: N818 (a redirect, not an error)
    """No one is signed in; ``reason`` (a key of :data:`SIGN_IN_REASONS`) says why when
    there is something to tell, and the cookie is cleared."""

    def __init__(self, reason: str | None = None) -> None:
        super().__init__(reason or "sign in")
        self.reason = reason


class CrossSiteForm(Exception):  # noqa: N818
    """A POST form whose Origin (or Referer) is not this page's own origin."""


def markdown(text: str) -> Markup:
    """``text`` (an agent's markdown) as HTML, every raw tag in it escaped."""
    return Markup(_markdown.render(text))  # noqa: S704 (markdown-it escapes; html=False)


def when(value: Any) -> str:
    """An instant (aware datetime or ISO 8601 text) as ``YYYY-MM-DD HH:MM:SSZ``; empty
    for ``None``; other text unchanged."""
    if value is None:
        return ""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            return value
    if isinstance(value, datetime) and value.tzinfo is not None:
        return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")
    return str(value)


def local(value: Any) -> str:
    """A local time in ISO 8601 with its offset (a preview's ``local``) as
    ``Mon 2026-10-26 09:00 (UTC+00:00)``; other text unchanged."""
    try:
        instant = datetime.fromisoformat(str(value))
    except ValueError:
        return str(value)
    if instant.tzinfo is None:
        return str(value)
    clock = "%H:%M:%S" if instant.second else "%H:%M"
    offset = instant.strftime("%z")
    return instant.strftime(f"%a %Y-%m-%d {clock}") + f" (UTC{offset[:3]}:{offset[3:5]})"


def seconds(value: Any) -> str:
    """A number of seconds as ``12.3 s`` (empty for ``None``)."""
    return "" if value is None else f"{float(value):.1f} s"


_env.filters.update(when=when, local=local, seconds=seconds)


def safe_next(path: str | None) -> str:
    """``path`` if it is a path of this site (``/...``, not ``//host`` nor ``/\\host``),
    else ``/``: a sign-in link never sends the viewer elsewhere."""
    if not path or not path.startswith("/") or path.startswith(("//", "/\\")) \
            or any(c in path for c in "\r\n\\"):
        return "/"
    return path


def render(name: str, *, status_code: int = 200, **context: Any) -> HTMLResponse:
    """The template ``name`` rendered with ``context`` (``viewer`` defaults to
    ``None``: the header then offers no sign-out). With a read standby, ``read`` is where
    the page's reads were answered and how old they may be (a sentence under the header)."""
    note = uc.current_reads()
    read = None if note is None or note.source is None else note.source.describe()
    html = _env.get_template(name).render(**{"viewer": None, "read": read, **context})
    return HTMLResponse(html, status_code=status_code)


def error_page(status: int, title: str, detail: str = "", fix: str = "") -> HTMLResponse:
    """The error page for ``status``: what happened and, when there is one, the fix."""
    return render("error.html", status_code=status, title=title, detail=detail, fix=fix)


def _to_sign_in(request: Request, exc: SignInRequired) -> Response:
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    location = "/sign-in" + ("" if target == "/" else f"?next={quote(target, safe='')}")
    if exc.reason:
        location += ("&" if "?" in location else "?") + f"why={exc.reason}"
    response = RedirectResponse(location, status_code=303)
    if exc.reason:
        response.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict")
    return response


def _invalid(exc: RequestValidationError) -> HTMLResponse:
    errors = exc.errors()
    if any(e.get("loc", ("",))[0] == "path" for e in errors):
        return error_page(404, "Not found", "There is no such page.")
    fields = "; ".join(f"{'.'.join(str(x) for x in e.get('loc', ())[1:]) or 'request'}: "
                       f"{e.get('msg')}" for e in errors)
    return error_page(400, "This link is not valid", fields,
                      fix="follow the page's own links rather than editing them.")


def _error(request: Request, exc: Exception) -> Response:
    if isinstance(exc, SignInRequired):
        return _to_sign_in(request, exc)
    if isinstance(exc, RequestValidationError):
        return _invalid(exc)
    if isinstance(exc, CrossSiteForm):
        return error_page(403, "This form was sent from another site", str(exc),
                          fix="use the forms of this page itself.")
    if isinstance(exc, NotFound):
        return error_page(404, "Not found", "There is no such definition or task for you.")
    if isinstance(exc, SpecError):
        problem = exc.to_json()[0] if exc.to_json() else {"field": "", "message": str(exc)}
        return error_page(400, "This link is not valid",
                          f"{problem['field']}: {problem['message']}", fix=problem.get("fix", ""))
    if isinstance(exc, Forbidden):
        return error_page(403, "Not allowed", str(exc))
    if isinstance(exc, Conflict):
        return error_page(409, "This could not be done", str(exc),
                          fix="reload the definition's page and decide on what it shows now.")
    if isinstance(exc, DatabaseUnavailable):
        page = error_page(503, "The database is unreachable", "Try again in a few seconds.")
        page.headers["Retry-After"] = "5"
        return page
    return error_page(500, "Internal error", "Something went wrong on the server.")


_MAPPED = (SignInRequired, RequestValidationError, CrossSiteForm, WatchkeeperError, SpecError)


class PageRoute(APIRoute):
    """A route of the page: its errors become error pages (never problem JSON) and every
    answer carries the security headers and, unless it says otherwise,
    ``Cache-Control: no-store`` (a signed-in page is nobody else's)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def route(request: Request) -> Response:
            try:
                response = await handler(request)
            except _MAPPED as exc:
                response = _error(request, exc)
            response.headers.update(SECURITY_HEADERS)
            response.headers.setdefault("Cache-Control", "no-store")
            return response

        return route
