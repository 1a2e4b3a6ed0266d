"""What every route depends on: the services of the app (database, clock, settings), the
authenticated principal, and opaque keyset cursors."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated

from fastapi import Depends, Header, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from watchkeeper.runtime import AgentCatalog, Clock, Database, Settings
from watchkeeper.runtime import usecases as uc
from watchkeeper.sources import SourceRegistry

__all__ = ["Authenticated", "Services", "Svc", "principal"]


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


async def principal(
    svc: Svc,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    on_behalf_of: Annotated[str | None, Header(
        alias="On-Behalf-Of", description="With an app key: the user of its tenant it acts for "
                                          "(the app authenticated that user itself).")] = None,
) -> uc.Principal:
    """The principal of the request's Bearer credential.

    Raises:
        AuthError: no credential, or one that is unknown, revoked or misused (HTTP 401).
    """
    token = credentials.credentials if credentials is not None else None
    return await uc.authenticate_bearer(svc.db, svc.clock, token, on_behalf_of=on_behalf_of)


Authenticated = Annotated[uc.Principal, Depends(principal)]
