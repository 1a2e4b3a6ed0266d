"""Who a tool call acts as: always an agent key of one tenant.

Over stdio the key comes from ``WATCHKEEPER_AGENT_KEY`` and is authenticated again on
every call (a revoked key stops working at once, as on the HTTP API). Over streamable
HTTP, :class:`AgentBearer` authenticates every request's ``Authorization: Bearer`` and
hands the principal to the tools in the ASGI scope.

Any other credential is refused (:class:`Forbidden`, HTTP 403): a user token, an app
key acting for a user, an operator key or the tick secret. The tools are the chat
agent's door; a model holding a person's or an operator's credential would act with
authority no agent has (DESIGN "Who may do what"), and those principals have the HTTP
API and the CLI.
"""

from __future__ import annotations

from typing import Any

from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.mcpserver import Context
from starlette.authentication import AuthCredentials
from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from watchkeeper.runtime import AuthError, Clock, Database, Forbidden
from watchkeeper.runtime import usecases as uc

from ._results import KNOWN, problem_of

__all__ = ["PRINCIPAL", "AgentBearer", "authenticate_agent", "principal_of"]

PRINCIPAL = "watchkeeper.principal"
"""The ASGI scope key under which :class:`AgentBearer` leaves the request's principal."""

_NOT_AGENT = ("the MCP tools act as an agent key (wk_agent_...), and this is {what}. "
              "Fix: create an agent key with 'watchkeeper keys create agent "
              "--tenant <tenant>' and send that; confirming and controlling agreements is "
              "the owner's, through the HTTP API or the CLI.")


async def authenticate_agent(db: Database, clock: Clock, token: str | None) -> uc.AgentPrincipal:
    """The agent principal of ``token``.

    Raises:
        AuthError: no token, or an unknown or revoked one (HTTP 401).
        Forbidden: a valid credential that is not an agent key, or any app key (HTTP
            403).
    """
    if token is not None and token.startswith("wk_app_"):
        # an app key authenticates only as the user it names (On-Behalf-Of), which the
        # tools never accept: refuse it by its public kind, before any lookup
        raise Forbidden(_NOT_AGENT.format(what="an app key"))
    principal = await uc.authenticate_bearer(db, clock, token)
    if not isinstance(principal, uc.AgentPrincipal):
        kind = uc.principal_kind(principal)
        raise Forbidden(_NOT_AGENT.format(
            what=f"{'an' if kind == 'operator' else 'a'} {kind} credential"))
    return principal


async def principal_of(ctx: Context, db: Database, clock: Clock,
                       agent_key: str | None) -> uc.AgentPrincipal:
    """The principal of the call in ``ctx``: the one :class:`AgentBearer` put on its
    HTTP request, else (stdio) ``agent_key`` authenticated now.

    Raises:
        AuthError, Forbidden: as :func:`authenticate_agent`.
    """
    request = ctx.request_context.request
    if request is not None:
        found = getattr(request, "scope", {}).get(PRINCIPAL)
        if isinstance(found, uc.AgentPrincipal):
            return found
        raise AuthError("no credential: send Authorization: Bearer <agent key>")
    return await authenticate_agent(db, clock, agent_key)


class AgentBearer:
    """ASGI middleware: every HTTP request must carry ``Authorization: Bearer <agent
    key>``; a refusal is answered at once as problem details (401 with
    ``WWW-Authenticate``, 403, or 503 with ``Retry-After``).

    An accepted request carries the principal under :data:`PRINCIPAL`, and the SDK's
    ``AuthenticatedUser`` under ``user``, so the SDK's session manager binds each MCP
    session to the key that opened it (another key presenting its id is answered as if
    it did not exist).
    """

    def __init__(self, app: ASGIApp, db: Database, clock: Clock) -> None:
        self.app, self.db, self.clock = app, db, clock

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        scheme, _, token = Headers(scope=scope).get("authorization", "").partition(" ")
        try:
            if scheme.lower() != "bearer" or not token.strip():
                raise AuthError("no credential: send Authorization: Bearer <agent key>")
            principal = await authenticate_agent(self.db, self.clock, token.strip())
        except KNOWN as exc:
            await _problem(exc, scope)(scope, receive, send)
            return
        user = AuthenticatedUser(AccessToken(token=principal.key_id, client_id=principal.label,
                                             scopes=[]))
        await self.app({**scope, "user": user, "auth": AuthCredentials([]), PRINCIPAL: principal},
                       receive, send)


def _problem(exc: BaseException, scope: Scope) -> JSONResponse:
    body: dict[str, Any] = problem_of(exc).model_dump(mode="json")
    body["instance"] = scope.get("path", "")
    headers = {}
    if body["status"] == 401:
        headers["WWW-Authenticate"] = 'Bearer realm="watchkeeper"'
    if body["status"] == 503:
        headers["Retry-After"] = "5"
    return JSONResponse(body, status_code=body["status"], headers=headers,
                        media_type="application/problem+json")
