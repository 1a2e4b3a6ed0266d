"""``watchkeeper serve`` as a child process, the way a user starts it: one helper for the
tests that need the real command (MCP over HTTP with SIGTERM, schemathesis).

``serve`` listens at once and opens the database meanwhile (``/readyz`` answers 503
until migrations and the sealing check are done), so a client that starts before then
is refused with 503, as it should be. :func:`served` waits for ``serving ...`` on stderr
and then for ``/readyz`` 200, and never leaves the process behind: whatever the test
does, the block ends with the process gone (SIGTERM, then SIGKILL after ``stop_after``
seconds), so a failed assertion cannot turn into a test run that waits forever.
"""

from __future__ import annotations

import contextlib
import re
import sys
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass

import anyio
import httpx
from anyio.abc import Process

__all__ = ["Served", "served"]


@dataclass
class Served:
    """A running ``serve``: the process, its base URL (``http://127.0.0.1:PORT``) and what
    it printed on stderr up to its ``serving`` line."""

    process: Process
    url: str
    seen: bytes

    async def rest_of_stderr(self) -> str:
        """Everything printed on stderr, from the start to the process's end."""
        assert self.process.stderr is not None
        return (self.seen + b"".join([chunk async for chunk in self.process.stderr])).decode()


@contextlib.asynccontextmanager
async def served(env: Mapping[str, str], *args: str, start_within: float = 30,
                 stop_after: float = 30) -> AsyncIterator[Served]:
    """Start ``python -m watchkeeper serve --port 0 *args`` with ``env``; yield once it
    is ready (``/readyz`` 200).

    Raises:
        AssertionError: it printed no ``serving`` line (what it printed is the message).
        TimeoutError: not ready within ``start_within`` seconds.
    """
    process = await anyio.open_process([sys.executable, "-m", "watchkeeper", "serve",
                                        "--port", "0", *args], env=dict(env))
    try:
        assert process.stderr is not None
        seen = b""
        with anyio.fail_after(start_within):
            while (found := re.search(rb"serving (http://[0-9.]+:\d+)", seen)) is None:
                try:
                    seen += await process.stderr.receive()
                except anyio.EndOfStream:
                    raise AssertionError(seen.decode()) from None
            url = found.group(1).decode()
            async with httpx.AsyncClient(timeout=5) as client:
                # another process's readiness: polled, as a load balancer would
                while (await client.get(f"{url}/readyz")).status_code != 200:  # noqa: ASYNC110
                    await anyio.sleep(0.1)
        yield Served(process, url, seen)
    finally:
        with anyio.CancelScope(shield=True):
            if process.returncode is None:
                process.terminate()
                with anyio.move_on_after(stop_after):
                    await process.wait()
            if process.returncode is None:
                process.kill()
                await process.wait()
            await process.aclose()
