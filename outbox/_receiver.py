"""A webhook receiver that verifies Standard Webhooks signatures and dedups by
``webhook-id``: an ASGI app, and a helper that serves it with uvicorn on 127.0.0.1.

Used by ``watchkeeper demo`` and ``watchkeeper receiver`` (to try webhooks locally), by
the tests (with a configurable share of injected failures: 500, 429 and timeouts) and
by the outbox benchmark.
"""

from __future__ import annotations

import base64
import hmac
import json
import random
import socket
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import uvicorn
from standardwebhooks import Webhook

__all__ = ["Received", "Receiver", "SignatureInvalid", "serve", "verify"]

Scope = dict[str, Any]
Message = dict[str, Any]


class SignatureInvalid(Exception):
    """The request is not signed by any of the receiver's secrets (or is stale)."""


def verify(secrets: tuple[str, ...], headers: dict[str, str], body: bytes, now: datetime,
           tolerance: timedelta = timedelta(minutes=5)) -> str:
    """Check a Standard Webhooks request; return its webhook-id.

    The HMAC is the library's (``Webhook.sign``); freshness is checked against ``now``
    (injected, so tests with a fake clock verify as strictly as a live receiver).

    Raises:
        SignatureInvalid: missing headers, a stale or future timestamp, or no valid
            ``v1`` signature for any secret.
    """
    msg_id = headers.get("webhook-id")
    stamp = headers.get("webhook-timestamp")
    signatures = headers.get("webhook-signature")
    if not (msg_id and stamp and signatures):
        raise SignatureInvalid("missing Standard Webhooks headers")
    try:
        sent = datetime.fromtimestamp(int(stamp), UTC)
    except (ValueError, OverflowError, OSError) as exc:
        raise SignatureInvalid("bad webhook-timestamp") from exc
    if abs(now - sent) > tolerance:
        raise SignatureInvalid("webhook-timestamp outside the tolerance")
    try:
        text = body.decode()
    except UnicodeDecodeError as exc:
        raise SignatureInvalid("the body is not UTF-8") from exc
    offered = []
    for part in signatures.split():
        if part.startswith("v1,"):
            try:
                offered.append(base64.b64decode(part[3:], validate=True))
            except ValueError:  # binascii.Error is a ValueError
                continue
    for secret in secrets:
        expected = Webhook(secret).sign(msg_id, sent.replace(tzinfo=None), text).split(",", 1)[1]
        if any(hmac.compare_digest(base64.b64decode(expected), o) for o in offered):
            return msg_id
    raise SignatureInvalid("no valid signature")


@dataclass
class Received:
    """What the receiver saw of one webhook-id."""

    requests: int = 0
    answered_ok: int = 0
    payload: dict[str, Any] | None = None


@dataclass
class Receiver:
    """The ASGI app.

    Args:
        secrets: accepted signing secrets.
        now: the clock freshness is checked against.
        fail_share: share of requests answered with a failure (0 to 1).
        failures: the failure kinds drawn from: ``"500"``, ``"429"``, ``"timeout"``.
        timeout_seconds: how long a "timeout" failure holds the request.
        seed: makes the failure draw reproducible.
        fail_first: answer the first N requests of every webhook-id with 503.

    Any path is accepted. A request that fails verification is answered 401 (counted
    in ``rejected``, its reason in ``last_rejection``); a webhook-id seen before is
    answered 200 again (``{"duplicate": true}``) but processed once.
    """

    secrets: tuple[str, ...]
    now: Callable[[], datetime] = lambda: datetime.now(UTC)  # noqa: E731
    fail_share: float = 0.0
    failures: tuple[str, ...] = ("500", "429", "timeout")
    timeout_seconds: float = 0.5
    seed: int = 0
    fail_first: int = 0
    seen: dict[str, Received] = field(default_factory=dict)
    rejected: int = 0
    last_rejection: str = ""
    _random: random.Random = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._random = random.Random(self.seed)

    @property
    def processed(self) -> int:
        """Distinct webhook-ids processed (each once, however often it was sent)."""
        return sum(1 for r in self.seen.values() if r.answered_ok)

    async def __call__(self, scope: Scope, receive: Callable[[], Any],
                       send: Callable[[Message], Any]) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return  # the sender went away mid-request (killed, timed out): none received
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        try:
            msg_id = verify(self.secrets, headers, body, self.now())
        except SignatureInvalid as exc:
            self.rejected += 1
            self.last_rejection = str(exc)
            await _respond(send, 401, {"error": str(exc)})
            return
        record = self.seen.setdefault(msg_id, Received())
        record.requests += 1
        if record.requests <= self.fail_first:
            await _respond(send, 503, {"error": "unavailable"})
            return
        if self.fail_share and self._random.random() < self.fail_share:
            kind = self._random.choice(self.failures)
            if kind == "timeout":
                await anyio.sleep(self.timeout_seconds)
                await _respond(send, 504, {"error": "held too long"})
            elif kind == "429":
                await _respond(send, 429, {"error": "slow down"}, [(b"retry-after", b"1")])
            else:
                await _respond(send, 500, {"error": "injected failure"})
            return
        duplicate = record.answered_ok > 0
        if not duplicate:
            record.payload = json.loads(body)
        record.answered_ok += 1
        await _respond(send, 200, {"ok": True, "duplicate": duplicate})


async def _respond(send: Callable[[Message], Any], status: int, body: dict[str, Any],
                   extra: list[tuple[bytes, bytes]] | None = None) -> None:
    data = json.dumps(body).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), *(extra or [])]})
    await send({"type": "http.response.body", "body": data})


@asynccontextmanager
async def serve(app: Any, host: str = "127.0.0.1", port: int = 0) -> AsyncIterator[str]:
    """Serve ``app`` with uvicorn on ``host`` (a free port by default); yield its URL.

    An exception raised in the ``async with`` body comes out as itself (not wrapped in
    an exception group by the task group the server runs in).

    Raises:
        OSError: the port cannot be bound (in use, not permitted).
        OverflowError: the port is outside 0-65535.
    """
    listener = socket.create_server((host, port), backlog=512)  # bound before we yield:
    bound = listener.getsockname()[1]  # requests wait in the backlog until uvicorn accepts
    config = uvicorn.Config(app, log_level="warning", lifespan="off", access_log=False)
    server = uvicorn.Server(config)
    failure: Exception | None = None
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(server.serve, [listener])
            try:
                yield f"http://{host}:{bound}/"
            except Exception as exc:  # re-raised below, once the server has stopped
                failure = exc
            finally:
                server.should_exit = True
    finally:
        listener.close()
    if failure is not None:
        raise failure
