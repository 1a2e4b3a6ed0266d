"""PostgreSQL storage for the outbox dispatcher (:class:`outbox.DeliveryStore`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from outbox import Notice
from triggers import format_utc

from ._db import Database

__all__ = ["PgDeliveryStore"]


class PgDeliveryStore:
    """Delivery rows in ``deliveries``; payloads built from the committed report."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def claim_due(self, now: datetime, limit: int, owner: str,
                        lease_seconds: float) -> Sequence[Notice]:
        """Lease due rows (``SKIP LOCKED``) and attach their report reference."""
        rows = await self.db.fetch("deliveries_claim", now, limit, owner, lease_seconds)
        if not rows:
            return []
        payloads = await self.db.fetch("delivery_payloads", [r["tenant_id"] for r in rows],
                                       [r["task_id"] for r in rows])
        by_task = {(p["tenant_id"], p["task_id"]): p for p in payloads}
        return [
            Notice(r["tenant_id"], str(r["delivery_id"]), r["channel"], r["destination"],
                   r["attempts"], _payload(by_task[(r["tenant_id"], r["task_id"])]))
            for r in rows
        ]

    async def delivered(self, notice: Notice, owner: str, now: datetime, response: str) -> None:
        """Mark delivered (only while ``owner`` holds the row)."""
        await self.db.execute("delivery_delivered", notice.tenant_id, notice.delivery_id,
                              owner, now, response)

    async def failed(self, notice: Notice, owner: str, now: datetime, error: str,
                     retry_at: datetime | None) -> None:
        """Mark retrying at ``retry_at``, or dead (only while ``owner`` holds the row)."""
        await self.db.execute("delivery_failed", notice.tenant_id, notice.delivery_id,
                              owner, error, retry_at)


def _payload(r: Mapping[str, Any]) -> dict[str, Any]:
    """The notice body: a reference to the committed report, never the research itself."""
    plain = {k: r[k] for k in ("tenant_id", "task_id", "definition_id", "binding_id", "slot",
                               "kind", "owner_user_id", "importance", "content_sha256",
                               "output_ref", "headline")}
    plain["scheduled_for"] = format_utc(r["scheduled_for"])
    plain["committed_at"] = format_utc(r["committed_at"])
    plain["report_ref"] = f"report:{r['tenant_id']}/{r['task_id']}"
    return plain
