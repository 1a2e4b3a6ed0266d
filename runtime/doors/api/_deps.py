"""What every route depends on: the services of the app (database, clock, settings), the
authenticated principal, and opaque keyset cursors."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer

from watchkeeper.runtime import AgentCatalog, Clock, Database, Settings
from watchkeeper.runtime import usecases as uc
from watchkeeper.sources import SourceRegistry

__all__ = ["Authenticated", "Services", "Svc", "plain_input", "principal"]


@dataclass(frozen=True, slots=True)
class Services:
    """What the app shares between requests."""

    db: Database
    clock: Clock
    settings: Settings
    agents: AgentCatalog = field(default_factory=AgentCatalog)
    sources: SourceRegistry = field(default_factory=SourceRegistry)


def services(request: Request) -> Services:
    """The app's services (set by the app factory's lifespan)."""
    return request.app.state.services  # type: ignore[no-any-return]


Svc = Annotated[Services, Depends(services)]

_bearer = HTTPBearer(auto_error=False, description=(
    "An agent, app, operator or tick key (wk_<kind>_...), or a user token from "
    "'watchkeeper users add'. An app key also sends On-Behalf-Of: <user id>."))

_on_behalf_of = APIKeyHeader(
    name="On-Behalf-Of", scheme_name="OnBehalfOf", auto_error=False, description=(
        "With an app key (and only then): the user of its tenant it acts for (the app "
        "authenticated that user itself)."))
"""Part of the authentication, not a parameter of each operation: the document's
security requirements say which credentials go together (see ``_app``)."""


async def principal(
    svc: Svc,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    on_behalf_of: Annotated[str | None, Depends(_on_behalf_of)] = None,
) -> uc.Principal:
    """The principal of the request's Bearer credential.

    Raises:
        AuthError: no credential, or one that is unknown, revoked or misused (HTTP 401).
    """
    token = credentials.credentials if credentials is not None else None
    return await uc.authenticate_bearer(svc.db, svc.clock, token, on_behalf_of=on_behalf_of)


Authenticated = Annotated[uc.Principal, Depends(principal)]


async def plain_input(request: Request) -> None:
    """Every string of the request — path and query parameters, headers, the JSON body
    (read once the route has read it; the body limit is :mod:`._guard`'s; a ``spec`` is
    left to the spec parser, which names its fields as a spec file does) — passes the
    doors' shared check (:func:`~watchkeeper.runtime.usecases.check_input`): no NUL
    character, no lone surrogate, each named by its field.

    Raises:
        SpecError: every such field (HTTP 422).
    """
    query = request.query_params
    values: dict[str, Any] = {name: (found[0] if len(found) == 1 else found)
                              for name in query for found in [query.getlist(name)]}
    uc.check_input({**values, **request.path_params})
    uc.check_input({name: value for name, value in request.headers.items()})
    body = await request.body()
    if body:
        try:
            parsed = json.loads(body)
        except ValueError:
            return  # not JSON: the route's own parsing answers it
        if isinstance(parsed, dict):  # a spec is checked by its parser, fields as in a spec
            uc.check_input({k: v for k, v in parsed.items() if k != "spec"})
        else:
            uc.check_input({"body": parsed})
