"""The HTTP API's app factory: routers, problem details, the OpenAPI document (3.1,
with the spec model as ``#/components/schemas/Spec``), and optionally the MCP tools'
streamable HTTP transport at ``/mcp`` (:mod:`watchkeeper.runtime.doors.mcp`)."""

from __future__ import annotations

from typing import Any

from fastapi import Depends, FastAPI

from watchkeeper.runtime import Supervisor
from watchkeeper.triggers import SpecV1

from .. import page
from . import _admin, _definitions, _health, _history, _outbox, _tick
from ._deps import Services, plain_input
from ._guard import RequestGuard
from ._models import SPEC_MARKER
from ._problems import Problem, install
from ._reads import ReadHeaders

__all__ = ["create_app"]

DESCRIPTION = """\
watchkeeper keeps the standing agreements people make with their AI agents: an agent
proposes a schedule or a condition, the owner confirms the exact revision by its
`spec_hash`, and watchkeeper decides when a bounded task may run.

Authenticate with `Authorization: Bearer <credential>`: an **agent key** proposes and
reads its tenant; a **user token** confirms and controls its owner's definitions; an
**app key** acts for a user it names in `On-Behalf-Of`; an **operator key** may do
everything in its tenant; the **tick secret** drives `/v1/tick`. Another tenant's
resources answer 404. Errors are RFC 9457 problem details with every field problem
listed in `errors`. No string may hold a NUL character (422 naming the field); a body
over the server's limit (1 MiB by default) is refused 413 before it is parsed.
"""


def create_app(services: Services, *, supervisor: Supervisor | None = None,
               title: str = "watchkeeper", mcp: bool = False) -> FastAPI:
    """The API over ``services`` (the caller owns the database's lifetime); with
    ``supervisor``, ``/metrics`` includes its counters; with ``mcp``, the MCP tools answer
    at ``/mcp`` (Bearer agent key) and the app's lifespan runs their session manager, so
    the server must run the lifespan (uvicorn's ``lifespan="on"``)."""
    door = None
    if mcp:
        from watchkeeper.runtime.doors.mcp import http_door  # the SDK only when asked
        door = http_door(services.db, services.clock, services.settings)
    app = FastAPI(title=title, version="1", description=DESCRIPTION,
                  lifespan=door.lifespan if door else None,
                  docs_url="/docs", redoc_url=None, openapi_url="/openapi.json")
    if door:
        app.add_route(door.path, door.app, include_in_schema=False)  # type: ignore[arg-type]
    app.state.services = services
    app.state.supervisor = supervisor
    install(app)
    app.add_middleware(ReadHeaders)  # inside the guard: where a read answered, how old
    app.add_middleware(RequestGuard, max_body_bytes=services.settings.max_body_bytes)
    for module in (_definitions, _history, _outbox, _admin, _tick):
        app.include_router(module.router, dependencies=[Depends(plain_input)])
    app.include_router(_health.router)
    app.include_router(page.router)  # the history page, at /
    _with_spec_schema(app)
    return app


def _with_spec_schema(app: FastAPI) -> None:
    """Put the spec model's JSON Schema (and its definitions) into the OpenAPI
    components, and the Problem schema, once, when the document is first built."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        document = build()
        schemas = document.setdefault("components", {}).setdefault("schemas", {})
        spec = SpecV1.model_json_schema(ref_template="#/components/schemas/{model}")
        schemas.update(spec.pop("$defs", {}))
        schemas["Spec"] = spec
        schemas.setdefault("Problem", Problem.model_json_schema(
            ref_template="#/components/schemas/{model}"))
        for name, schema in Problem.model_json_schema(
                ref_template="#/components/schemas/{model}").get("$defs", {}).items():
            schemas.setdefault(name, schema)
        _point_at_spec(document)
        _pair_on_behalf_of(document)
        app.openapi_schema = document
        return document

    app.openapi = openapi  # type: ignore[method-assign]


def _pair_on_behalf_of(document: dict[str, Any]) -> None:
    """Each operation's security, as alternatives: a Bearer credential alone, or a
    Bearer app key together with On-Behalf-Of (never On-Behalf-Of alone)."""
    for operations in document.get("paths", {}).values():
        for operation in operations.values():
            names = [name for requirement in operation.get("security", ())
                     for name in requirement]
            if "OnBehalfOf" in names:
                operation["security"] = [{"HTTPBearer": []},
                                         {"HTTPBearer": [], "OnBehalfOf": []}]


def _point_at_spec(node: Any) -> None:
    """Replace every placeholder schema of a spec body (``SPEC_MARKER``) by a reference
    to ``#/components/schemas/Spec``, in place."""
    if isinstance(node, dict):
        for key, value in node.items():
            if isinstance(value, dict) and value.get(SPEC_MARKER):
                node[key] = {"$ref": "#/components/schemas/Spec"}
            else:
                _point_at_spec(value)
    elif isinstance(node, list):
        for index, value in enumerate(node):
            if isinstance(value, dict) and value.get(SPEC_MARKER):
                node[index] = {"$ref": "#/components/schemas/Spec"}
            else:
                _point_at_spec(value)
