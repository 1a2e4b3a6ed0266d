"""The fleet: which supervisors are live, and which agents and sources they offer.

Each supervisor writes a heartbeat row (``supervisors``) every ``heartbeat_seconds``;
its ``detail`` names the agents its workers have (``agents``; empty when it runs no
workers) and the condition sources its poller reads (``sources``). A supervisor is
*live* when its status is not ``stopped`` and its last heartbeat is at most
:data:`LIVE_HEARTBEATS` intervals old. One that is not live and never recorded a stop
is *lost* (killed, or its host gone): every live supervisor's heartbeat marks such rows
``lost`` in the table (:func:`mark_lost`), and a read shows them lost even before that
(no supervisor left to mark them). A heartbeat written before supervisors named their agents has no
``agents`` entry: such a supervisor claims tasks of any agent, so while one is live no
agent counts as unoffered.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from ..store._db import Database

__all__ = ["LIVE_HEARTBEATS", "LostSupervisor", "SupervisorState", "heartbeat_detail",
           "mark_lost", "offered_agents", "supervisor_states"]

LIVE_HEARTBEATS = 3
"""A supervisor whose last heartbeat is older than this many of its intervals is not live."""

_DEFAULT_HEARTBEAT_SECONDS = 5.0


@dataclass(frozen=True, slots=True)
class SupervisorState:
    """One supervisor's heartbeat row, read at ``now``.

    Attributes:
        heartbeat_seconds: its heartbeat interval, seconds.
        agents, sources: what it offers (sorted names); ``None`` when its heartbeat
            does not say (written by an earlier version).
        live: status neither ``stopped`` nor ``lost``, and heartbeat within
            ``LIVE_HEARTBEATS`` intervals.
        lost: not live and no stop recorded (status ``lost``, or a heartbeat expired that
            no live supervisor has marked yet).
        silent_seconds: seconds since its last heartbeat (may be negative when its clock
            is ahead of the reader's).
    """

    supervisor_id: str
    hostname: str
    pid: int
    started_at: datetime
    heartbeat_at: datetime
    status: str
    clock_offset_ms: float | None
    heartbeat_seconds: float
    agents: tuple[str, ...] | None
    sources: tuple[str, ...] | None
    live: bool
    silent_seconds: float
    lost: bool = False


def heartbeat_detail(*, loops: Sequence[str], restarts: Mapping[str, int],
                     heartbeat_seconds: float, agents: Sequence[str],
                     sources: Sequence[str]) -> dict[str, Any]:
    """The ``detail`` a supervisor's heartbeat writes (JSON)."""
    return {"loops": list(loops), "restarts": dict(restarts),
            "heartbeat_seconds": heartbeat_seconds, "agents": sorted(agents),
            "sources": sorted(sources)}


async def supervisor_states(db: Database, now: datetime) -> list[SupervisorState]:
    """Every supervisor that ever heartbeat against ``db``, newest heartbeat first, with
    its liveness at ``now`` (aware).

    Raises:
        ValueError: ``now`` is naive.
        DatabaseUnavailable: the store failed.
    """
    if now.tzinfo is None:
        raise ValueError("now is a naive datetime. Fix: pass an aware instant (UTC).")
    return [_state(row, now) for row in await db.fetch("supervisors_list")]


def _state(row: Mapping[str, Any], now: datetime) -> SupervisorState:
    detail = row["detail"] or {}
    every = float(detail.get("heartbeat_seconds", _DEFAULT_HEARTBEAT_SECONDS))
    silent = (now - row["heartbeat_at"]).total_seconds()
    live = row["status"] not in ("stopped", "lost") and (
        now - row["heartbeat_at"] <= timedelta(seconds=LIVE_HEARTBEATS * every))
    return SupervisorState(
        row["supervisor_id"], row["hostname"], row["pid"], row["started_at"],
        row["heartbeat_at"], row["status"], row["clock_offset_ms"], every,
        _names(detail.get("agents")), _names(detail.get("sources")), live, silent,
        not live and row["status"] != "stopped")


@dataclass(frozen=True, slots=True)
class LostSupervisor:
    """A supervisor :func:`mark_lost` just marked: its last heartbeat (UTC) and the
    status it had then (``running``, ``draining``, ``clock_uncertain``)."""

    supervisor_id: str
    hostname: str
    pid: int
    heartbeat_at: datetime
    was: str


async def mark_lost(db: Database, now: datetime) -> list[LostSupervisor]:
    """Mark ``lost`` every supervisor whose heartbeat is more than
    :data:`LIVE_HEARTBEATS` of its intervals older than ``now`` (aware; PostgreSQL's
    time, as the heartbeats are) and that never recorded a stop; return those marked.

    Raises:
        ValueError: ``now`` is naive.
        DatabaseUnavailable: the store failed.
    """
    if now.tzinfo is None:
        raise ValueError("now is a naive datetime. Fix: pass an aware instant (UTC).")
    rows = await db.fetch("supervisors_mark_lost", now, float(LIVE_HEARTBEATS))
    return [LostSupervisor(r["supervisor_id"], r["hostname"], r["pid"], r["heartbeat_at"],
                           r["was"]) for r in rows]


def _names(value: Any) -> tuple[str, ...] | None:
    if not isinstance(value, list):
        return None
    return tuple(sorted(str(v) for v in value))


def offered_agents(states: Sequence[SupervisorState]) -> frozenset[str] | None:
    """The agent names the live supervisors offer between them; ``None`` when a live
    supervisor does not say (it may take a task of any agent)."""
    offered: set[str] = set()
    for state in states:
        if not state.live:
            continue
        if state.agents is None:
            return None
        offered.update(state.agents)
    return frozenset(offered)
