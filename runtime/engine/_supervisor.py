"""The supervisor: one anyio task group of small loops around a shared database.

Loops: ``tick`` (admission), ``poll`` (conditions), ``worker-N`` (runs), ``dispatch``
(outbox), ``clock`` (a sample of PostgreSQL's clock) and ``heartbeat``. Any number of
supervisors may run against one database; it arbitrates every claim.

* A loop that fails with a transient error (:class:`DatabaseUnavailable`: a dropped
  connection, a restarting or unreachable server, terminated backends) is restarted
  with capped exponential backoff (full jitter, bound 1 s doubling up to 30 s) for as
  long as it takes; the pool reconnects on its own. Only with a ``restart_limit`` set
  does :class:`LoopDied` take the supervisor down after that many consecutive failures.
  While any loop is down the heartbeat is not written, so a dead loop never looks
  alive.
* PostgreSQL's clock is the authority (DESIGN "Runs, leases, fencing, clocks"): every
  loop, worker and the outbox run on an :class:`AnchoredClock` — the database's time
  at the last sample (every ``skew_check_seconds``) plus this host's monotonic time
  since — so leases, takeovers, renewals, due slots, ``not_before``/``expires_at`` and
  deadlines never follow a step or drift of the host's wall clock.
* The host's offset to that time is checked at the start of every step (no round
  trip), so a step is seen within one tick. Beyond the clock-skew budget (default
  2 s), or with no sample of the authority for ``3 * skew_check_seconds`` (no offset
  measurable), the supervisor admits, polls and claims nothing new and records
  ``clock_uncertain`` with the offset or the reason, until it is back (seed 003's
  "hold new dispatch"). Running tasks keep renewing their leases, on the anchored
  time.
* Shutdown is a drain (:meth:`Supervisor.drain`, :mod:`._drain`): claim nothing new,
  give what is in flight ``drain_seconds``, then interrupt what is left, record it and
  release its leases at once; :meth:`Supervisor.drain_report` says what it did.
* Time comes from the injected :class:`Clock`; with a :class:`FakeClock`,
  :meth:`Supervisor.wait_idle` tells a test when every loop is parked on the clock.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import socket
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import TaskStatus

from watchkeeper.outbox import Channel, Dispatcher, FileChannel, LogChannel, WebhookChannel, backoff_seconds
from watchkeeper.sources import SourceRegistry
from watchkeeper.triggers import preload_zones

from .._errors import DatabaseUnavailable, LockStall, WatchkeeperError
from ..store._db import Database
from ._admission import NOT_READ, RunUnit
from ._agents import AgentCatalog
from ._clock import AnchoredClock, Clock, DatabaseTime, TimeAuthority
from ._delivery_store import PgDeliveryStore
from ._drain import DrainReport, Shutdown
from ._fleet import heartbeat_detail, mark_lost
from ._poller import poll_once
from ._registry import Registry, register
from ._scheduler import execute_run, tick, warm_tick
from ._worker import TaskOutcome, Worker

__all__ = ["LoopDied", "Supervisor", "SupervisorConfig", "SupervisorStatistics",
           "close_channels", "default_channels", "make_dispatcher"]

Step = Callable[[], Awaitable["bool | float"]]
"""A loop's step: ``True`` when busy (run again at once), ``False`` when idle (sleep the
loop's interval), or the seconds until its next work is due (sleep that long, at most the
interval)."""

log = logging.getLogger("watchkeeper.supervisor")

TICK_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, float("inf"))
"""Bucket bounds (seconds) of the tick duration histogram (Prometheus' defaults)."""


def default_channels(home: Path, store: PgDeliveryStore, clock: Clock, *,
                     webhook_timeout: float = 10.0) -> dict[str, Channel]:
    """The built-in channels: ``log``; ``file`` writing under ``home/notices/<tenant>``;
    ``webhook`` signed per Standard Webhooks, to the tenant's named endpoints, with
    ``webhook_timeout`` seconds for connect, read and write."""
    return {"log": LogChannel(), "file": FileChannel(home / "notices"),
            "webhook": WebhookChannel(store.endpoint, now=clock.now, timeout=webhook_timeout)}


def make_dispatcher(config: SupervisorConfig, store: PgDeliveryStore,
                    channels: dict[str, Channel], clock: Clock, owner: str) -> Dispatcher:
    """The outbox dispatcher with ``config``'s attempt and age limits."""
    return Dispatcher(store, channels, now=clock.now, owner=owner,
                      max_attempts=config.delivery_max_attempts,
                      max_age=timedelta(seconds=config.delivery_max_age))


async def close_channels(channels: dict[str, Channel]) -> None:
    """Release what channels hold (the webhook channel's HTTP connections)."""
    for channel in channels.values():
        closer = getattr(channel, "aclose", None)
        if closer is not None:
            await closer()


class LoopDied(WatchkeeperError):
    """A supervisor loop kept failing; the supervisor stops rather than limp on."""

    def __init__(self, loop: str, cause: BaseException) -> None:
        self.loop = loop
        super().__init__(f"loop {loop!r} failed repeatedly; last error: {cause}")


@dataclass(frozen=True)
class SupervisorConfig:
    """Settings of one supervisor; durations in seconds.

    Attributes:
        home: where file deliveries (relative paths) and artifacts go.
        skew_budget: maximum |offset| of the host's wall clock to PostgreSQL's before
            dispatch stops; ``None`` disables the check and, unless an authority is
            passed to :class:`Supervisor`, the anchoring (tests whose fake clock plays
            the database's).
        skew_check_seconds: how often PostgreSQL's clock is sampled; with no sample
            for three times this long the clock is uncertain.
        delivery_max_attempts, delivery_max_age: a notice is ``dead`` after this many
            attempts, or when its next try would fall later than this many seconds
            after it was committed (``redeliver`` re-queues it).
        webhook_timeout: seconds for a webhook's connect, read and write.
        restart_limit: consecutive failures of one loop after which :class:`LoopDied`
            stops the supervisor; ``None`` (the default): restart it for as long as
            the database stays away.
        drain_seconds: how long runs and delivery passes in flight may go on after a stop
            request (:meth:`Supervisor.drain`) before they are interrupted; may be zero.
        batch_size, admission_lanes: definitions per admission transaction, and such
            transactions in flight at once across the live supervisors (each runs its
            share, at least one: :func:`~._scheduler.tick`).
        poll_batch: condition definitions claimed per poller pass (decided in chunks of
            :data:`~._poller.DECIDE_CHUNK`, two at once).
        listen: wake on PostgreSQL notifications (LISTEN/NOTIFY: a definition due sooner,
            new tasks, new deliveries) besides the due instants and the tick period;
            behind a transaction pooler the supervisor polls instead, and says so.
        listen_probe_seconds: how often the listening connection is checked.
    """

    home: Path
    supervisor_id: str = field(default_factory=lambda: f"{socket.gethostname()}-{os.getpid()}-"
                                                        f"{uuid.uuid4().hex[:6]}")
    tick_seconds: float = 1.0
    workers: int = 2
    lease_seconds: float = 60.0
    poll_seconds: float = 1.0
    heartbeat_seconds: float = 5.0
    skew_budget: float | None = 2.0
    skew_check_seconds: float = 10.0
    batch_size: int = 1000
    admission_lanes: int = 2
    poll_batch: int = 1000
    restart_limit: int | None = None
    retry_base: float = 2.0
    delivery_max_attempts: int = 8
    delivery_max_age: float = 86400.0
    webhook_timeout: float = 10.0
    drain_seconds: float = 30.0
    listen: bool = True
    listen_probe_seconds: float = 10.0


@dataclass(frozen=True, slots=True)
class SupervisorStatistics:
    """Observable state, read by tests, the CLI and ``/metrics``.

    Attributes:
        decisions: occurrence decisions this supervisor's ticks claimed, by decision.
        polls_by: decided polls by (verdict, action); an unread poll's verdict is ``none``.
        tick_seconds: cumulative counts of ticks at or under each bucket bound (seconds,
            monotonic clock; the last bound is ``inf``); ``tick_seconds_sum`` their total.
        takeovers: expired leases this supervisor's workers took over.
        delivery_outcomes: dispatch outcomes (delivered, retrying, dead, suppressed,
            deferred) by kind.
        planned: definitions this supervisor's ticks planned (locked and decided: no
            other supervisor planned the same due slot).
        lock_stalls: statements cancelled by ``lock_timeout`` or ``statement_timeout``
            (:class:`LockStall`), by loop.
        stalled: the loops whose last step stalled so (name -> the reason), until one
            of their steps succeeds.
        wake: how the loops learn of new work besides their due instants:
            ``"notify"`` (listening), ``"connecting"`` (not yet, or again after a lost
            connection), or ``"polling: <why>"``.
    """

    ticks: int
    admitted: int
    polls: int
    fires: int
    task_outcomes: dict[str, int]
    deliveries: int
    clock_uncertain: bool
    clock_offset: float | None
    dead_loops: frozenset[str]
    restarts: dict[str, int]
    decisions: dict[str, int] = field(default_factory=dict)
    polls_by: dict[tuple[str, str], int] = field(default_factory=dict)
    tick_seconds: tuple[tuple[float, int], ...] = ()
    tick_seconds_sum: float = 0.0
    takeovers: int = 0
    delivery_outcomes: dict[str, int] = field(default_factory=dict)
    wake: str = ""
    planned: int = 0
    lock_stalls: dict[str, int] = field(default_factory=dict)
    stalled: dict[str, str] = field(default_factory=dict)

    @property
    def completed(self) -> int:
        """Tasks this supervisor completed."""
        return self.task_outcomes.get("completed", 0)


class Supervisor:
    """Runs the loops; see the module docstring."""

    def __init__(self, db: Database, clock: Clock, config: SupervisorConfig, *,
                 registry: Registry | None = None, agents: AgentCatalog | None = None,
                 channels: dict[str, Channel] | None = None,
                 sources: SourceRegistry | None = None,
                 authority: TimeAuthority | None = None) -> None:
        self.db, self.config, self.host_clock = db, config, clock
        self.authority: TimeAuthority | None = authority
        if authority is None and config.skew_budget is not None:
            self.authority = DatabaseTime(db)
        self.clock: Clock = AnchoredClock(clock) if self.authority is not None else clock
        """The supervisor's time: :class:`AnchoredClock` on the authority (PostgreSQL's
        clock by default), or the injected clock itself when there is none."""
        self.sources = sources or SourceRegistry()
        self.registry = registry or Registry()
        self.agents = agents or AgentCatalog()
        self.store = PgDeliveryStore(db, self.clock)
        self._own_channels = channels is None
        self.channels: dict[str, Channel] = channels or default_channels(
            config.home, self.store, self.clock, webhook_timeout=config.webhook_timeout)
        self._ticks = self._admitted = self._deliveries = self._polls = self._fires = 0
        self._planned = 0
        self._outcomes: Counter[str] = Counter()
        self._decisions: Counter[str] = Counter()
        self._polls_by: Counter[tuple[str, str]] = Counter()
        self._tick_buckets: Counter[float] = Counter()
        self._tick_sum = 0.0
        self._delivery_outcomes: Counter[str] = Counter()
        self._workers: list[Worker] = []
        self._dead: set[str] = set()
        self._restarts: Counter[str] = Counter()
        self._lock_stalls: Counter[str] = Counter()
        self._stalled: dict[str, str] = {}
        self._parked: dict[str, float] = {}
        self._kicks: dict[str, anyio.Event] = {
            "tick": anyio.Event(), "work": anyio.Event(), "deliver": anyio.Event()}
        self._kickable: dict[str, str] = {}
        self._loops: list[str] = []
        self._uncertain = False
        self._uncertain_why = ""
        self._offset: float | None = None
        self._sample_error: str | None = None
        self._changed = anyio.Event()
        self._scope: anyio.CancelScope | None = None
        self._background: anyio.abc.TaskGroup | None = None
        self._dispatchers: list[Dispatcher] = []
        self._shutdown = Shutdown.RUNNING
        self._drain_seconds = 0.0
        self._drain_started = 0.0
        self._interrupt_reason: str | None = None
        self._drain_outcomes: list[TaskOutcome] = []
        self._released_deliveries = 0
        self._active: set[str] = set()  # loops still running
        self._run_scopes: set[anyio.CancelScope] = set()  # `run` callables in flight
        self._wake = anyio.Event()  # set when the drain starts: parked loops end
        self._pending: set[str] = set()  # loops kicked while running: they go on at once
        self._listener: Callable[[], Awaitable[None]] | None = None  # the connection's probe
        self._listener_stack: contextlib.AsyncExitStack | None = None
        self._wake_reason: str | None = (
            "WATCHKEEPER_LISTEN is off" if not config.listen else db.listen_unavailable())
        self._drained = anyio.Event()  # set when nothing but the heartbeat is left

    # ---------------------------------------------------------------- lifecycle

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Register operator definitions, start every loop, and run until the drain that
        :meth:`drain` or :meth:`stop` started has ended, or until cancelled (then what
        is in flight is abandoned: its leases expire). Signals readiness through
        ``task_status`` (``TaskGroup.start``).

        Raises:
            LoopDied: a loop kept failing.
        """
        if not await self._start():
            return  # stopped before the database could be reached: nothing to record
        try:
            await warm_tick(self.db, self.config.admission_lanes + 1)
        except WatchkeeperError as exc:  # an optimisation: the first tick prepares them
            log.info("could not prepare the tick's statements ahead: %s", exc)
        await anyio.to_thread.run_sync(preload_zones)  # not at the first due instant
        # what start-up made (modules, zones, prepared statements) lives as long as the
        # process: frozen, no collection walks it again (a full one took 13 ms or more,
        # at a due instant as likely as anywhere)
        gc.collect()
        gc.freeze()
        try:
            async with anyio.create_task_group() as tg:
                self._scope, self._background = tg.cancel_scope, tg
                for name, step, interval in self._plan():
                    self._loops.append(name)
                    self._active.add(name)
                    tg.start_soon(self._loop, name, step, interval)
                if self._shutdown is Shutdown.DRAINING:  # asked to drain before it started
                    tg.start_soon(self._drain_deadline, self._drain_seconds)
                task_status.started()
                await self._drained.wait()
                tg.cancel_scope.cancel()  # the heartbeat and the drain deadline
        except BaseExceptionGroup as group:
            died = group.subgroup(LoopDied)
            if died is not None:
                raise died.exceptions[0] from group
            raise
        finally:
            await self._close_listener()
            with anyio.CancelScope(shield=True):
                if self._own_channels:
                    await close_channels(self.channels)
                try:
                    await self.db.execute("supervisor_set_status", self.config.supervisor_id,
                                          "stopped",
                                          {**self._detail(), "dead_loops": sorted(self._dead)})
                except WatchkeeperError:
                    log.warning("could not record the supervisor's stop")

    async def _start(self) -> bool:
        """What comes before the loops: the database open (:meth:`Database.opening`
        may still be trying), a first sample of its clock (know the time before
        deciding anything), the operator's definitions registered and a first
        heartbeat. A failure for want of the database (:class:`DatabaseUnavailable`)
        starts over after the loops' backoff, for as long as it takes (with a
        ``restart_limit``, :class:`LoopDied` after that many).

        Returns:
            ``False`` when a stop (:meth:`drain`) came while waiting for the database.
        """
        failures = 0
        while True:
            try:
                if not self.db.is_open and not await self._unless_stopped(self.db.wait_open):
                    return False
                self._wake_reason = ("WATCHKEEPER_LISTEN is off" if not self.config.listen
                                     else self.db.listen_unavailable())
                if self.authority is not None:
                    assert isinstance(self.clock, AnchoredClock)
                    try:
                        await self.clock.resample(self.authority)
                        self._sample_error = None
                    except DatabaseUnavailable:
                        raise
                    except Exception as exc:  # noqa: BLE001 - as _sample_step: uncertain
                        self._sample_error = str(exc) or type(exc).__name__
                    await self._clock_uncertain()
                for definition in self.registry:
                    await register(self.db, self.clock, definition)
                await self._heartbeat_once("clock_uncertain" if self._uncertain else "running")
            except DatabaseUnavailable as exc:
                failures += 1
                limit = self.config.restart_limit
                if limit is not None and failures > limit:
                    raise LoopDied("start", exc) from exc
                delay = backoff_seconds(failures, base=1.0, cap=30.0)
                log.warning("starting: the database is unreachable (%s); trying again in "
                            "%.1f s", exc, delay)
                if not await self._unless_stopped(self.clock.sleep, delay):
                    return False
                continue
            if failures:
                log.info("started after %d failed attempt(s) to reach the database", failures)
            if self._wake_reason is not None:
                log.warning("wake-up: %s", self._wake_state())
            return True

    async def _unless_stopped(self, wait: Callable[..., Awaitable[None]], *args: Any) -> bool:
        """Await ``wait(*args)``; ``False`` if a stop request came first (it is
        abandoned), ``True`` once it has returned."""
        if self._wake.is_set():
            return False
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._cancel_on, self._wake, tg.cancel_scope)
            await wait(*args)
            tg.cancel_scope.cancel()
            return True
        return False

    def drain(self, seconds: float | None = None) -> Shutdown:
        """Shut down gracefully, one step further per call (``watchkeeper run`` calls it
        on each SIGTERM or SIGINT); :meth:`run` returns once nothing is in flight.

        1. The first call: claim nothing new (no tick admissions, polls, task claims or
           delivery claims). Runs, delivery passes and ``run`` callables in flight go on
           for ``seconds`` of monotonic time (default ``config.drain_seconds``; zero
           interrupts at once), then are interrupted as in 2.
        2. A call while draining interrupts at once: each run is cancelled and recorded
           ``interrupted`` with the reason, and its task released (pending, lease
           cleared) for another supervisor's next attempt, or ended when the retry rules
           leave none (:meth:`Worker.interrupt`); delivery rows in flight are released
           (:meth:`Dispatcher.interrupt`); a ``run`` callable is cancelled and recorded
           ``failed`` with the reason.
        3. A call after that cancels everything at once; what is still being recorded
           is left to its lease's expiry, as after SIGKILL.

        Returns:
            The phase it moved to.

        Raises:
            ValueError: ``seconds`` is negative or NaN.
        """
        if self._shutdown is Shutdown.RUNNING:
            seconds = self.config.drain_seconds if seconds is None else seconds
            if not seconds >= 0:
                raise ValueError(f"a drain of {seconds} s: give seconds >= 0 (0: interrupt at once)")
            self._shutdown, self._drain_seconds = Shutdown.DRAINING, seconds
            self._drain_started = self.clock.monotonic()
            self._wake.set()
            if seconds == 0:
                self._interrupt("supervisor shutting down with no drain time")
            elif self._background is not None:
                self._background.start_soon(self._drain_deadline, seconds)
            self._check_drained()
        elif self._shutdown is Shutdown.DRAINING:
            took = self.clock.monotonic() - self._drain_started
            self._interrupt(f"supervisor shutting down: a second stop request ended the drain "
                            f"after {took:.0f} s of {self._drain_seconds:g} s")
        elif self._shutdown is Shutdown.INTERRUPTING:
            self._shutdown = Shutdown.ABANDONED
            if self._scope is not None:
                self._scope.cancel()
        self._notify()
        return self._shutdown

    def stop(self) -> None:
        """Stop without a drain: the runs and notices in flight are interrupted at once,
        recorded and released (:meth:`drain` with zero seconds); called again, or once a
        drain is interrupting, cancel everything (leases still held then expire)."""
        self.drain(0.0 if self._shutdown is Shutdown.RUNNING else None)

    def drain_report(self) -> DrainReport | None:
        """What the drain did so far; ``None`` while no stop was requested."""
        if self._shutdown is Shutdown.RUNNING:
            return None
        done = tuple(self._drain_outcomes)
        return DrainReport(self._drain_seconds, self._interrupt_reason,
                           tuple(o for o in done if not o.interrupted),
                           tuple(o for o in done if o.interrupted), self._released_deliveries)

    async def _drain_deadline(self, seconds: float) -> None:
        """Interrupt what is left ``seconds`` after the drain began (not after this task
        started: the clock may have moved in between)."""
        await self.clock.sleep(self._drain_started + seconds - self.clock.monotonic())
        if self._shutdown is Shutdown.DRAINING:
            self._interrupt(f"supervisor shutting down: drain deadline of {seconds:g} s passed")

    def _interrupt(self, reason: str) -> None:
        """Interrupt everything in flight now, with ``reason`` (see :meth:`drain`)."""
        self._shutdown, self._interrupt_reason = Shutdown.INTERRUPTING, reason
        if self._in_flight():
            log.warning("%s; interrupting what is in flight and releasing its leases", reason)
        else:  # a normal stop: nothing to interrupt, nothing to warn about
            log.info("%s; nothing was in flight", reason)
        for worker in self._workers:
            worker.interrupt(reason)
        for dispatcher in self._dispatchers:
            dispatcher.interrupt(reason)
        for scope in self._run_scopes:
            scope.cancel()

    def _in_flight(self) -> bool:
        """Whether a run, a ``run`` callable or a dispatch pass is in hand now."""
        return (any(w.busy for w in self._workers) or any(d.busy for d in self._dispatchers)
                or bool(self._run_scopes))

    def _stops(self, name: str) -> bool:
        """Whether loop ``name`` ends now: every loop but the heartbeat, once draining."""
        return self._shutdown is not Shutdown.RUNNING and name != "heartbeat"

    def _check_drained(self) -> None:
        if (self._shutdown is not Shutdown.RUNNING and not self._active - {"heartbeat"}
                and not self._run_scopes):
            self._drained.set()

    def _plan(self) -> list[tuple[str, Step, float]]:
        cfg = self.config
        loops: list[tuple[str, Step, float]] = [("tick", self._tick_step, cfg.tick_seconds)]
        self._kickable["tick"] = "tick"
        loops.append(("poll", self._poll_step, cfg.tick_seconds))
        self._kickable["poll"] = "tick"
        for index in range(cfg.workers):
            worker = Worker(self.db, self.clock, self.agents,
                            worker_id=f"{cfg.supervisor_id}/w{index}",
                            artifact_root=cfg.home / "artifacts", lease_seconds=cfg.lease_seconds,
                            retry_base=cfg.retry_base, sources=self.sources)
            self._workers.append(worker)
            loops.append((f"worker-{index}", self._worker_step(worker), cfg.poll_seconds))
            self._kickable[f"worker-{index}"] = "work"
        dispatcher = make_dispatcher(cfg, self.store, self.channels, self.clock,
                                     f"{cfg.supervisor_id}/outbox")
        self._dispatchers.append(dispatcher)
        loops.append(("dispatch", self._dispatch_step(dispatcher), cfg.poll_seconds))
        self._kickable["dispatch"] = "deliver"
        loops.append(("heartbeat", self._heartbeat_step, cfg.heartbeat_seconds))
        if self.authority is not None:
            loops.append(("clock", self._sample_step, cfg.skew_check_seconds))
        if cfg.listen and self._wake_reason is None:
            loops.append(("listen", self._listen_step, cfg.listen_probe_seconds))
        return loops

    # ---------------------------------------------------------------- loop machinery

    async def _loop(self, name: str, step: Step, interval: float) -> None:
        try:
            await self._steps(name, step, interval)
        finally:
            self._active.discard(name)
            self._check_drained()
            self._notify()

    async def _steps(self, name: str, step: Step, interval: float) -> None:
        """Run ``step`` again and again until a drain starts: at once while it is busy
        (``True``), after ``interval`` when it is not (``False``), or after the seconds it
        returns when it knows when its next work is due (at most ``interval``)."""
        failures = 0
        while not self._stops(name):
            try:
                busy = await step()
            except LockStall as exc:
                failures += 1
                await self._stall(name, exc)
                await self._sleep(name, backoff_seconds(failures, base=1.0, cap=30.0))
                continue
            except DatabaseUnavailable as exc:
                failures += 1
                self._dead.add(name)
                self._restarts[name] += 1
                self._notify()
                limit = self.config.restart_limit
                if limit is not None and failures > limit:
                    raise LoopDied(name, exc) from exc
                delay = backoff_seconds(failures, base=1.0, cap=30.0)
                log.warning("loop %s failed (%s); restarting in %.1f s", name, exc, delay)
                await self._sleep(name, delay)
                continue
            if failures:
                log.info("loop %s recovered", name)
            if self._stalled.pop(name, None) is not None:
                log.warning("loop %s: no longer stalled on a lock", name)
            failures = 0
            self._dead.discard(name)
            self._notify()
            if busy is not True and not self._stops(name):
                wait = interval if busy is False else max(0.0, min(busy, interval))
                await self._sleep(name, wait)

    async def _stall(self, name: str, exc: LockStall) -> None:
        """A step of loop ``name`` gave up waiting for a lock (or ran past
        ``statement_timeout``): its transaction rolled back and the step is retried
        after the backoff, so nothing is lost. Count it, log it and, when the loop was
        not stalled already, record a ``lock_stall`` event (tenant ``_operator``). The
        loop stays alive (the heartbeat goes on: the process is not down, another
        session holds what it needs)."""
        self._lock_stalls[name] += 1
        first = name not in self._stalled
        self._stalled[name] = f"{name}: {exc}"
        self._notify()
        log.error("loop %s stalled: %s; its transaction rolled back, retrying (another session "
                  "holds a lock it needs: see pg_locks / pg_blocking_pids)", name, exc)
        if not first:
            return
        now = self.clock.now()
        try:
            await self.db.execute(
                "event_insert", "_operator", "*", self.config.supervisor_id, None, "lock_stall",
                None, None, now, now, 1, f"loop {name}: {exc}", now, self.config.supervisor_id)
        except WatchkeeperError as again:
            log.warning("could not record the lock stall of loop %s: %s", name, again)

    async def _sleep(self, name: str, seconds: float) -> None:
        """Park ``name`` on the clock for ``seconds``, or until its kick (new work in
        this process) fires or a drain starts (the heartbeat goes on), whichever comes
        first."""
        if name in self._pending:  # kicked while it ran: what it was kicked for may be new
            self._pending.discard(name)
            return
        self._parked[name] = self.clock.monotonic() + seconds
        self._notify()
        kick = self._kicks.get(self._kickable.get(name, ""))
        try:
            async with anyio.create_task_group() as tg:
                if kick is not None:
                    tg.start_soon(self._cancel_on, kick, tg.cancel_scope)
                if name != "heartbeat":
                    tg.start_soon(self._cancel_on, self._wake, tg.cancel_scope)
                # awaited in this task so the clock registers the sleeper before any
                # other task runs (a fake clock must see it before the next advance)
                await self.clock.sleep(seconds)
                tg.cancel_scope.cancel()
        finally:
            self._parked.pop(name, None)

    @staticmethod
    async def _cancel_on(event: anyio.Event, scope: anyio.CancelScope) -> None:
        await event.wait()
        scope.cancel()

    def _kick(self, kind: str) -> None:
        """Wake the loops waiting for ``kind`` ("tick", "work" or "deliver") now."""
        for name, wanted in self._kickable.items():
            # no longer idle, even before it runs; kicked while it runs: it goes on at once
            if wanted == kind and self._parked.pop(name, None) is None:
                self._pending.add(name)
        self._kicks[kind].set()
        self._kicks[kind] = anyio.Event()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    async def wait_idle(self, *, but_workers: bool = False) -> SupervisorStatistics:
        """Wait until every loop is parked on the clock with a wake-up still ahead
        (meaningful with a :class:`FakeClock`: nothing more happens until it moves).
        ``but_workers``: every loop but the workers, for a test whose worker is inside
        a long run (it then waits for the run's own sleepers on the clock)."""
        while not self._idle(but_workers):
            await self._changed.wait()
        return self.statistics()

    def _idle(self, but_workers: bool = False) -> bool:
        now = self.clock.monotonic()
        return bool(self._loops) and all(
            name in self._parked and self._parked[name] > now for name in self._active
            if not (but_workers and name.startswith("worker-")))

    async def wait_until(self, predicate: Callable[[SupervisorStatistics], bool]) -> SupervisorStatistics:
        """Wait until ``predicate(statistics)`` holds."""
        while not predicate(self.statistics()):
            await self._changed.wait()
        return self.statistics()

    @property
    def stats(self) -> SupervisorStatistics:
        """A snapshot of the counters (:meth:`statistics`), e.g.
        ``supervisor.stats.completed`` or ``supervisor.stats.task_outcomes``."""
        return self.statistics()

    def statistics(self) -> SupervisorStatistics:
        """A snapshot of the counters."""
        cumulative, seen = [], 0
        for bound in TICK_BUCKETS:
            seen += self._tick_buckets[bound]
            cumulative.append((bound, seen))
        return SupervisorStatistics(self._ticks, self._admitted, self._polls, self._fires,
                                    dict(self._outcomes),
                                    self._deliveries, self._uncertain, self._offset,
                                    frozenset(self._dead), dict(self._restarts),
                                    dict(self._decisions), dict(self._polls_by),
                                    tuple(cumulative), self._tick_sum,
                                    sum(w.takeovers for w in self._workers),
                                    dict(self._delivery_outcomes), self._wake_state(),
                                    self._planned, dict(self._lock_stalls), dict(self._stalled))

    # ---------------------------------------------------------------- steps

    async def _tick_step(self) -> bool:
        if await self._clock_uncertain():
            return False
        started, now = self.clock.monotonic(), self.clock.now()
        report = await tick(self.db, self.clock, self.registry, actor=self.config.supervisor_id,
                            batch_size=self.config.batch_size, execute_runs=False, now=now,
                            lanes=self.config.admission_lanes)
        took = self.clock.monotonic() - started
        self._tick_sum += took
        self._tick_buckets[next(b for b in TICK_BUCKETS if took <= b)] += 1
        self._decisions.update(report.decisions)
        self._ticks += 1
        self._planned += report.planned
        self._admitted += report.admitted
        if report.admitted:
            self._kick("work")
        for unit in report.runs:
            self._start_run(unit)
        if report.idle_until is not NOT_READ:  # nothing was due: the tick read when next
            return self._seconds_until(now, report.idle_until)  # type: ignore[arg-type]
        return await self._until_due(now, "next_due")

    async def _until_due(self, now: datetime, query: str) -> bool | float:
        """Seconds from the clock's present until the earliest ``next_due_at`` that
        ``query`` reads, when that lies after ``now`` (the step's own instant); else
        ``False`` (nothing scheduled, or due work this supervisor left: another replica
        holds it, or it has no resolver for it), so the loop waits its interval."""
        return self._seconds_until(now, await self.db.fetchval(query))

    def _seconds_until(self, now: datetime, due: datetime | None) -> bool | float:
        if due is None or due <= now:
            return False
        return (due - self.clock.now()).total_seconds()

    async def _poll_step(self) -> bool:
        """Poll the due conditions; busy (poll again at once) while a full batch came."""
        if await self._clock_uncertain():
            return False
        report = await poll_once(self.db, self.clock, self.sources,
                                 actor=self.config.supervisor_id, limit=self.config.poll_batch,
                                 registry=self.registry)
        self._polls += len(report.events)
        self._polls_by.update((e.verdict or "none", e.action) for e in report.events)
        fired = sum(1 for event in report.events if event.task_id is not None)
        self._fires += fired
        self._admitted += fired
        if fired:
            self._kick("work")
        return report.claimed >= self.config.poll_batch

    def _start_run(self, unit: RunUnit) -> None:
        """Run a claimed ``run`` callable in the background; a drain waits for it and
        its interruption cancels it (recorded ``failed`` with the reason)."""
        assert self._background is not None
        scope = anyio.CancelScope()
        self._run_scopes.add(scope)  # now, so a drain that starts before it does waits
        if self._interrupt_reason is not None:
            scope.cancel()
        self._background.start_soon(self._execute_run, unit, scope)

    async def _execute_run(self, unit: RunUnit, scope: anyio.CancelScope) -> None:
        try:
            with scope:
                await execute_run(self.db, self.clock, self.registry, unit)
            if scope.cancelled_caught:
                await self.db.execute("occurrence_run_finished", unit.tenant_id,
                                      unit.definition_id, unit.binding_id, unit.slot, "failed",
                                      self.clock.now(), f"interrupted: {self._interrupt_reason}")
        except WatchkeeperError as exc:
            log.warning("run %s %s: could not record its interruption: %s", unit.definition_id,
                        unit.slot, exc)
        finally:
            self._run_scopes.discard(scope)
            self._check_drained()

    def _worker_step(self, worker: Worker) -> Callable[[], Awaitable[bool]]:
        async def step() -> bool:
            if await self._clock_uncertain():
                return False
            outcome = await worker.run_once()
            if outcome is None:
                return False
            self._outcomes[outcome.status] += 1
            if self._shutdown is not Shutdown.RUNNING:  # in flight when the drain began
                self._drain_outcomes.append(outcome)
            if outcome.status == "completed":
                self._kick("deliver")
            if outcome.status != "pending":
                self._kick("work")  # a held task may have been released
            return True
        return step

    def _dispatch_step(self, dispatcher: Dispatcher) -> Callable[[], Awaitable[bool]]:
        async def step() -> bool:
            if await self._clock_uncertain():  # delivery leases and due times too
                return False
            stats = await dispatcher.dispatch_once()
            self._deliveries += stats.delivered
            self._released_deliveries += stats.released
            for kind in ("delivered", "retrying", "dead", "suppressed", "deferred"):
                if getattr(stats, kind):
                    self._delivery_outcomes[kind] += getattr(stats, kind)
            return stats.claimed > 0
        return step

    async def _listen_step(self) -> bool:
        """Hold the listening connection: kick the tick and poll loops when a definition
        became due sooner, the workers on new tasks, the outbox on new deliveries (other
        supervisors' work included); each later step probes it. A lost connection fails
        the step like any loop's (restarted with backoff); meanwhile the loops wake on
        their due instants and periods alone."""
        if self._listener is None:
            stack = contextlib.AsyncExitStack()
            try:
                probe = await stack.enter_async_context(
                    self.db.listening(("due", "work", "deliver"), self._on_notice))
            except BaseException:
                await stack.aclose()
                raise
            self._listener, self._listener_stack = probe, stack
            log.info("listening for wake-up notices (LISTEN/NOTIFY)")
            self._kick("tick")  # anything that became due while not listening
            self._kick("work")
            self._kick("deliver")
            return False
        try:
            await self._listener()
        except BaseException:
            await self._close_listener()
            raise
        return False

    async def _close_listener(self) -> None:
        stack, self._listener, self._listener_stack = self._listener_stack, None, None
        if stack is not None:
            with anyio.CancelScope(shield=True):
                await stack.aclose()

    def _on_notice(self, channel: str) -> None:
        self._kick({"due": "tick", "work": "work", "deliver": "deliver"}.get(channel, "tick"))

    def _wake_state(self) -> str:
        if self._wake_reason is not None:
            return f"polling every {self.config.tick_seconds:g} s: {self._wake_reason}"
        return "notify" if self._listener is not None else "connecting"

    async def _heartbeat_step(self) -> bool:
        if not self._dead:
            await self._heartbeat_once(
                "draining" if self._shutdown is not Shutdown.RUNNING
                else "clock_uncertain" if self._uncertain else "running")
            for gone in await mark_lost(self.db, self.clock.now()):
                log.warning("supervisor %s (%s, pid %d) is lost: no heartbeat since %s (it "
                            "was %s) and no stop recorded; its leases expire and are taken "
                            "over", gone.supervisor_id, gone.hostname, gone.pid,
                            gone.heartbeat_at.isoformat(), gone.was)
        return False

    async def _heartbeat_once(self, status: str) -> None:
        cfg = self.config
        await self.db.execute("supervisor_upsert", cfg.supervisor_id, socket.gethostname(),
                              os.getpid(), self.clock.now(), status,
                              None if self._offset is None else self._offset * 1000,
                              self._detail())

    def _detail(self) -> dict[str, Any]:
        """The heartbeat's detail: loops, restarts, interval, and what this supervisor
        offers (the agents its workers have, none without workers; the sources its
        poller reads), read by :mod:`._fleet`."""
        return heartbeat_detail(
            loops=self._loops, restarts=self._restarts,
            heartbeat_seconds=self.config.heartbeat_seconds,
            agents=self.agents.names() if self.config.workers > 0 else [],
            sources=list(self.sources.names()))

    async def _sample_step(self) -> bool:
        """Sample the authority's clock and re-anchor; a failed sample is kept as the
        reason the clock may become uncertain (the anchor keeps running on the
        monotonic clock meanwhile)."""
        assert isinstance(self.clock, AnchoredClock) and self.authority is not None
        try:
            await self.clock.resample(self.authority)
            self._sample_error = None
        except Exception as exc:  # noqa: BLE001 - any failure means: no offset measurable
            self._sample_error = str(exc) or type(exc).__name__
            log.warning("could not read the authority's clock: %s", self._sample_error)
        await self._clock_uncertain()
        return False

    async def _clock_uncertain(self) -> bool:
        """Check the host's offset to the anchored time (no round trip) and the age of
        the last sample; record the change into or out of ``clock_uncertain``.

        Returns: whether the clock is uncertain now (dispatch nothing new)."""
        if not isinstance(self.clock, AnchoredClock):
            return False
        budget, age = self.config.skew_budget, self.clock.sample_age()
        limit = 3 * self.config.skew_check_seconds
        offset = self.clock.host_offset() if age is not None else None
        self._offset = offset
        if age is None or age > limit:
            since = "never" if age is None else f"for {age:.1f} s"
            why = (f"no offset measurable: PostgreSQL's clock not sampled {since} "
                   f"(last error: {self._sample_error or 'none'})")
        elif budget is not None and offset is not None and abs(offset) > budget:
            why = (f"offset {offset:+.3f} s of this host's wall clock exceeds the clock-skew "
                   f"budget of {budget} s")
        else:
            why = ""
        # decide the transition before any await: every loop calls this concurrently
        was, self._uncertain, self._uncertain_why = self._uncertain, bool(why), why
        if why and not was:
            log.error("clock uncertain: %s; dispatching nothing new until it is back", why)
            now = self.clock.now()
            try:
                await self.db.execute(
                    "event_insert", "_operator", "*", self.config.supervisor_id, None,
                    "clock_uncertain", None, None, now, now, 0, why, now,
                    self.config.supervisor_id)
            except BaseException:
                self._uncertain = was  # not recorded: the next check records it again
                raise
            await self._heartbeat_once("clock_uncertain")
        elif was and not why:
            log.warning("clock back within budget (offset %.3f s); dispatch resumes", offset)
            self._kick("tick")
            self._kick("work")
        return self._uncertain
