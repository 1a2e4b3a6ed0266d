"""Where an answer was read, in its headers: with a read standby (``DATABASE_READ_URL``),
an answer that read history, a report, definitions or polls carries

* ``Watchkeeper-Read-From: standby`` and ``Watchkeeper-Read-Lag: <seconds>`` (how far
  behind the primary the standby may be: measured before the read, so the data read is at
  most that old; ``unknown`` before it has replayed anything), or
* ``Watchkeeper-Read-From: primary`` when the standby could not answer (no lag header).

Without a standby nothing is added. The use cases note each read's source
(:func:`~watchkeeper.runtime.usecases.noting_reads`); this pure ASGI middleware opens
the note for each request and writes it into the answer's start. The page's answers
(same app) carry the headers too, and show the sentence themselves.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from watchkeeper.runtime import usecases as uc

__all__ = ["READ_FROM", "READ_LAG", "ReadHeaders", "read_headers"]

READ_FROM = "Watchkeeper-Read-From"
READ_LAG = "Watchkeeper-Read-Lag"


def read_headers(source: uc.ReadSource) -> dict[str, str]:
    """The headers that say where ``source``'s answer was read and how old it may be."""
    if source.server != "standby":
        return {READ_FROM: source.server}
    lag = "unknown" if source.lag_seconds is None else f"{source.lag_seconds:.3f}"
    return {READ_FROM: "standby", READ_LAG: lag}


class ReadHeaders:
    """Adds :func:`read_headers` to every HTTP answer whose request read through a
    standby-routed use case."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        with uc.noting_reads() as note:

            async def sending(message: Message) -> None:
                source = note.source
                if message["type"] == "http.response.start" and source is not None:
                    extra = [(k.lower().encode(), v.encode())
                             for k, v in read_headers(source).items()]
                    message = {**message, "headers": [*message.get("headers", []), *extra]}
                await send(message)

            await self.app(scope, receive, sending)
