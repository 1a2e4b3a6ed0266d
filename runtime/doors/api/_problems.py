"""Errors as RFC 9457 problem details (``application/problem+json``), mapped in one
place from the runtime's exception tree, as the CLI maps it to exit codes.

=================== ====== ======================= =================================
exception           status type                    CLI exit code
=================== ====== ======================= =================================
SpecError           422    invalid-input           2 (every problem in ``errors``)
request validation  422    invalid-input           2
AuthError           401    unauthenticated         4 (with ``WWW-Authenticate``)
Forbidden           403    forbidden               4
NotFound            404    not-found               3 (also another tenant's ids)
Conflict            409    conflict                5
DatabaseUnavailable 503    unavailable             6 (with ``Retry-After``)
ConfigError         503    misconfigured           2
WatchkeeperError    500    internal                1
=================== ====== ======================= =================================

Each body is ``{"type", "title", "status", "detail", "instance", "errors"}`` where
``errors`` is a list of ``{"field", "message", "fix"}`` (empty when the problem is not
about a field).
"""

from __future__ import annotations

import re
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException

from watchkeeper.runtime import usecases as uc
from watchkeeper.triggers import SpecError, problem_of_error

__all__ = ["FieldProblem", "Problem", "install", "problem_response"]

PROBLEM_JSON = "application/problem+json"
TYPE_BASE = uc.PROBLEM_TYPE_BASE


class FieldProblem(BaseModel):
    """One thing wrong with the input: the field (a dotted path), what is wrong, and
    the fix."""

    field: str
    message: str
    fix: str = ""


class Problem(BaseModel):
    """RFC 9457 problem details."""

    type: str = Field(description="A URN naming the kind of problem.")
    title: str
    status: int
    detail: str = ""
    instance: str = Field("", description="The request path the problem is about.")
    errors: list[FieldProblem] = Field(default_factory=list)



_STATUS_TITLES = {400: "The request cannot be read (not JSON, or not the documented media "
                        "type)", 401: "Authentication is required",
                  403: "This principal may not do this", 404: "Not found",
                  409: "Conflicts with the current state", 422: "The input is not valid",
                  503: "The database is unreachable, or the deployment is misconfigured"}
PROBLEM_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"description": title,
             "content": {PROBLEM_JSON: {"schema": {"$ref": "#/components/schemas/Problem"}}}}
    for status, title in _STATUS_TITLES.items()
}
"""The problem responses every route may give (merged into each route's OpenAPI)."""


def problem_response(request: Request, exc: BaseException) -> JSONResponse:
    """The problem details response for ``exc`` (one of the mapped exceptions)."""
    status, slug, title = uc.problem_kind(exc)
    errors = [FieldProblem(**p) for p in exc.to_json()] if isinstance(exc, SpecError) else []
    body = Problem(type=TYPE_BASE + slug, title=title, status=status,
                   detail=str(exc) if status != 500 else "", instance=request.url.path,
                   errors=errors)
    headers = {}
    if status == 401:
        headers["WWW-Authenticate"] = 'Bearer realm="watchkeeper"'
    if status == 503:
        headers["Retry-After"] = "5"
    return JSONResponse(body.model_dump(), status_code=status, headers=headers,
                        media_type=PROBLEM_JSON)


def _sentence(text: str) -> str:
    return text if text.endswith((".", "!", "?")) else text + "."


def _validation(request: Request, exc: Exception) -> JSONResponse:
    """FastAPI's request validation errors, as one 422 listing every field."""
    assert isinstance(exc, RequestValidationError)
    errors = []
    for error in exc.errors():
        loc = [str(x) for x in error.get("loc", ()) if x not in ("body", "query", "path", "header")]
        where = ".".join(loc) or "request"
        if error.get("type") == "model_attributes_type" or where == "request":
            fix = ("send a JSON object as the body, with Content-Type: application/json "
                   "(the request schema is in /openapi.json)")
        elif error.get("type") == "extra_forbidden":
            fix = f"remove {where!r}: it is not a field of this request (see /openapi.json)"
        else:  # what fits instead, as a spec's problems say it
            found = problem_of_error(error, None, where)
            errors.append(FieldProblem(field=where, message=_sentence(found.problem),
                                       fix=found.fix))
            continue
        errors.append(FieldProblem(field=where, message=str(error["msg"]), fix=fix))
    detail = "; ".join(f"{e.field}: {e.message}" for e in errors)
    body = Problem(type=TYPE_BASE + "invalid-input", title="The input is not valid",
                   status=422, detail=detail, instance=request.url.path, errors=errors)
    return JSONResponse(body.model_dump(), status_code=422, media_type=PROBLEM_JSON)


def _http(request: Request, exc: Exception) -> JSONResponse:
    """Starlette's own errors (an unknown route: 404, a wrong method: 405 with every
    method the path has in ``Allow``, a body that is not JSON: 400) as problems."""
    assert isinstance(exc, HTTPException)
    body = Problem(type=TYPE_BASE + ("not-found" if exc.status_code == 404 else "http"),
                   title=str(exc.detail), status=exc.status_code, instance=request.url.path)
    headers = dict(getattr(exc, "headers", None) or {})
    if exc.status_code == 405:
        headers["Allow"] = ", ".join(sorted(_methods_of(request))) or "GET"
    return JSONResponse(body.model_dump(), status_code=exc.status_code, headers=headers,
                        media_type=PROBLEM_JSON)


def _methods_of(request: Request) -> set[str]:
    """Every method the OpenAPI document gives the request's path (a path served by
    several routes, one per method, lists them all)."""
    table = getattr(request.app.state, "allowed_methods", None)
    if table is None:
        table = []
        for template, operations in request.app.openapi()["paths"].items():
            pattern = re.sub(r"\\\{[^/]+?\\\}", "[^/]+", re.escape(template))
            table.append((re.compile(pattern), {m.upper() for m in operations}))
        request.app.state.allowed_methods = table
    path = request.url.path
    return set().union(*(methods for regex, methods in table if regex.fullmatch(path)))


def install(app: FastAPI) -> None:
    """Register the mapping on ``app``."""
    for cls, *_ in uc.PROBLEM_KINDS:
        app.add_exception_handler(cls, problem_response)  # type: ignore[arg-type]
    app.add_exception_handler(RequestValidationError, _validation)
    app.add_exception_handler(HTTPException, _http)
