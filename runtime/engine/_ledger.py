"""Bookkeeping the engine and the use cases share about definitions.

* :func:`record_span` and :func:`record_replaced_span`: ranges of slots that were never
  decided one by one (a paused span, an outage before a new revision took over) are
  recorded once as a ``schedule_events`` row and never replayed (DESIGN "Calendar
  triggers", "a paused span is skipped, recorded once as a range").
* :func:`check_destinations`: a webhook destination must name an endpoint of the
  tenant when a definition is proposed, confirmed or registered.

Imports the store only.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from watchkeeper.triggers import (
    USER_BINDING_ID,
    Delivery,
    EventKind,
    SlotRange,
    SpecError,
    SpecProblem,
)

from ..store._db import Connection
from ..store._specs import spec_from_row

__all__ = ["EPSILON", "check_destinations", "record_replaced_span", "record_span"]

EPSILON = timedelta(microseconds=1)
"""The instant just before another: a window ``(now - EPSILON, ...]`` includes ``now``."""


async def record_span(tx: Connection, row: Any, span: SlotRange | None, kind: EventKind,
                       why: str, now: datetime, label: str) -> None:
    """Record a range of slots that were never decided one by one."""
    if span is None:
        return
    binding = USER_BINDING_ID if row["origin"] == "user" else "*"
    await tx.execute("event_insert", row["tenant_id"], row["definition_id"], binding,
                     row["effective_revision"], kind.value, span.first.key, span.last.key,
                     span.first.scheduled_for, span.last.scheduled_for, span.count, why, now, label)


async def record_replaced_span(tx: Connection, row: Any, now: datetime, label: str) -> None:
    """Before a new revision takes over, record the old revision's slots that were due
    but never processed (an outage, or a paused span): they are not replayed."""
    if row["effective_revision"] is None or row["status"] not in ("active", "paused"):
        return
    old = spec_from_row(await tx.fetchrow("revision_get", row["tenant_id"], row["definition_id"],
                                          row["effective_revision"]))
    window = old.window(row["cursor_at"], now - EPSILON, row["slots_seen"])
    kind, why = ((EventKind.SKIPPED_PAUSED, "definition was paused when it was replaced")
                 if row["status"] == "paused" else
                 (EventKind.SKIPPED_RECONFIRMED, "never processed before a new revision took over"))
    await record_span(tx, row, window.span, kind, why, now, label)


async def check_destinations(conn: Connection, tenant_id: str, deliveries: Sequence[Delivery],
                             field: str = "delivery") -> None:
    """Every webhook destination in ``deliveries`` names an endpoint of ``tenant_id``.

    Raises:
        SpecError: one problem per missing endpoint, naming
            ``<field>.<index>.destination`` and how to add the endpoint.
    """
    wanted = [(i, d.destination) for i, d in enumerate(deliveries) if d.channel == "webhook"]
    if not wanted:
        return
    found = {r["name"] for r in await conn.fetch("webhook_endpoints_existing", tenant_id,
                                                  [name for _, name in wanted])}
    missing = [SpecProblem(f"{field}.{index}.destination",
                           f"tenant {tenant_id} has no webhook endpoint {name!r}.",
                           f"add it first: watchkeeper webhooks add {tenant_id} {name} URL")
               for index, name in wanted if name not in found]
    if missing:
        raise SpecError.of(missing)
