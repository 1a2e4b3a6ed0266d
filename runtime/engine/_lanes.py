"""Task groups whose failures reach the caller as the runtime's own errors.

An admission or decision batch runs in *lanes*: a few transactions in flight at once,
each on its own connection (the tick's lanes, the poller's decide chunks). When the
database goes away, each lane raises :class:`DatabaseUnavailable`; anyio's task group
gathers them into an exception group, which a supervisor's loop would not recognise:
it retries an outage, and an unknown error ends the supervisor. :func:`lanes` raises
the first lane's error instead (chained from the group), when every failed lane
raised one of the runtime's errors; anything else (a bug) goes on as the group.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
from anyio.abc import TaskGroup

from .._errors import WatchkeeperError

__all__ = ["lanes"]


@asynccontextmanager
async def lanes() -> AsyncIterator[TaskGroup]:
    """An anyio task group (``async with lanes() as tg: tg.start_soon(...)``).

    Raises:
        WatchkeeperError: the first failed lane's, when every failed lane raised one.
        BaseExceptionGroup: otherwise, as anyio raised it.
    """
    try:
        async with anyio.create_task_group() as tg:
            yield tg
    except BaseExceptionGroup as group:
        errors = _leaves(group)
        if not all(isinstance(e, WatchkeeperError) for e in errors):
            raise
        raise errors[0] from group


def _leaves(group: BaseExceptionGroup) -> list[BaseException]:
    out: list[BaseException] = []
    for exc in group.exceptions:
        out.extend(_leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc])
    return out
