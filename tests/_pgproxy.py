"""A byte-level TCP proxy in front of a real PostgreSQL, with one fault: a lost COMMIT.

The proxy listens on 127.0.0.1 (a random port) and forwards to the upstream server
(TCP ``host:port``, or the unix socket ``<dir>/.s.PGSQL.<port>`` when the DSN has
``host=/dir``). It speaks nothing but bytes; it only *frames* the frontend stream
(PostgreSQL protocol 3: a startup packet without a type byte, then messages of one
type byte and a big-endian int32 length that counts itself) so that it can recognise
a simple Query ``COMMIT`` (asyncpg's ``Transaction.commit`` sends ``Q`` +
``"COMMIT;\\0"``). An SSLRequest or GSSENCRequest is answered ``N`` by the proxy
itself, so the client falls back to plain text the proxy can read.

When armed (:meth:`PgProxy.arm`, one shot), the next COMMIT meets a :class:`Fault`:

* ``DROP_ACK``: the COMMIT is forwarded, the server's reply is swallowed, the backend
  is ended with a Terminate message, and only once the server has closed that
  connection (so the commit is settled) is the client connection closed. The server
  committed; the client never learns it.
* ``DROP_COMMIT``: the COMMIT is never forwarded; the backend is ended (the server
  rolls the transaction back) and then the client connection is closed.
* ``HOLD_COMMIT``: the client connection is closed at once while the COMMIT is held
  back with its backend still inside the transaction (an acknowledgement lost while
  COMMIT is still in flight); :meth:`PgProxy.release_held` forwards it later.

In every case the client's COMMIT fails with a closed connection, which is what a
lost acknowledgement looks like from the client.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
from dataclasses import dataclass
from types import TracebackType
from urllib.parse import parse_qs, quote, unquote, urlsplit

__all__ = ["Fault", "PgProxy", "ProxyStatistics", "Upstream", "proxied_dsn"]

_SSL_REQUEST = 80877103
_GSSENC_REQUEST = 80877104
_TERMINATE = b"X\x00\x00\x00\x04"
_SETTLE_SECONDS = 5.0  # how long to wait for the server to close a backend we ended
_CHUNK = 65536


class Fault(enum.Enum):
    """What happens to the armed COMMIT (see the module docstring)."""

    DROP_ACK = "drop_ack"
    DROP_COMMIT = "drop_commit"
    HOLD_COMMIT = "hold_commit"


@dataclass(frozen=True, slots=True)
class ProxyStatistics:
    """What the proxy saw.

    Attributes:
        connections: client connections accepted.
        commits: simple-Query COMMIT messages seen from clients (faulted ones included).
        faults: faults injected.
    """

    connections: int
    commits: int
    faults: int


@dataclass(frozen=True, slots=True)
class Upstream:
    """Where the real server listens: a TCP ``host:port`` or a unix socket ``path``."""

    host: str | None
    port: int
    path: str | None

    @classmethod
    def from_dsn(cls, dsn: str) -> Upstream:
        """The server a ``postgresql://`` DSN names (``host=/dir`` means a unix socket).

        Raises:
            ValueError: the DSN names no host, or several.
        """
        parts = urlsplit(dsn)
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        host = query.get("host") or (unquote(parts.hostname) if parts.hostname else None)
        port = int(query.get("port") or parts.port or 5432)
        if not host or "," in host:
            raise ValueError(f"the DSN must name exactly one host: {dsn!r}")
        if host.startswith("/"):
            return cls(None, port, f"{host.rstrip('/')}/.s.PGSQL.{port}")
        return cls(host, port, None)

    async def open(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """Connect to the server."""
        if self.path is not None:
            return await asyncio.open_unix_connection(self.path)
        return await asyncio.open_connection(self.host, self.port)


def proxied_dsn(dsn: str, port: int, host: str = "127.0.0.1") -> str:
    """``dsn`` re-pointed at ``host:port`` over TCP, keeping user, password and database.

    Other parameters (``host=``, ``port=``, ``sslmode=``) are dropped: the proxy answers
    any SSLRequest with ``N``.
    """
    parts = urlsplit(dsn)
    query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    user = unquote(parts.username) if parts.username else query.get("user")
    password = unquote(parts.password) if parts.password else query.get("password")
    database = unquote(parts.path.lstrip("/")) or query.get("dbname") or query.get("database")
    auth = ""
    if user:
        auth = quote(user, safe="")
        if password:
            auth += ":" + quote(password, safe="")
        auth += "@"
    path = "/" + quote(database, safe="") if database else ""
    return f"postgresql://{auth}{host}:{port}{path}"


def _is_commit(body: bytes) -> bool:
    """Whether a Query message's body (NUL-terminated SQL) is one COMMIT statement."""
    text = body.rstrip(b"\x00").decode("utf-8", "replace").strip().rstrip(";").strip()
    return text.upper() == "COMMIT"


class _Link:
    """One client connection and its upstream connection."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.client_reader, self.client_writer = reader, writer
        self.up_reader: asyncio.StreamReader | None = None
        self.up_writer: asyncio.StreamWriter | None = None
        self.pump: asyncio.Task[None] | None = None
        self.muted = False  # set before a faulted COMMIT: nothing more reaches the client

    async def startup(self) -> bytes:
        """The client's startup (or cancel) packet, after refusing SSL/GSS encryption."""
        while True:
            head = await self.client_reader.readexactly(8)
            length, code = int.from_bytes(head[:4], "big"), int.from_bytes(head[4:], "big")
            rest = await self.client_reader.readexactly(length - 8)
            if code not in (_SSL_REQUEST, _GSSENC_REQUEST):
                return head + rest
            self.client_writer.write(b"N")
            await self.client_writer.drain()

    async def message(self) -> tuple[bytes, bytes]:
        """The next frontend message: (type byte, whole message bytes)."""
        head = await self.client_reader.readexactly(5)
        body = await self.client_reader.readexactly(int.from_bytes(head[1:], "big") - 4)
        return head[:1], head + body

    async def send_up(self, data: bytes) -> None:
        """Write to the server; a closed server connection is ignored."""
        assert self.up_writer is not None
        with contextlib.suppress(ConnectionError):
            self.up_writer.write(data)
            await self.up_writer.drain()

    async def run_pump(self) -> None:
        """Relay server bytes to the client until the server closes (dropped when muted)."""
        assert self.up_reader is not None
        with contextlib.suppress(ConnectionError):
            while data := await self.up_reader.read(_CHUNK):
                if not self.muted:
                    self.client_writer.write(data)
                    await self.client_writer.drain()
        if not self.muted:
            self.client_writer.close()

    async def end_upstream(self, last: bytes = b"") -> None:
        """Send ``last`` then Terminate, and wait until the server closed the backend
        (its transaction is then committed or rolled back for good)."""
        if self.up_writer is None:
            return
        await self.send_up(last + _TERMINATE)
        if self.pump is not None:
            with contextlib.suppress(TimeoutError, ConnectionError):
                await asyncio.wait_for(asyncio.shield(self.pump), _SETTLE_SECONDS)

    async def close(self) -> None:
        """Close both sides and wait for the pump."""
        for writer in (self.client_writer, self.up_writer):
            if writer is not None:
                writer.close()
                with contextlib.suppress(ConnectionError):
                    await writer.wait_closed()
        if self.pump is not None:
            self.pump.cancel()
            with contextlib.suppress(asyncio.CancelledError, ConnectionError):
                await self.pump


class PgProxy:
    """The proxy; an async context manager that listens while entered.

    Args:
        upstream_dsn: the real server's DSN (TCP, or ``host=/dir`` for a unix socket).
    """

    def __init__(self, upstream_dsn: str) -> None:
        self.upstream_dsn = upstream_dsn
        self.upstream = Upstream.from_dsn(upstream_dsn)
        self._server: asyncio.Server | None = None
        self._links: set[_Link] = set()
        self._held: list[tuple[_Link, bytes]] = []
        self._armed: Fault | None = None
        self._pass = 0
        self._then_down = False
        self._connections = self._commits = self._faults = 0
        self._down = False

    async def __aenter__(self) -> PgProxy:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()
        self._held.clear()
        for link in list(self._links):
            await link.close()

    @property
    def port(self) -> int:
        """The TCP port the proxy listens on (127.0.0.1)."""
        assert self._server is not None, "enter the proxy first"
        return int(self._server.sockets[0].getsockname()[1])

    @property
    def dsn(self) -> str:
        """The upstream DSN re-pointed at the proxy (same user and database)."""
        return proxied_dsn(self.upstream_dsn, self.port)

    def arm(self, fault: Fault = Fault.DROP_ACK, *, after: int = 0, then_down: bool = False) -> None:
        """Let ``after`` COMMITs through (>= 0), then inject ``fault`` on the next one, once;
        with ``then_down``, an outage begins at that instant (:meth:`go_down`)."""
        if after < 0:
            raise ValueError("after counts COMMITs to let through; it may be zero, not negative")
        self._armed, self._pass, self._then_down = fault, after, then_down

    def disarm(self) -> None:
        """Inject nothing."""
        self._armed = None

    async def go_down(self) -> None:
        """An outage: drop every open connection and refuse new ones until :meth:`go_up`."""
        self._down = True
        for link in list(self._links):
            await link.close()
            self._links.discard(link)

    def go_up(self) -> None:
        """End the outage: accept and relay connections again."""
        self._down = False

    def statistics(self) -> ProxyStatistics:
        """A snapshot of what the proxy saw."""
        return ProxyStatistics(self._connections, self._commits, self._faults)

    async def release_held(self) -> int:
        """Forward every COMMIT held by ``HOLD_COMMIT`` and wait until each backend is
        closed (a backend that was terminated meanwhile is skipped). Returns how many."""
        held, self._held = self._held, []
        for link, commit in held:
            await link.end_upstream(commit)
            await link.close()
            self._links.discard(link)
        return len(held)

    def _fault_for_commit(self) -> Fault | None:
        self._commits += 1
        if self._armed is None:
            return None
        if self._pass > 0:
            self._pass -= 1
            return None
        fault, self._armed = self._armed, None
        self._faults += 1
        return fault

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._down:
            writer.close()
            return
        self._connections += 1
        link = _Link(reader, writer)
        self._links.add(link)
        keep = False
        try:
            keep = await self._relay(link)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the client went away: close both sides
        finally:
            if not keep:
                await link.close()
                self._links.discard(link)

    async def _relay(self, link: _Link) -> bool:
        """Relay one connection; True when it is held open for :meth:`release_held`."""
        startup = await link.startup()
        link.up_reader, link.up_writer = await self.upstream.open()
        await link.send_up(startup)
        link.pump = asyncio.create_task(link.run_pump())
        while True:
            kind, message = await link.message()
            fault = self._fault_for_commit() if kind == b"Q" and _is_commit(message[5:]) else None
            if fault is None:
                await link.send_up(message)
                continue
            link.muted = True
            if self._then_down:
                self._then_down = False
                await self.go_down()
            if fault is Fault.HOLD_COMMIT:
                link.client_writer.close()
                self._held.append((link, message))
                return True
            await link.end_upstream(message if fault is Fault.DROP_ACK else b"")
            return False
