"""A condition's poll timeline: each poll's verdict, action, reason, task and the
observation receipts it read (DESIGN "Conditions (three-valued)").

Filters are applied in PostgreSQL before the limit, and pages continue from a keyset
cursor, so ``changes`` over a long timeline shows every change, not those among the
newest ``limit`` polls.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from watchkeeper.triggers import SpecError, format_utc

from .._errors import NotFound
from ..store._db import Database
from ._input import check_identifiers, check_instants
from ._reads import on_standby

__all__ = ["PollCursor", "PollsPage", "PollsQuery", "polls", "require_definition"]

MAX_LIMIT = 10_000


@dataclass(frozen=True, slots=True)
class PollCursor:
    """A keyset position in the timeline: the last poll of a page."""

    scheduled_for: datetime
    definition_id: str
    binding_id: str
    slot: str

    def encode(self) -> str:
        """The cursor as one opaque-looking string for ``--after`` (``ISO|def|binding|slot``)."""
        return "|".join((format_utc(self.scheduled_for), self.definition_id, self.binding_id,
                         self.slot))

    @classmethod
    def decode(cls, text: str, field: str = "after") -> PollCursor:
        """Parse :meth:`encode`'s output.

        Raises:
            SpecError: naming ``field`` when the text is not a cursor printed earlier.
        """
        parts = text.split("|", 3)
        try:
            if len(parts) != 4:
                raise ValueError(text)
            at = datetime.fromisoformat(parts[0])
            if at.tzinfo is None:
                raise ValueError(text)
        except ValueError as exc:
            raise SpecError(field, f"{text!r} is not a poll cursor.",
                            "pass the next_after value printed by the previous page.") from exc
        return cls(at, parts[1], parts[2], parts[3])


@dataclass(frozen=True, slots=True)
class PollsQuery:
    """What to read. ``since`` (scheduled_for >= since) or ``after`` (strictly after a
    cursor) read forwards, oldest first; with neither, the newest ``limit`` polls.
    ``changes`` keeps only polls whose verdict differs from the poll before them (of
    the same definition and binding) or whose action is not ``none``."""

    tenant_id: str
    definition_id: str | None = None
    since: datetime | None = None
    after: PollCursor | None = None
    limit: int = 100
    changes: bool = False


@dataclass(frozen=True, slots=True)
class PollsPage:
    """Polls oldest first, and, when reading forwards (``since`` or ``after``) and the
    page is full, the cursor of its last poll (more may follow); else ``None``. The
    newest-polls view has no cursor: to read a long timeline, start from ``since``."""

    polls: Sequence[dict[str, Any]]
    next_after: PollCursor | None


async def require_definition(db: Database, tenant_id: str | None, definition_id: str | None) -> None:
    """Nothing when ``definition_id`` is ``None`` or names a definition visible in
    ``tenant_id`` (its own, or an operator-registered one).

    Raises:
        NotFound: no such definition.
        SpecError: ``definition_id`` is not an identifier.
    """
    check_identifiers({"definition_id": definition_id})
    if definition_id is not None and not await db.fetchval("definition_visible", tenant_id,
                                                            definition_id):
        where = f" in tenant {tenant_id}" if tenant_id else ""
        raise NotFound(f"no definition {definition_id!r}{where}; 'watchkeeper list"
                       f"{' --tenant ' + tenant_id if tenant_id else ''}' shows the ids")


async def polls(db: Database, query: PollsQuery) -> PollsPage:
    """One page of the poll timeline.

    Raises:
        SpecError: ``limit`` outside 1..10000, both ``since`` and ``after``, or ``since``
            naive or outside :data:`~._input.INSTANT_RANGE`.
        NotFound: an unknown definition id.
    """
    return await on_standby(db, lambda handle: _polls(handle, query))


async def _polls(db: Database, query: PollsQuery) -> PollsPage:
    check_instants({"since": query.since})
    if not 1 <= query.limit <= MAX_LIMIT:
        raise SpecError("limit", f"{query.limit} is outside 1..{MAX_LIMIT}.",
                        "page with next_after instead of a larger limit.")
    if query.since is not None and query.after is not None:
        raise SpecError("after", "cannot be combined with since.", "give one of them.")
    await require_definition(db, query.tenant_id, query.definition_id)
    after = query.after
    rows = [dict(r) for r in await db.fetch(
        "condition_polls_page", query.tenant_id, query.definition_id, query.since, query.limit,
        query.changes, *(
            (after.scheduled_for, after.definition_id, after.binding_id, after.slot)
            if after else (None, None, None, None)))]
    forwards = query.since is not None or after is not None
    rows = rows if forwards else rows[::-1]
    for row in rows:
        if isinstance(row.get("observations"), str):
            row["observations"] = json.loads(row["observations"])
    last = rows[-1] if rows else None
    cursor = None
    if forwards and last is not None and len(rows) == query.limit:
        cursor = PollCursor(last["scheduled_for"], last["definition_id"], last["binding_id"],
                            last["slot"])
    return PollsPage(rows, cursor)
