"""The dispatcher: claims due deliveries, applies the recipient's preferences, sends
them through their channels, and records every outcome.

Storage is behind :class:`DeliveryStore` (runtime implements it over PostgreSQL with
``FOR UPDATE SKIP LOCKED`` and a lease), so several dispatchers never send one row
concurrently. A failure is retried with exponential backoff and full jitter, honouring
a channel's ``retry_after``, up to ``max_attempts`` and ``max_age``; then the row is
``dead`` (visible, manually redeliverable). A retry resends the committed report
reference under the same delivery id; nothing here can make an agent run again.

:meth:`Dispatcher.interrupt` (a supervisor shutting down) ends the pass in hand at
once and releases its rows rather than holding them until their lease expires: a send
that had started is recorded ``retrying`` (an attempt: it may have reached the
receiver, which dedups by the delivery id) and one that had not is released unsent
(``deferred``, not an attempt), both due again at once for another dispatcher.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

import anyio

from ._channels import Channel, Notice
from ._errors import DeliveryFailed
from ._preferences import NoticeAction, decide_notice
from ._retry import backoff_seconds

__all__ = ["DeliveryStore", "Dispatcher", "DispatchStatistics", "Outcome", "OutcomeKind"]

log = logging.getLogger("watchkeeper.outbox")


class OutcomeKind(enum.StrEnum):
    """What one pass did with one claimed delivery."""

    DELIVERED = "delivered"
    RETRYING = "retrying"
    DEAD = "dead"
    SUPPRESSED = "suppressed"
    DEFERRED = "deferred"


@dataclass(frozen=True, slots=True)
class Outcome:
    """The result of handling one claimed notice.

    Attributes:
        at: when it was decided (UTC).
        next_at: when to try again (``RETRYING``) or wait until (``DEFERRED``).
        detail: the transport response summary, the error, or the reason.
        status_code: the HTTP status, when there was one.
    """

    notice: Notice
    kind: OutcomeKind
    at: datetime
    detail: str
    next_at: datetime | None = None
    status_code: int | None = None


class DeliveryStore(Protocol):
    """Durable delivery rows."""

    async def claim_due(self, now: datetime, limit: int, owner: str,
                        lease_seconds: float) -> Sequence[Notice]:
        """Lease up to ``limit`` due deliveries to ``owner`` (with their recipient's
        preferences and the report's importance)."""
        ...

    async def record(self, owner: str, outcomes: Sequence[Outcome]) -> None:
        """Record ``outcomes`` of rows ``owner`` holds, in one transaction."""
        ...


@dataclass(frozen=True, slots=True)
class DispatchStatistics:
    """What one dispatch pass did."""

    claimed: int = 0
    delivered: int = 0
    retrying: int = 0
    dead: int = 0
    suppressed: int = 0
    deferred: int = 0
    released: int = 0
    """Of the above, rows :meth:`Dispatcher.interrupt` released (as retrying or deferred)."""


class Dispatcher:
    """Sends due deliveries through their channels.

    Args:
        now: the wall clock (aware UTC), injected.
        channels: channel name -> channel.
        owner: this dispatcher's lease owner name.
        max_attempts: attempts before a delivery is dead.
        max_age: a delivery whose next try would come later than this after it was
            created is dead instead.
        base, cap: backoff in seconds (full jitter).
        lease_seconds: how long a claimed row is held before another dispatcher may take it.
        send_timeout: seconds one send may take in all (connect, upload, response); a
            send still running then is abandoned and retried. A send is started only
            if it would end before the claim's lease does, so a row whose lease may be
            taken over is never being sent by two dispatchers at once.
        concurrency: notices sent at once within a pass.

    Raises:
        ValueError: ``send_timeout`` not shorter than ``lease_seconds``, or a limit < 1.
    """

    def __init__(self, store: DeliveryStore, channels: Mapping[str, Channel], *,
                 now: Callable[[], datetime], owner: str, max_attempts: int = 8,
                 max_age: timedelta = timedelta(hours=24), base: float = 2.0, cap: float = 300.0,
                 lease_seconds: float = 60.0, send_timeout: float = 30.0,
                 concurrency: int = 8) -> None:
        if not 0 < send_timeout < lease_seconds:
            raise ValueError(f"send_timeout ({send_timeout} s) must be positive and shorter "
                             f"than lease_seconds ({lease_seconds} s)")
        if max_attempts < 1 or concurrency < 1 or max_age <= timedelta(0):
            raise ValueError("max_attempts, concurrency and max_age must be positive")
        self.store, self.channels, self.now = store, channels, now
        self.owner, self.max_attempts, self.max_age = owner, max_attempts, max_age
        self.base, self.cap, self.lease_seconds = base, cap, lease_seconds
        self.send_timeout, self.concurrency = send_timeout, concurrency
        self._interrupted: str | None = None
        self._pass: anyio.CancelScope | None = None

    @property
    def busy(self) -> bool:
        """Whether a pass is sending notices now."""
        return self._pass is not None

    def interrupt(self, reason: str) -> None:
        """Stop now, for good: end the pass in hand (its rows are recorded and released,
        see the module docstring, with ``reason``) and claim nothing more
        (:meth:`dispatch_once` returns empty statistics). Safe to call at any time and
        more than once (the first reason is kept)."""
        self._interrupted = self._interrupted or reason
        if self._pass is not None:
            self._pass.cancel()

    async def dispatch_once(self, limit: int = 50) -> DispatchStatistics:
        """Claim up to ``limit`` due deliveries, handle them, record the outcomes.

        Raises:
            whatever the store raises: the rows then stay leased and another pass takes
            them over when the lease expires (the receiver dedups by webhook-id).
        """
        if self._interrupted is not None:
            return DispatchStatistics()
        notices = await self.store.claim_due(self.now(), limit, self.owner, self.lease_seconds)
        if not notices:
            return DispatchStatistics()
        outcomes: dict[int, Outcome] = {}
        started: set[int] = set()
        limiter = anyio.CapacityLimiter(self.concurrency)

        async def handle(index: int, notice: Notice) -> None:
            async with limiter:
                started.add(index)
                outcomes[index] = await self._handle(notice)

        with anyio.CancelScope() as self._pass:
            if self._interrupted is not None:  # interrupted while claiming
                self._pass.cancel()
            async with anyio.create_task_group() as tg:
                for index, notice in enumerate(notices):
                    tg.start_soon(handle, index, notice)
        self._pass = None
        released = [self._released(notice, index in started)
                    for index, notice in enumerate(notices) if index not in outcomes]
        done = [*outcomes.values(), *released]
        await self.store.record(self.owner, done)
        count = {kind: sum(1 for o in done if o.kind is kind) for kind in OutcomeKind}
        return DispatchStatistics(len(notices), count[OutcomeKind.DELIVERED],
                                  count[OutcomeKind.RETRYING], count[OutcomeKind.DEAD],
                                  count[OutcomeKind.SUPPRESSED], count[OutcomeKind.DEFERRED],
                                  len(released))

    def _released(self, notice: Notice, sending: bool) -> Outcome:
        """The outcome of a notice whose pass :meth:`interrupt` ended: due again now."""
        now = self.now()
        if sending:
            return Outcome(notice, OutcomeKind.RETRYING, now,
                           f"the send was interrupted ({self._interrupted}); it is sent again "
                           "under the same id", now)
        return Outcome(notice, OutcomeKind.DEFERRED, now,
                       f"released unsent: {self._interrupted}", now)

    async def _handle(self, notice: Notice) -> Outcome:
        decision = decide_notice(notice.preferences, notice.channel, notice.importance, self.now())
        if decision.action is NoticeAction.SUPPRESS:
            return Outcome(notice, OutcomeKind.SUPPRESSED, self.now(), decision.reason)
        if decision.action is NoticeAction.DEFER:
            return Outcome(notice, OutcomeKind.DEFERRED, self.now(), decision.reason,
                           decision.until)
        now = self.now()
        if (notice.lease_expires_at is not None
                and now + timedelta(seconds=self.send_timeout) >= notice.lease_expires_at):
            return Outcome(notice, OutcomeKind.DEFERRED, now,
                           "released unsent: the claim's lease would end before a send could "
                           "finish", now)
        channel = self.channels.get(notice.channel)
        try:
            if channel is None:
                raise DeliveryFailed(f"no channel {notice.channel!r} in this dispatcher",
                                     retryable=False)
            with anyio.fail_after(self.send_timeout):
                response = await channel.send(notice)
        except DeliveryFailed as exc:
            return self._failed(notice, exc)
        except TimeoutError:
            return self._failed(notice, DeliveryFailed(
                f"the send took longer than {self.send_timeout:g} s in all", retryable=True))
        except Exception as exc:  # a channel bug must not stop the pass or the supervisor
            log.exception("delivery %s: channel %s raised", notice.delivery_id, notice.channel)
            return self._failed(notice, DeliveryFailed(
                f"channel error {type(exc).__name__}: {exc}", retryable=True))
        return Outcome(notice, OutcomeKind.DELIVERED, self.now(), response,
                       status_code=_status_of(response))

    def _failed(self, notice: Notice, exc: DeliveryFailed) -> Outcome:
        now = self.now()
        code = exc.status_code
        if not exc.retryable or notice.attempt >= self.max_attempts:
            why = "permanent failure" if not exc.retryable else f"{notice.attempt} attempts"
            log.warning("delivery %s dead (%s): %s", notice.delivery_id, why, exc)
            return Outcome(notice, OutcomeKind.DEAD, now, f"{why}: {exc}", status_code=code)
        delay = backoff_seconds(notice.attempt, base=self.base, cap=self.cap)
        if exc.retry_after is not None:  # a receiver may ask for more, never for years:
            delay = max(delay, min(exc.retry_after, self.max_age.total_seconds() + 1))
        retry_at = now + timedelta(seconds=delay)
        if notice.queued_at is not None and retry_at > notice.queued_at + self.max_age:
            return Outcome(notice, OutcomeKind.DEAD, now,
                           f"older than max_age {self.max_age} at the next try: {exc}",
                           status_code=code)
        return Outcome(notice, OutcomeKind.RETRYING, now, str(exc), retry_at, code)


def _status_of(summary: str) -> int | None:
    head = summary.split(" ", 1)[0]
    return int(head) if head.isdigit() and len(head) == 3 else None
