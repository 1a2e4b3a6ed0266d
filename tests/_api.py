"""A real uvicorn serving the HTTP API over a test's database, and an httpx client."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import uvicorn

from watchkeeper.runtime import Settings
from watchkeeper.runtime.doors.api import Services, create_app
from watchkeeper.runtime.engine._clock import Clock
from watchkeeper.runtime.store._db import Database


class QuietServer(uvicorn.Server):
    """uvicorn without signal handlers (a test process's signals are pytest's)."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.listening = anyio.Event()

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    async def startup(self, sockets: Any = None) -> None:
        await super().startup(sockets)
        self.listening.set()


@dataclass
class Api:
    """A running API: its base URL and a client bound to it."""

    url: str
    client: httpx.AsyncClient

    async def call(self, method: str, path: str, token: str | None = None, *,
                   body: Any = None, headers: dict[str, str] | None = None,
                   **params: Any) -> httpx.Response:
        """One request, Bearer ``token`` when given."""
        sent = dict(headers or {})
        if token is not None:
            sent["Authorization"] = f"Bearer {token}"
        return await self.client.request(method, path, json=body, headers=sent,
                                         params={k: v for k, v in params.items() if v is not None})


@contextlib.asynccontextmanager
async def serving(db: Database, clock: Clock, home: Path, *, mcp: bool = False,
                  supervisor: Any = None, settings: Settings | None = None,
                  **services: Any) -> AsyncIterator[Api]:
    """Serve the API over ``db`` on a free loopback port for the block's duration (with
    ``mcp``, the MCP tools at ``/mcp`` too, and the app's lifespan running them; with
    ``supervisor``, the probes and metrics report it; ``settings`` default to the home and
    a 60 s minimum interval)."""
    settings = settings or Settings(home=home, min_interval=60)
    app = create_app(Services(db, clock, settings, **services), mcp=mcp, supervisor=supervisor)
    server = QuietServer(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning",
                                        lifespan="on" if mcp else "off", access_log=False))
    async with anyio.create_task_group() as tg:
        tg.start_soon(server.serve)
        with anyio.fail_after(10):
            await server.listening.wait()
        port = server.servers[0].sockets[0].getsockname()[1]
        url = f"http://127.0.0.1:{port}"
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            yield Api(url, client)
        server.should_exit = True
