"""Where a read goes: the hot standby when one is attached (``DATABASE_READ_URL``), else
the primary; and where the answer was read, for the door to show.

Only the read use cases of history, reports, the definitions' list and one definition's
reading (``history``, ``task_entry``, ``report``, ``polls``, ``list_definitions``,
``read_definition``) call :func:`on_standby`; everything that writes or decides
(authentication, confirmation, a control's read-back, the engine) uses the primary's
handle as before. The choice is made here, once, not in each door.

A read that fails on the standby for want of it (unreachable, its connection lost, a
statement cancelled by a conflict with recovery, an error the primary may not have) marks
the standby down for a while (:meth:`~watchkeeper.runtime.store._standby.Standby.failed`)
and is run again on the primary. So is a read the standby answers "not found": it may not
have replayed the write yet (a definition proposed a moment ago).

Each read notes its :class:`ReadSource` in the caller's :func:`noting_reads` block, if
any: the HTTP API turns it into headers, the page and the MCP tools into a sentence.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TypeVar

from .._errors import ConfigError, DatabaseUnavailable, NotFound
from .._settings import Settings
from ..store._db import Database, StoreError
from ..store._standby import ReadSource, Standby

__all__ = ["ReadNote", "ReadSource", "current_reads", "noting_reads", "on_standby", "read_standby"]

T = TypeVar("T")


@dataclass(slots=True)
class ReadNote:
    """The reads of one answer: every :class:`ReadSource`, in order."""

    sources: list[ReadSource] = field(default_factory=list)

    @property
    def source(self) -> ReadSource | None:
        """The one to show: the standby read that may be oldest (an unknown lag first),
        else the last primary read; ``None`` when no read was routed (no standby)."""
        standby = [s for s in self.sources if s.server == "standby"]
        if standby:
            return max(standby, key=lambda s: float("inf") if s.lag_seconds is None
                       else s.lag_seconds)
        return self.sources[-1] if self.sources else None


_NOTE: ContextVar[ReadNote | None] = ContextVar("watchkeeper_read_note", default=None)


@contextmanager
def noting_reads() -> Iterator[ReadNote]:
    """Collect the sources of the reads made inside (in this task and the tasks it
    starts) into the yielded note."""
    note = ReadNote()
    token = _NOTE.set(note)
    try:
        yield note
    finally:
        _NOTE.reset(token)


def current_reads() -> ReadNote | None:
    """The note of the innermost :func:`noting_reads` block, if any."""
    return _NOTE.get()


def _note(source: ReadSource) -> None:
    note = _NOTE.get()
    if note is not None:
        note.sources.append(source)


async def on_standby(db: Database, read: Callable[[Database], Awaitable[T]]) -> T:
    """``read(handle)`` on the standby attached to ``db`` when it answers, else on ``db``
    (the primary); the source is noted (only when a standby is attached).

    Raises:
        whatever ``read`` raises on the primary (or, but for the cases above, on the
        standby).
    """
    standby = db.standby
    if standby is None:
        return await read(db)
    reader = await standby.database()
    why = standby.why_down
    if reader is not None:
        try:
            source = await standby.freshness(reader)
            result = await read(reader)
        except NotFound:
            why = "not found on the standby, which may not have replayed it yet"
        except (DatabaseUnavailable, StoreError, ConfigError) as exc:
            standby.failed(exc)
            why = standby.why_down
        else:
            _note(source)
            return result
    result = await read(db)
    _note(ReadSource("primary", fallback=why))
    return result


@asynccontextmanager
async def read_standby(db: Database, settings: Settings, **options: object) -> AsyncIterator[None]:
    """For the block, send ``db``'s read use cases to the hot standby at
    ``DATABASE_READ_URL`` (``settings.database_read_url``) when it is set; nothing is
    connected until the first read. ``options`` go to
    :class:`~watchkeeper.runtime.store._standby.Standby` (``retry_seconds``,
    ``connect_timeout``, ``max_size``)."""
    url = (settings.database_read_url or "").strip()
    if not url:
        yield
        return
    async with Standby.attached(db, url, pooler=settings.pooler, **options):  # type: ignore[arg-type]
        yield
