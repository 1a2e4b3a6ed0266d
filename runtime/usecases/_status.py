"""The operator's view of the deployment: supervisors (heartbeat, liveness, clock
offset) and the outbox backlog."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ..store._db import Database

__all__ = ["DELIVERY_STATUSES", "DeploymentStatus", "SupervisorState", "status"]

DELIVERY_STATUSES = ("pending", "delivering", "delivered", "retrying", "dead", "suppressed")
"""Every status a delivery row can have, in lifecycle order."""

UNRESPONSIVE_AFTER_BEATS = 3
"""A supervisor that wrote no heartbeat for this many of its heartbeat intervals is
reported unresponsive (it may be paused, partitioned or dead)."""


@dataclass(frozen=True, slots=True)
class SupervisorState:
    """One supervisor row and what it means now.

    Attributes:
        state: the stored status (``running``, ``clock_uncertain``, ``stopped``, ...),
            or ``unresponsive`` when a non-stopped supervisor missed its heartbeats.
        silent_seconds: seconds since its last heartbeat.
        row: the stored row (supervisor_id, hostname, pid, started_at, heartbeat_at,
            status, clock_offset_ms, detail).
    """

    state: str
    silent_seconds: float
    row: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        """The row plus ``state`` and ``silent_seconds``."""
        return {**self.row, "state": self.state, "silent_seconds": round(self.silent_seconds, 3)}


@dataclass(frozen=True, slots=True)
class DeploymentStatus:
    """Supervisors (newest heartbeat first), deliveries by status, and the instant the
    oldest due notice has been waiting since (``None`` when nothing is due)."""

    supervisors: list[SupervisorState]
    deliveries: dict[str, int] = field(default_factory=dict)
    oldest_due: datetime | None = None

    def to_json(self) -> dict[str, Any]:
        """JSON-compatible data (instants stay datetimes for the caller's encoder)."""
        return {"supervisors": [s.to_json() for s in self.supervisors],
                "deliveries": self.deliveries, "oldest_due": self.oldest_due}


async def status(db: Database, now: datetime) -> DeploymentStatus:
    """Read the supervisors and the outbox backlog as of ``now`` (an aware instant)."""
    states = []
    for r in await db.fetch("supervisors_list"):
        row = dict(r)
        every = float((row["detail"] or {}).get("heartbeat_seconds", 5))
        silent = (now - row["heartbeat_at"]).total_seconds()
        state = row["status"]
        if state != "stopped" and silent > UNRESPONSIVE_AFTER_BEATS * every:
            state = "unresponsive"
        states.append(SupervisorState(state, silent, row))
    summary = await db.fetch("deliveries_summary")
    due = [r["oldest_due"] for r in summary if r["oldest_due"] is not None]
    return DeploymentStatus(states, {r["status"]: r["count"] for r in summary},
                            min(due, default=None))
