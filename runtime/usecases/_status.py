"""Status reads: the supervisors and what they offer, the tasks none of them can take,
and the outbox backlog.

A worker claims only tasks whose agent it has (``--agent NAME=COMMAND``; ``digest`` is
built in), so a task whose agent no live supervisor offers waits, pending, for one that
does. :func:`unclaimable_tasks` makes that wait visible; the liveness rule is
:mod:`watchkeeper.runtime.engine._fleet`'s (status not ``stopped``, heartbeat within 3
intervals). Past its ``expires_at`` such a task follows its lateness policy
(:meth:`Worker.expire_unclaimable`): ``skip_expired`` ends it ``expired`` and
``review_late`` puts it in ``review_required``, each with a reason naming the agent;
``catch_up_once`` keeps it waiting to run once, late.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any

from .._errors import WatchkeeperError
from ..engine._clock import AnchoredClock, Clock, DatabaseTime
from ..engine._fleet import SupervisorState, offered_agents, supervisor_states
from ..store._db import Database

__all__ = ["DELIVERY_STATUSES", "DeploymentStatus", "Readiness", "SupervisorState",
           "TenantStatus", "UnclaimableTask", "readiness", "status", "supervisors",
           "tenant_status", "unclaimable_tasks"]

DELIVERY_STATUSES = ("pending", "delivering", "delivered", "retrying", "dead", "suppressed")
"""Every status a delivery row can have, in lifecycle order."""


@dataclass(frozen=True, slots=True)
class UnclaimableTask:
    """A task waiting for an agent that no live supervisor offers.

    Attributes:
        status: ``pending`` (never claimed, or a retry) or ``running`` (its lease
            expired and no live supervisor can take it over).
        waiting_since: when it could first have been claimed (``not_before``, or the
            lease's expiry for a takeover), UTC.
        waited_seconds: seconds from ``waiting_since`` to the ``now`` of the read.
        expires_at: past this instant a first attempt follows ``late_policy``.
    """

    tenant_id: str
    task_id: int
    definition_id: str
    binding_id: str
    slot: str
    kind: str
    agent: str
    status: str
    late_policy: str
    attempts: int
    waiting_since: datetime
    waited_seconds: float
    expires_at: datetime


async def supervisors(db: Database, now: datetime) -> list[SupervisorState]:
    """Every supervisor that heartbeat against ``db`` (newest first), with its liveness
    at ``now`` (aware) and the agents and sources it offers.

    Raises:
        ValueError: ``now`` is naive.
        DatabaseUnavailable: the store failed.
    """
    return await supervisor_states(db, now)


async def unclaimable_tasks(db: Database, now: datetime, *, tenant_id: str | None = None,
                            limit: int = 100) -> list[UnclaimableTask]:
    """Due tasks whose agent no live supervisor offers at ``now`` (aware), longest wait
    first, at most ``limit`` (>= 1); one tenant's, or every tenant's but the replays'.

    Empty while a live supervisor's heartbeat does not name its agents (an earlier
    version, which claims tasks of any agent). ``watchkeeper tick`` writes no
    heartbeat: a task only it can run shows here between its runs.

    Raises:
        ValueError: ``now`` is naive, or ``limit`` is below 1.
        DatabaseUnavailable: the store failed.
    """
    if limit < 1:
        raise ValueError(f"limit is {limit}. Fix: ask for at least 1 task.")
    offered = offered_agents(await supervisor_states(db, now))
    if offered is None:
        return []
    rows = await db.fetch("tasks_unclaimable", now, sorted(offered), limit, tenant_id)
    return [UnclaimableTask(
        r["tenant_id"], r["task_id"], r["definition_id"], r["binding_id"], r["slot"], r["kind"],
        r["agent"], r["status"], r["late_policy"], r["attempts"], r["waiting_since"],
        (now - r["waiting_since"]).total_seconds(), r["expires_at"]) for r in rows]


@dataclass(frozen=True, slots=True)
class DeploymentStatus:
    """Supervisors (newest heartbeat first, with liveness), the tasks no live supervisor
    can take, deliveries by status, and the instant the oldest due notice has been
    waiting since (``None`` when nothing is due)."""

    supervisors: list[SupervisorState]
    unclaimable: list[UnclaimableTask] = field(default_factory=list)
    deliveries: dict[str, int] = field(default_factory=dict)
    oldest_due: datetime | None = None

    def to_json(self) -> dict[str, Any]:
        """JSON-compatible data (instants stay datetimes for the caller's encoder)."""
        return {"supervisors": [asdict(s) for s in self.supervisors],
                "unclaimable": [asdict(t) for t in self.unclaimable],
                "deliveries": self.deliveries, "oldest_due": self.oldest_due}


async def status(db: Database, now: datetime, *, tenant_id: str | None = None) -> DeploymentStatus:
    """The deployment as of ``now`` (aware): supervisors, unclaimable tasks and the
    outbox backlog (of one tenant, or of all but the replays', whose clock is virtual).

    Raises:
        ValueError: ``now`` is naive.
    """
    summary = await db.fetch("deliveries_summary", tenant_id)
    due = [r["oldest_due"] for r in summary if r["oldest_due"] is not None]
    return DeploymentStatus(await supervisors(db, now),
                            await unclaimable_tasks(db, now, tenant_id=tenant_id),
                            {r["status"]: r["count"] for r in summary}, min(due, default=None))


@dataclass(frozen=True, slots=True)
class TenantStatus:
    """What concerns one tenant: its tasks no live supervisor can take, its deliveries
    by status and the instant its oldest due notice has waited since (``None``: none
    due). Nothing of the fleet: no supervisor, host, pid, nor the agents and sources
    the supervisors offer (those are the installation administrator's,
    :func:`status`)."""

    tenant_id: str
    unclaimable: list[UnclaimableTask]
    deliveries: dict[str, int]
    oldest_due: datetime | None

    def to_json(self) -> dict[str, Any]:
        """JSON-compatible data (instants stay datetimes for the caller's encoder)."""
        return {"tenant_id": self.tenant_id,
                "unclaimable": [asdict(t) for t in self.unclaimable],
                "deliveries": self.deliveries, "oldest_due": self.oldest_due}


async def tenant_status(db: Database, now: datetime, tenant_id: str) -> TenantStatus:
    """One tenant's view of the deployment as of ``now`` (aware): what a tenant's
    operator may see (:class:`TenantStatus`).

    Raises:
        ValueError: ``now`` is naive.
        DatabaseUnavailable: the store failed.
    """
    summary = await db.fetch("deliveries_summary", tenant_id)
    due = [r["oldest_due"] for r in summary if r["oldest_due"] is not None]
    return TenantStatus(tenant_id, await unclaimable_tasks(db, now, tenant_id=tenant_id),
                        {r["status"]: r["count"] for r in summary}, min(due, default=None))


@dataclass(frozen=True, slots=True)
class Readiness:
    """Whether this process should get traffic, and why not.

    Attributes:
        checks: ``database``, ``migrations`` and ``clock``, each ``"ok"`` or the reason.
        clock_offset_seconds: this host's wall clock minus PostgreSQL's, + when ahead (the
            sign of the supervisor's ``clock_offset``; ``None`` if unread).
    """

    ready: bool
    checks: dict[str, str]
    clock_offset_seconds: float | None = None


async def readiness(db: Database, clock: Clock, *, skew_budget: float) -> Readiness:
    """Database reachable, migrations current, and this host's clock within
    ``skew_budget`` seconds of PostgreSQL's (seed 003's clock-skew budget).

    Never raises for an unreachable database: that is a reason in ``checks``.
    """
    checks = {"database": "ok", "migrations": "ok", "clock": "ok"}
    offset: float | None = None
    try:
        pending = await db.pending_migrations()
        if pending:
            checks["migrations"] = f"migrations {pending} are not applied; run watchkeeper db migrate"
        host = clock.host if isinstance(clock, AnchoredClock) else clock  # the wall clock
        wall, at = host.now(), host.monotonic()
        before, server, after = await DatabaseTime(db).read(host.monotonic)
        # the host's wall clock at the reading's midpoint, minus PostgreSQL's: + is ahead,
        # the sign of the supervisor's clock_offset and of the metric
        offset = (wall + timedelta(seconds=(before + after) / 2 - at) - server).total_seconds()
        if abs(offset) > skew_budget:
            checks["clock"] = (f"this host's clock is {offset:+.3f} s off PostgreSQL's, beyond the "
                               f"{skew_budget:g} s budget")
    except WatchkeeperError as exc:
        checks["database"] = f"unreachable: {exc}"
        checks["migrations"] = checks["clock"] = "unknown (no database)"
    return Readiness(all(v == "ok" for v in checks.values()), checks, offset)
