"""``/healthz`` (alive), ``/readyz`` (database, migrations, clock within budget) and
``/metrics`` (Prometheus exposition format, prometheus-client).

Metric names follow Prometheus' conventions: ``watchkeeper_`` prefix, ``_total`` for
counters, base units (``_seconds``). Counters are this process's supervisor's, since
it started; gauges are read from the database at scrape time (the whole deployment's).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from watchkeeper.runtime import Supervisor, SupervisorStatistics, WatchkeeperError
from watchkeeper.runtime import usecases as uc

from ._deps import Svc

__all__ = ["router"]

router = APIRouter(tags=["health"])


@router.get("/healthz", summary="Alive")
async def healthz() -> dict[str, str]:
    """The process answers (nothing else is checked)."""
    return {"status": "ok"}


@router.get("/readyz", summary="Ready", responses={503: {"description": "Not ready, with why"}})
async def readyz(svc: Svc, request: Request) -> Response:
    """Database reachable, migrations current, this host's clock within the skew budget
    of PostgreSQL's; else 503 with the reasons. With a supervisor in this process, a
    loop stalled on a lock (``lock_timeout`` / ``statement_timeout``) answers 503,
    status ``degraded``, with ``checks.locks`` naming the loops and why;
    ``wake`` says how it learns of new work besides its due instants: ``notify``
    (LISTEN/NOTIFY), ``connecting``, or ``polling every N s: <why>`` (behind a
    transaction pooler, say) — informative, never a reason to be unready."""
    ready = await uc.readiness(svc.db, svc.clock, skew_budget=svc.settings.clock_skew_budget)
    body: dict[str, Any] = {"status": "ready" if ready.ready else "not ready",
                            "checks": ready.checks,
                            "clock_offset_seconds": ready.clock_offset_seconds}
    supervisor: Supervisor | None = getattr(request.app.state, "supervisor", None)
    ok = ready.ready
    if supervisor is not None:
        stats = supervisor.statistics()
        body["wake"] = stats.wake
        if stats.stalled:  # degraded: another session holds a lock the loops need
            body["checks"]["locks"] = "stalled: " + "; ".join(sorted(stats.stalled.values()))
            body["status"] = "degraded" if ok else body["status"]
            ok = False
    return JSONResponse(body, status_code=200 if ok else 503,
                        headers={"Cache-Control": "no-store"})


class _Snapshot(Collector):
    """Metric families from one scrape's readings."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterable[Metric]:
        return self.families


def _supervisor_families(stats: SupervisorStatistics) -> list[Metric]:
    ticks = HistogramMetricFamily("watchkeeper_tick_duration_seconds",
                                  "Duration of this process's ticks.")
    buckets = [("+Inf" if bound == float("inf") else repr(bound), count)
               for bound, count in stats.tick_seconds]
    ticks.add_metric([], buckets=buckets or [("+Inf", 0)], sum_value=stats.tick_seconds_sum)
    decisions = CounterMetricFamily("watchkeeper_occurrence_decisions",
                                    "Occurrence decisions this process's ticks claimed.",
                                    labels=["decision"])
    for decision, count in sorted(stats.decisions.items()):
        decisions.add_metric([decision], count)
    polls = CounterMetricFamily("watchkeeper_polls", "Condition polls decided by this process.",
                                labels=["verdict", "action"])
    for (verdict, action), count in sorted(stats.polls_by.items()):
        polls.add_metric([verdict, action], count)
    runs = CounterMetricFamily("watchkeeper_runs", "Task runs this process's workers ended, by "
                               "the status they left (stale: rejected, its token no longer "
                               "current).", labels=["outcome"])
    for outcome, count in sorted(stats.task_outcomes.items()):
        runs.add_metric([outcome], count)
    deliveries = CounterMetricFamily("watchkeeper_deliveries", "Dispatch outcomes of this "
                                     "process's outbox.", labels=["outcome"])
    for outcome, count in sorted(stats.delivery_outcomes.items()):
        deliveries.add_metric([outcome], count)
    stalls = CounterMetricFamily("watchkeeper_lock_stalls", "Statements of this process's "
                                 "supervisor cancelled by lock_timeout or statement_timeout "
                                 "(retried: nothing lost).", labels=["loop"])
    for loop, count in sorted(stats.lock_stalls.items()):
        stalls.add_metric([loop], count)
    return [
        ticks, decisions, polls, runs, deliveries, stalls,
        CounterMetricFamily("watchkeeper_lease_takeovers", "Expired leases this process's "
                            "workers took over.", value=stats.takeovers),
        CounterMetricFamily("watchkeeper_stale_rejections", "Runs rejected because their "
                            "fencing token was no longer current.",
                            value=stats.task_outcomes.get("stale", 0)),
        GaugeMetricFamily("watchkeeper_clock_uncertain", "1 while this process's clock is "
                          "beyond the skew budget (it dispatches nothing new).",
                          value=int(stats.clock_uncertain)),
    ]


async def _database_families(svc: Any) -> list[Metric]:
    now = svc.clock.now()
    state = await uc.status(svc.db, now)
    backlog = GaugeMetricFamily("watchkeeper_outbox_deliveries", "Deliveries by status "
                                "(every tenant but replays').", labels=["status"])
    for status in uc.DELIVERY_STATUSES:
        backlog.add_metric([status], state.deliveries.get(status, 0))
    age = (now - state.oldest_due).total_seconds() if state.oldest_due else 0.0
    alive = sum(1 for s in state.supervisors if s.live)
    offsets = GaugeMetricFamily("watchkeeper_clock_offset_seconds", "Each live supervisor's "
                                "clock offset to PostgreSQL's.", labels=["supervisor"])
    for s in state.supervisors:
        if s.live and s.clock_offset_ms is not None:
            offsets.add_metric([s.supervisor_id], s.clock_offset_ms / 1000)
    return [
        backlog,
        GaugeMetricFamily("watchkeeper_outbox_oldest_due_age_seconds", "How long the oldest "
                          "due notice has waited (0: none due).", value=max(age, 0.0)),
        GaugeMetricFamily("watchkeeper_supervisors_alive", "Supervisors with a recent "
                          "heartbeat.", value=alive),
        GaugeMetricFamily("watchkeeper_supervisors_lost", "Supervisors whose heartbeat "
                          "expired with no stop recorded (killed, or their host gone).",
                          value=sum(1 for s in state.supervisors if s.lost)),
        GaugeMetricFamily("watchkeeper_tasks_unclaimable", "Due tasks whose agent no live "
                          "supervisor offers.", value=len(state.unclaimable)),
        offsets,
    ]


@router.get("/metrics", summary="Prometheus metrics", response_class=Response,
            responses={200: {"content": {CONTENT_TYPE_LATEST: {}}}})
async def metrics(svc: Svc, request: Request) -> Response:
    """The Prometheus exposition format (text 0.0.4). While the database is unreachable
    or a lock stalls its reads, the gauges read from it are left out and this
    process's counters still answer (when they matter most)."""
    try:
        families = await _database_families(svc)
    except WatchkeeperError:
        families = []
    supervisor: Supervisor | None = getattr(request.app.state, "supervisor", None)
    if supervisor is not None:
        families += _supervisor_families(supervisor.statistics())
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Snapshot(families))
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST,
                    headers={"Cache-Control": "no-store"})
