"""Running watchkeeper: where its database is, its clock (PostgreSQL's), one tick for
an external cron, and the supervisor's configuration from the settings."""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Iterator
from typing import Any

from watchkeeper.sources import SourceRegistry

from .._errors import WatchkeeperError
from .._settings import Settings
from ..engine._agents import AgentCatalog
from ..engine._clock import AnchoredClock, Clock, DatabaseTime, SystemClock
from ..engine._delivery_store import PgDeliveryStore
from ..engine._poller import poll_once
from ..engine._scheduler import tick
from ..engine._supervisor import (
    SupervisorConfig,
    close_channels,
    default_channels,
    make_dispatcher,
)
from ..engine._worker import Worker
from ..store._db import Database, Timeouts
from ..store._embedded import embedded_postgres
from ..store._sealing import Keyring

__all__ = ["database_clock", "database_server", "database_timeouts", "keep_database_clock",
           "secret_keyring", "supervisor_config",
           "tick_once"]

POLL_PASS = 200
"""Definitions one poller pass claims; ``tick_once`` polls again while a pass is full."""


async def database_clock(db: Database, host: Clock | None = None, *,
                         sample: bool = True) -> AnchoredClock:
    """A clock on PostgreSQL's time (the authority for everything that crosses
    processes: DESIGN "Runs, leases, fencing, clocks"), sampled once now and running on
    ``host``'s monotonic clock (default: the system's) from there; for a process that
    decides due slots, leases or deadlines without a supervisor (``tick``, the API).
    With ``sample`` false it is not sampled yet (it reads ``host``'s wall clock until
    :func:`keep_database_clock` has sampled it: a server started while the database
    is unreachable).

    Raises:
        DatabaseUnavailable: PostgreSQL cannot be reached (``sample`` only).
    """
    clock = AnchoredClock(host or SystemClock())
    if sample:
        await clock.resample(DatabaseTime(db))
    return clock


async def keep_database_clock(db: Database, clock: AnchoredClock, *,
                              every: float = 10.0) -> None:
    """Anchor ``clock`` to PostgreSQL's time now, then every ``every`` seconds, forever
    (a failed sample keeps the old anchor running on the monotonic clock; until a
    first sample lands, one is tried every second)."""
    authority = DatabaseTime(db)
    while True:
        with contextlib.suppress(WatchkeeperError):
            await clock.resample(authority)
        await clock.sleep(every if clock.sampled_at is not None else 1.0)


@contextlib.contextmanager
def database_server(settings: Settings) -> Iterator[str]:
    """The DSN to open: ``DATABASE_URL``, or an embedded PostgreSQL under
    ``WATCHKEEPER_HOME`` started (or joined) for as long as the context lasts.

    Raises:
        EmbeddedPostgresError: the embedded server could not be started.
    """
    if settings.database_url:
        yield settings.database_url
    else:
        with embedded_postgres(settings.home) as dsn:
            yield dsn


def secret_keyring(settings: Settings) -> Keyring:
    """The keys webhook secrets are sealed under: ``WATCHKEEPER_SECRET_KEY``, or the key
    file ``<WATCHKEEPER_HOME>/secret.key`` (created 0600 with a new key on first start).

    Raises:
        ConfigError: the setting or the file holds no key, or the file cannot be made.
    """
    value = settings.secret_key.get_secret_value() if settings.secret_key else None
    return Keyring.load(value, settings.home)


def database_timeouts(settings: Settings) -> Timeouts:
    """The pool's ``lock_timeout`` and ``statement_timeout`` from the settings
    (``WATCHKEEPER_LOCK_TIMEOUT``, ``WATCHKEEPER_STATEMENT_TIMEOUT``, seconds)."""
    return Timeouts(settings.lock_timeout, settings.statement_timeout)


def supervisor_config(settings: Settings, *, workers: int | None = None,
                      **overrides: Any) -> SupervisorConfig:
    """A :class:`SupervisorConfig` from the settings (``workers`` overrides
    ``WATCHKEEPER_WORKERS``; any other field may be overridden by keyword)."""
    fields: dict[str, Any] = {
        "home": settings.home, "workers": workers or settings.workers,
        "lease_seconds": settings.lease_seconds, "tick_seconds": settings.tick_seconds,
        "skew_budget": settings.clock_skew_budget,
        "delivery_max_attempts": settings.delivery_max_attempts,
        "delivery_max_age": settings.delivery_max_age,
        "webhook_timeout": settings.webhook_timeout,
        "drain_seconds": settings.drain_seconds, "listen": settings.listen,
    }
    return SupervisorConfig(**(fields | overrides))


async def tick_once(db: Database, clock: Clock, settings: Settings, *, agents: AgentCatalog,
                    sources: SourceRegistry, work: bool = True,
                    actor: str = "cli-tick") -> dict[str, Any]:
    """One tick and condition polls until a pass claims less than a full batch; with
    ``work``, also every runnable task and every due notice, then return.

    Returns:
        ``{"decisions": {decision: count}, "ranges": int, "fenced_out": int,
        "polls": {action: count}, "tasks": {status: count}, "deliveries": {outcome: count}}``.
    """
    report = await tick(db, clock, actor=actor)
    polls: dict[str, int] = {}
    while True:
        polled = await poll_once(db, clock, sources, actor=actor)
        for event in polled.events:
            polls[event.action] = polls.get(event.action, 0) + 1
        if polled.claimed < POLL_PASS:
            break
    done: dict[str, int] = {}
    sent: dict[str, int] = {}
    if work:
        name = f"{actor}-{socket.gethostname()}-{os.getpid()}"
        worker = Worker(db, clock, agents, worker_id=name,
                        artifact_root=settings.home / "artifacts",
                        lease_seconds=settings.lease_seconds, sources=sources)
        while (outcome := await worker.run_once()) is not None:
            done[outcome.status] = done.get(outcome.status, 0) + 1
        store = PgDeliveryStore(db, clock)
        config = supervisor_config(settings)
        channels = default_channels(settings.home, store, clock,
                                    webhook_timeout=config.webhook_timeout)
        dispatcher = make_dispatcher(config, store, channels, clock, name)
        try:
            while (stats := await dispatcher.dispatch_once()).claimed:
                for kind in ("delivered", "retrying", "dead", "suppressed", "deferred"):
                    sent[kind] = sent.get(kind, 0) + getattr(stats, kind)
        finally:
            await close_channels(channels)
    return {"decisions": dict(report.decisions), "ranges": report.ranges,
            "fenced_out": report.fenced_out, "polls": polls, "tasks": done,
            "deliveries": {k: v for k, v in sent.items() if v}}
