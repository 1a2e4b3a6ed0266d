"""Deliveries of the outbox as the operator sees them: the list with attempts and
responses, and manual redelivery under the same delivery id (DESIGN "Outbox": a
retry of a notice never reruns the research)."""

from __future__ import annotations

import uuid
from typing import Any

from watchkeeper.triggers import SpecError

from .._errors import Conflict, NotFound
from ..engine._clock import Clock
from ..store._db import Database
from ._status import DELIVERY_STATUSES

__all__ = ["list_deliveries", "redeliver"]


async def list_deliveries(db: Database, *, tenant_id: str | None = None, status: str | None = None,
                          task_id: int | None = None, limit: int = 50,
                          attempts: bool = False) -> list[dict[str, Any]]:
    """Deliveries, newest first: tenant, delivery id, task, definition, slot, channel,
    destination, status, attempts, redeliveries, next attempt, last error or response;
    with ``attempts``, each row's ``attempt_log`` (every attempt, oldest first).

    Raises:
        SpecError: an unknown ``status`` (field ``status``) or ``limit`` outside 1..1000.
    """
    if status is not None and status not in DELIVERY_STATUSES:
        raise SpecError("status", f"{status!r} is not a delivery status.",
                        f"use one of {', '.join(DELIVERY_STATUSES)}.")
    if not 1 <= limit <= 1000:
        raise SpecError("limit", f"{limit} is outside 1..1000.", "give a smaller limit.")
    rows = [dict(r) for r in await db.fetch("deliveries_list", tenant_id, status, task_id, limit)]
    if attempts:
        for row in rows:
            row["attempt_log"] = [dict(a) for a in await db.fetch(
                "delivery_attempts_list", row["tenant_id"], row["delivery_id"])]
    return rows


async def redeliver(db: Database, clock: Clock, tenant_id: str, delivery_id: str,
                    actor: str) -> dict[str, Any]:
    """Re-queue a dead, delivered or suppressed delivery under the same delivery id, and
    return it as re-queued (a row of :func:`list_deliveries`, looked up by its id).

    Raises:
        SpecError: ``delivery_id`` is not a UUID.
        NotFound: no such delivery.
        Conflict: it is still pending, retrying or being delivered.
    """
    try:
        delivery_id = str(uuid.UUID(delivery_id))
    except ValueError as exc:
        raise SpecError("delivery_id", f"{delivery_id!r} is not a delivery id.",
                        "copy the id from 'watchkeeper deliveries'.") from exc
    now = clock.now()
    if await db.fetchval("delivery_redeliver", tenant_id, delivery_id, now,
                         f"redelivery requested by {actor}") is not None:
        row = await db.fetchrow("delivery_show", tenant_id, delivery_id)
        assert row is not None  # just updated; deliveries are never deleted
        return dict(row)
    row = await db.fetchrow("delivery_get", tenant_id, delivery_id)
    if row is None:
        raise NotFound(f"no delivery {delivery_id} in tenant {tenant_id}")
    raise Conflict(f"delivery {delivery_id} is {row['status']}; only a dead, delivered or "
                   "suppressed delivery can be redelivered")
