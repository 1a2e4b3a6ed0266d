"""In-process agents for tests: an agent whose run is a Python function, a definition
whose first slot is admitted for it, and the CLI run against a test database."""

from __future__ import annotations

import os
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
from _helpers import confirmed

from watchkeeper.runtime.engine._agents import (
    AgentCatalog,
    AgentContext,
    AgentResult,
    Continuation,
)
from watchkeeper.runtime.engine._clock import FakeClock
from watchkeeper.runtime.engine._scheduler import tick
from watchkeeper.runtime.engine._worker import Worker
from watchkeeper.runtime.store._db import Database

SCRIPTED_START = "2026-06-01T00:00:00Z"
"""The anchor of :func:`admitted`'s hourly definition."""

GO_ON = Continuation("half done", "finish it")
"""A continuation an agent asks for."""


class Scripted:
    """An agent whose run is ``fn(ctx)``."""

    def __init__(self, fn: Callable[[AgentContext], Awaitable[AgentResult]]) -> None:
        self.fn = fn

    async def run(self, ctx: AgentContext) -> AgentResult:
        return await self.fn(ctx)


async def admitted(db: Database, clock: FakeClock, tmp_path: Path,
                   fn: Callable[[AgentContext], Awaitable[AgentResult]],
                   **spec: Any) -> Worker:
    """Definition d1 (agent 'py' = ``fn``), its first slot admitted; a worker for it."""
    agents = AgentCatalog()
    agents.add("py", Scripted(fn))
    await confirmed(db, clock, {"trigger": {"type": "interval", "every": 3600, "anchor": SCRIPTED_START},
                                "agent": {"name": "py"}, **spec})
    clock.advance(1)
    assert (await tick(db, clock)).admitted == 1
    return Worker(db, clock, agents, worker_id="w", artifact_root=tmp_path)


async def cli(dsn: str, home: Path, *args: str) -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env.update(WATCHKEEPER_HOME=str(home), COLUMNS="200", DATABASE_URL=dsn)
    result = await anyio.run_process([sys.executable, "-m", "watchkeeper", *args], env=env,
                                     check=False)
    return result.returncode, result.stdout.decode(), result.stderr.decode()
