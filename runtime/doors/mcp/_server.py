"""The MCP server over the tools, and its two transports: stdio (``watchkeeper mcp``)
and streamable HTTP (mounted at ``/mcp`` by the HTTP API)."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version

from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from starlette.types import ASGIApp

from watchkeeper.runtime import Clock, Database, Settings

from ._auth import AgentBearer, authenticate_agent
from ._tools import Tools

__all__ = ["PATH", "HttpDoor", "build_server", "http_door", "serve_stdio"]

PATH = "/mcp"
"""Where the streamable HTTP transport answers."""

INSTRUCTIONS = """\
watchkeeper keeps standing agreements between a user and their agents: "check my holdings \
every Wednesday at 20:00 Europe/Paris". You propose an agreement for a user with \
propose_agreement; nothing runs until that user confirms the exact revision, presenting the \
spec_hash you were given, through the HTTP API or the CLI (the answer says where). You cannot \
confirm, pause, resume, cancel or trigger anything. Show the user the summary and the next \
occurrences (with their DST notes) before they confirm. A refused call answers problem \
details: for a spec, every problem at once, each with its field and fix. Read agreements, \
task history, reports and condition timelines of your tenant with the other tools."""


def _version() -> str:
    try:
        return version("watchkeeper")
    except PackageNotFoundError:  # pragma: no cover - a source tree that was never installed
        return "0"


def build_server(db: Database, clock: Clock, settings: Settings, *,
                 agent_key: str | None = None) -> MCPServer:
    """The MCP server with every tool, acting as ``agent_key`` on stdio (over HTTP each
    request brings its own key; leave it ``None``)."""
    return MCPServer("watchkeeper", title="watchkeeper", version=_version(),
                     instructions=INSTRUCTIONS, log_level="WARNING",
                     tools=Tools(db, clock, settings, agent_key).all())


async def serve_stdio(db: Database, clock: Clock, settings: Settings, agent_key: str) -> None:
    """Serve the tools over this process's stdin and stdout until stdin closes, as the
    agent key ``agent_key`` (authenticated first, then again on every call).

    Raises:
        AuthError: the key is unknown or revoked; Forbidden: it is not an agent key
            (both before anything is served).
    """
    await authenticate_agent(db, clock, agent_key)
    await build_server(db, clock, settings, agent_key=agent_key).run_stdio_async()


@dataclass(frozen=True, slots=True)
class HttpDoor:
    """The streamable HTTP transport: ``app`` answers ``path`` (every request
    authenticated by :class:`AgentBearer`); :meth:`lifespan` runs the SDK's session
    manager, which must enclose serving ``app`` — the lifespan of the app that routes
    to it — and can run once."""

    server: MCPServer
    app: ASGIApp
    path: str = PATH

    def lifespan(self, _app: object = None) -> AbstractAsyncContextManager[None]:
        """The session manager, running for as long as the context lasts (a Starlette
        or FastAPI ``lifespan``: it takes the app and ignores it).

        Raises:
            RuntimeError: entered a second time.
        """
        return self.server.session_manager.run()


def http_door(db: Database, clock: Clock, settings: Settings) -> HttpDoor:
    """The tools over streamable HTTP at :data:`PATH`.

    DNS-rebinding protection (the SDK's Host/Origin allow-list) is off: the server may
    be reached under any name, and every request must carry an agent key, which a page
    that rebinds a name to this address does not have.
    """
    server = build_server(db, clock, settings)
    inner = server.streamable_http_app(
        streamable_http_path=PATH,
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False))
    return HttpDoor(server, AgentBearer(inner, db, clock))
