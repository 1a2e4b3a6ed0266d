"""What every HTTP answer gets before any route runs: a body limit and security headers.

* **Body limit.** The request body is read here, before anything parses it, up to
  ``WATCHKEEPER_MAX_BODY_BYTES`` (1 MiB by default): a ``Content-Length`` above it, or a
  chunked body that grows past it, is answered 413 with problem details naming ``body``,
  and nothing of it is kept or parsed. The routes and ``/mcp`` then read the buffered
  body. The rest of a refused body is read and dropped, up to four times the limit, so
  the client (still sending) reads the 413 instead of a reset connection; a larger one
  is answered at once and the connection closed.
* **Headers.** Every answer carries ``X-Content-Type-Options: nosniff`` (no browser
  guesses a JSON or markdown answer to be HTML); every answer that is not HTML carries
  ``Content-Security-Policy: default-src 'none'; frame-ancestors 'none'`` (nothing in it
  may run, load or be framed). HTML answers (the page, ``/docs``) keep their own policy.

A pure ASGI middleware (no ``BaseHTTPMiddleware``): streaming answers (the MCP
transport's server-sent events) pass through untouched but for the headers.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from watchkeeper.runtime import usecases as uc

__all__ = ["NON_HTML_CSP", "RequestGuard"]

NON_HTML_CSP = "default-src 'none'; frame-ancestors 'none'"
"""The policy of every answer that is not HTML."""


class RequestGuard:
    """The body limit and the security headers around ``app``."""

    def __init__(self, app: ASGIApp, *, max_body_bytes: int) -> None:
        self.app, self.limit = app, max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        send = _with_headers(send)
        declared = _content_length(scope)
        if declared is not None and declared > self.limit:
            if declared <= 4 * self.limit:
                await _drop(receive, 4 * self.limit)
            await self._too_large(scope, send, declared)
            return
        chunks: list[bytes] = []
        size, more = 0, True
        while more:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.limit:
                if message.get("more_body", False):
                    await _drop(receive, 4 * self.limit - size)
                await self._too_large(scope, send, None)
                return
            chunks.append(chunk)
            more = message.get("more_body", False)
        await self.app(scope, _replay(b"".join(chunks), receive), send)

    async def _too_large(self, scope: Scope, send: Send, declared: int | None) -> None:
        size = f"{declared} bytes" if declared is not None else "longer than that"
        body = {"type": uc.PROBLEM_TYPE_BASE + "too-large",
                "title": "The request body is too large", "status": 413,
                "detail": f"the body is {size}; this server reads at most {self.limit} bytes",
                "instance": scope.get("path", ""),
                "errors": [{"field": "body",
                            "message": f"is {size}, more than the limit of {self.limit} bytes "
                                       "(WATCHKEEPER_MAX_BODY_BYTES).",
                            "fix": "send a smaller body: free text has its own limits in "
                                   "/openapi.json (maxLength); the operator may raise "
                                   "WATCHKEEPER_MAX_BODY_BYTES."}]}
        data = json.dumps(body).encode()
        await send({"type": "http.response.start", "status": 413, "headers": [
            (b"content-type", b"application/problem+json"),
            (b"content-length", str(len(data)).encode()), (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": data})


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


async def _drop(receive: Receive, budget: int) -> None:
    """Read and drop the rest of a body, at most ``budget`` more bytes."""
    while budget > 0:
        message = await receive()
        if message["type"] != "http.request":
            return
        budget -= len(message.get("body", b""))
        if not message.get("more_body", False):
            return


def _replay(body: bytes, receive: Receive) -> Receive:
    """``body`` as one message, then the client's own messages (a disconnect)."""
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed


def _with_headers(send: Send) -> Send:
    """``send`` adding ``nosniff`` to every answer and the CSP to a non-HTML one."""

    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            headers: list[Any] = list(message.get("headers", ()))
            names = {bytes(name).lower() for name, _ in headers}
            if b"x-content-type-options" not in names:
                headers.append((b"x-content-type-options", b"nosniff"))
            kind = next((bytes(v).lower() for n, v in headers
                         if bytes(n).lower() == b"content-type"), b"")
            if b"content-security-policy" not in names and not kind.startswith(b"text/html"):
                headers.append((b"content-security-policy", NON_HTML_CSP.encode()))
            message = {**message, "headers": headers}
        await send(message)

    return sending
