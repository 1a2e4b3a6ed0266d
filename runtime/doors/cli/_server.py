"""The HTTP server of ``watchkeeper serve``: uvicorn, told when it listens or gave up.

Its own module so that only ``serve`` imports uvicorn.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import anyio
import uvicorn

from watchkeeper.triggers import SpecError

__all__ = ["Server"]


class Server(uvicorn.Server):
    """uvicorn, without its own signal handling (``serve`` stops the server and the
    supervisor together on SIGTERM / SIGINT), telling when it listens or gave up."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.settled = anyio.Event()

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    async def startup(self, sockets: Any = None) -> None:
        await super().startup(sockets)
        self.settled.set()

    async def run_until_stopped(self) -> None:
        """Serve until told to stop; a port that cannot be bound is bad input."""
        try:
            await self.serve()
        except SystemExit as exc:  # uvicorn exits when it cannot bind
            raise SpecError("--port", f"cannot listen on {self.config.host}:{self.config.port}.",
                            "choose a free port, e.g. --port 0 for any.") from exc
        finally:
            self.settled.set()
