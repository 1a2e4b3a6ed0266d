"""``watchkeeper mcp``: the MCP tools over stdio, for a chat client to launch, acting as
the agent key in ``WATCHKEEPER_AGENT_KEY`` (the same tools answer at ``/mcp`` on
``watchkeeper serve``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from watchkeeper.runtime import ConfigError
from watchkeeper.runtime import usecases as uc

from ._app import app, fail, settings, with_db

if TYPE_CHECKING:
    from watchkeeper.runtime import Database, Settings

__all__: list[str] = []


@app.command("mcp")
def mcp_cmd() -> None:
    """Serve the MCP tools (propose, preview, list, show, history, report, condition
    timeline; no confirm) over stdin/stdout as the agent key in WATCHKEEPER_AGENT_KEY,
    until stdin closes. stdout carries the protocol only; messages go to stderr."""
    if not (settings().agent_key or "").strip():
        raise fail(ConfigError(
            "setting WATCHKEEPER_AGENT_KEY: is not set. Fix: create an agent key with "
            "'watchkeeper keys create agent --tenant <tenant>' and set WATCHKEEPER_AGENT_KEY "
            "to it in the MCP client's configuration."))

    from watchkeeper.runtime.doors.mcp import serve_stdio  # here: the SDK costs every command 0.3 s

    async def run(db: Database, config: Settings) -> None:
        async with uc.read_standby(db, config):  # DATABASE_READ_URL: the tools' reads
            await serve_stdio(db, await uc.database_clock(db), config,
                              (config.agent_key or "").strip())
    with_db(run)
