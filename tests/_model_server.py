"""A local OpenAI-compatible chat-completions endpoint for the model agent's tests.

A real HTTP server (uvicorn on a free loopback port) speaking ``POST
/v1/chat/completions`` (streaming off, a ``usage`` block in every answer), scripted per
test: each request takes the next step of the script. Steps answer with tool calls,
with the structured answer (the ``final_result`` tool call pydantic-ai asks for), with
an HTTP error status and headers, or hold the request until released (a slow model).
Every request body the server received is kept, in order, with the step it got.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import anyio
import uvicorn
from _api import QuietServer
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

ANSWER_TOOL = "final_result"
"""The tool pydantic-ai offers for a structured answer (its ``ToolOutput`` default name)."""


@dataclass
class Step:
    """One scripted response: ``calls`` (tool name, arguments) with ``usage`` (prompt,
    completion tokens); or ``status`` with ``headers``; ``hold`` first waits for the
    event (set by the test, or never)."""

    calls: list[tuple[str, Any]] = field(default_factory=list)
    usage: tuple[int, int] = (100, 20)
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    hold: anyio.Event | None = None
    model: str = "test-model-2026"


def tools(*calls: tuple[str, Any], usage: tuple[int, int] = (100, 20)) -> Step:
    """A response calling ``calls`` (each ``(name, arguments)``)."""
    return Step(list(calls), usage)


def answer(report: str = "# Report\n\nAll quiet.\n", importance: str = "normal",
           headline: str = "All quiet", *, usage: tuple[int, int] = (100, 20),
           **extra: Any) -> Step:
    """A response giving the structured answer (``extra``: e.g. ``continuation``)."""
    return Step([(ANSWER_TOOL, {"headline": headline, "importance": importance,
                                "report": report, **extra})], usage)


def status(code: int, **headers: str) -> Step:
    """An error response (``retry_after="7"`` -> header ``Retry-After: 7``)."""
    return Step(status=code, headers={k.replace("_", "-"): v for k, v in headers.items()})


def held(release: anyio.Event | None = None, then: Step | None = None) -> Step:
    """A request held until ``release`` is set (never, without one), then answered as
    ``then`` (default: a plain answer)."""
    step = then or answer()
    step.hold = release or anyio.Event()
    return step


@dataclass
class ModelServer:
    """The running endpoint: ``base_url`` (ending ``/v1``), the ``script`` still to
    serve, and every ``received`` request body."""

    base_url: str = ""
    script: list[Step] = field(default_factory=list)
    received: list[dict[str, Any]] = field(default_factory=list)
    held: list[anyio.Event] = field(default_factory=list)
    arrived: anyio.Event = field(default_factory=anyio.Event)

    async def wait_for_requests(self, count: int) -> None:
        """Until ``count`` requests have arrived (a test's sync point; bounded at 10 s)."""
        with anyio.fail_after(10):
            while len(self.received) < count:
                await self.arrived.wait()
                self.arrived = anyio.Event()

    async def chat(self, request: Request) -> JSONResponse:
        body = await request.json()
        self.received.append(body)
        self.arrived.set()
        if not self.script:
            return JSONResponse({"error": {"message": "the test script is exhausted"}},
                                status_code=500)
        step = self.script.pop(0)
        if step.hold is not None:
            self.held.append(step.hold)
            await step.hold.wait()
        if step.status != 200:
            return JSONResponse({"error": {"message": f"scripted {step.status}",
                                           "type": "scripted"}},
                                status_code=step.status, headers=step.headers)
        calls = [{"id": f"call_{len(self.received)}_{i}", "type": "function",
                  "function": {"name": name, "arguments": json.dumps(args)}}
                 for i, (name, args) in enumerate(step.calls)]
        prompt, completion = step.usage
        return JSONResponse({
            "id": f"chatcmpl-{len(self.received)}", "object": "chat.completion",
            "created": 1_780_000_000, "model": step.model,
            "choices": [{"index": 0, "finish_reason": "tool_calls",
                         "message": {"role": "assistant", "content": None, "tool_calls": calls}}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                      "total_tokens": prompt + completion}})


@contextlib.asynccontextmanager
async def model_server(*script: Step) -> AsyncIterator[ModelServer]:
    """Serve ``script`` on a free loopback port for the block's duration."""
    server_state = ModelServer(script=list(script))
    app = Starlette(routes=[Route("/v1/chat/completions", server_state.chat, methods=["POST"])])
    server = QuietServer(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning",
                                        lifespan="off", access_log=False))
    async with anyio.create_task_group() as tg:
        tg.start_soon(server.serve)
        with anyio.fail_after(10):
            await server.listening.wait()
        port = server.servers[0].sockets[0].getsockname()[1]
        server_state.base_url = f"http://127.0.0.1:{port}/v1"
        try:
            yield server_state
        finally:
            for event in server_state.held:
                event.set()
            server.should_exit = True
            server.force_exit = True
