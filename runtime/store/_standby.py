"""Reads from a hot standby (``DATABASE_READ_URL``): a second pool, opened on first use,
and how old its data may be.

A hot standby answers reads only: it cannot create the temporary staging tables every
primary connection makes, so its connections are prepared apart (codecs and the search
path check, nothing else). Which reads go there is the use cases' choice
(``runtime/usecases/_reads.py``); every write and every decision stays on the primary's
:class:`~._db.Database`.

When the standby cannot be reached (refused, timed out, its connection lost, a statement
cancelled by a conflict with recovery), :meth:`Standby.failed` marks it down for
``retry_seconds`` and drops its pool: meanwhile :meth:`Standby.database` answers
``None`` at once and the reads go to the primary; the first read after that tries again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import anyio
import asyncpg

from .._errors import ConfigError, WatchkeeperError
from ._config import DEFAULT_SCHEMA, Pooler
from ._db import Database, _connect, _pooler

__all__ = ["ReadSource", "Standby"]

log = logging.getLogger("watchkeeper.store")


@dataclass(frozen=True, slots=True)
class ReadSource:
    """Which server answered a read, and how old its data may be.

    Attributes:
        server: ``"standby"`` or ``"primary"``.
        lag_seconds: the standby's replay lag measured before the read (the data read is
            at most this old, give or take the clocks): 0 when it streams from the
            primary and has replayed everything it received, else the time since the
            last transaction it replayed was committed on the primary; ``None`` when it
            has replayed none since it started. Always 0 for the primary.
        replayed_at: the commit time of the last transaction the standby replayed.
        fallback: why the primary answered although a standby is configured (``None``
            when the standby answered, or none is configured).
    """

    server: str
    lag_seconds: float | None = 0.0
    replayed_at: datetime | None = None
    fallback: str | None = None

    def describe(self) -> str:
        """One sentence for a person: where the answer was read and how old it may be."""
        if self.server == "primary":
            why = f" ({self.fallback})" if self.fallback else ""
            return f"Read from the primary{why}: current."
        if self.lag_seconds is None:
            return "Read from the standby: how far behind the primary it is is unknown."
        return f"Read from the standby: it may be up to {self.lag_seconds:.1f} s behind the primary."

    def to_json(self) -> dict[str, Any]:
        """``{"server", "lag_seconds", "replayed_at", "fallback"}`` (an ISO 8601 instant)."""
        return {"server": self.server, "lag_seconds": self.lag_seconds,
                "replayed_at": None if self.replayed_at is None else self.replayed_at.isoformat(),
                "fallback": self.fallback}


class Standby:
    """The standby's pool, opened on first use and dropped while the standby is down.

    Args:
        dsn: ``DATABASE_READ_URL``.
        schema: watchkeeper's schema (as on the primary: the standby is its copy).
        pooler: as ``WATCHKEEPER_POOLER`` (``auto`` probes the standby once per pool).
        retry_seconds: how long a failed standby is left alone before it is tried again.
        connect_timeout: seconds a connection to the standby may take.
    """

    def __init__(self, dsn: str, *, schema: str = DEFAULT_SCHEMA,
                 pooler: Pooler | str = Pooler.AUTO, max_size: int = 5,
                 retry_seconds: float = 5.0, connect_timeout: float = 3.0) -> None:
        self.dsn, self.schema, self.pooler = dsn, schema, _pooler(pooler)
        self.max_size, self.retry_seconds, self.connect_timeout = (
            max_size, retry_seconds, connect_timeout)
        self._db: Database | None = None
        self._down_until = 0.0
        self._lock = anyio.Lock()
        self.why_down: str | None = None
        """Why the standby was last found unusable (``None`` once it answers again)."""

    @classmethod
    @asynccontextmanager
    async def attached(cls, db: Database, dsn: str, **options: Any) -> AsyncIterator[Standby]:
        """Attach a standby to ``db`` (``db.standby``) for the block; close its pool after."""
        standby = cls(dsn, schema=db.schema, **options)
        db.standby = standby
        try:
            yield standby
        finally:
            db.standby = None
            with anyio.CancelScope(shield=True):
                await standby.close()

    async def database(self) -> Database | None:
        """The standby's :class:`Database`, connecting if needed; ``None`` while it is
        marked down, or when connecting fails now (it is then marked down)."""
        if self._db is not None:
            return self._db
        if time.monotonic() < self._down_until:
            return None
        async with self._lock:
            if self._db is None and time.monotonic() >= self._down_until:
                try:
                    pool, found = await self._connect()
                except WatchkeeperError as exc:
                    self.failed(exc)
                    return None
                self._db = Database(pool, self.schema, found, self.dsn)
                if self.why_down is not None:
                    log.info("the read standby answers again; reads go to it")
                self.why_down = None
        return self._db

    def failed(self, exc: BaseException) -> None:
        """The standby failed a read or a connection: leave it alone for
        ``retry_seconds`` (the reads go to the primary) and drop its pool."""
        first = self.why_down is None
        self.why_down = f"the standby is unreachable: {exc}"
        self._down_until = time.monotonic() + self.retry_seconds
        if self._db is not None:
            self._db.pool.terminate()
            self._db = None
        if isinstance(exc, ConfigError):
            log.error("the read standby (DATABASE_READ_URL) is misconfigured: %s; reads go to "
                      "the primary", exc)
        elif first:
            log.warning("the read standby is unreachable (%s); reads go to the primary, the "
                        "standby is tried again every %.0f s", exc, self.retry_seconds)

    async def freshness(self, db: Database) -> ReadSource:
        """How old the standby's data may be now (measured before a read: what the read
        then sees is at least this fresh)."""
        row = await db.fetchrow("read_freshness")
        assert row is not None
        lag = row["lag_seconds"]
        return ReadSource("standby", None if lag is None else float(lag), row["replayed_at"])

    async def close(self) -> None:
        """Close the pool (if one is open)."""
        if self._db is not None:
            db, self._db = self._db, None
            await db.pool.close()

    async def _connect(self) -> tuple[asyncpg.Pool, Pooler]:
        return await _connect(self.dsn, self.schema, 0, self.max_size, self.pooler,
                              standby=True, connect_timeout=self.connect_timeout)
