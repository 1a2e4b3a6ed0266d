"""The dispatcher: claims due deliveries, sends them, records each outcome.

Storage is behind :class:`DeliveryStore` (runtime implements it over PostgreSQL with
``FOR UPDATE SKIP LOCKED`` and a lease), so several dispatchers never send one row
concurrently. A failure is retried with exponential backoff and full jitter up to
``max_attempts``, honouring a channel's ``retry_after``; then the row is ``dead``
(visible, manually redeliverable). A retry resends the committed report reference;
nothing here can make an agent run again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from ._channels import Channel, Notice
from ._errors import DeliveryFailed
from ._retry import backoff_seconds

__all__ = ["DeliveryStore", "Dispatcher", "DispatchStatistics"]

log = logging.getLogger("watchkeeper.outbox")


class DeliveryStore(Protocol):
    """Durable delivery rows."""

    async def claim_due(self, now: datetime, limit: int, owner: str,
                        lease_seconds: float) -> Sequence[Notice]:
        """Lease up to ``limit`` due deliveries to ``owner``."""
        ...

    async def delivered(self, notice: Notice, owner: str, now: datetime, response: str) -> None:
        """Record success, if ``owner`` still holds the row."""
        ...

    async def failed(self, notice: Notice, owner: str, now: datetime, error: str,
                     retry_at: datetime | None) -> None:
        """Record a failed attempt (``retry_at`` None means dead), if ``owner`` holds it."""
        ...


@dataclass(frozen=True, slots=True)
class DispatchStatistics:
    """What one dispatch pass did."""

    claimed: int = 0
    delivered: int = 0
    retrying: int = 0
    dead: int = 0


class Dispatcher:
    """Sends due deliveries through their channels.

    Args:
        now: the wall clock (aware UTC), injected.
        channels: channel name -> channel.
        max_attempts: attempts before a delivery is dead.
        base, cap: backoff in seconds (full jitter).
    """

    def __init__(self, store: DeliveryStore, channels: Mapping[str, Channel], *,
                 now: Callable[[], datetime], owner: str, max_attempts: int = 8,
                 base: float = 2.0, cap: float = 300.0, lease_seconds: float = 60.0) -> None:
        self.store, self.channels, self.now = store, channels, now
        self.owner, self.max_attempts = owner, max_attempts
        self.base, self.cap, self.lease_seconds = base, cap, lease_seconds

    async def dispatch_once(self, limit: int = 50) -> DispatchStatistics:
        """Claim and attempt up to ``limit`` due deliveries."""
        notices = await self.store.claim_due(self.now(), limit, self.owner, self.lease_seconds)
        delivered = retrying = dead = 0
        for notice in notices:
            outcome = await self._attempt(notice)
            delivered += outcome == "delivered"
            retrying += outcome == "retrying"
            dead += outcome == "dead"
        return DispatchStatistics(len(notices), delivered, retrying, dead)

    async def _attempt(self, notice: Notice) -> str:
        channel = self.channels.get(notice.channel)
        try:
            if channel is None:
                raise DeliveryFailed(f"no channel {notice.channel!r}", retryable=False)
            response = await channel.send(notice)
        except DeliveryFailed as exc:
            return await self._failed(notice, exc)
        await self.store.delivered(notice, self.owner, self.now(), response)
        return "delivered"

    async def _failed(self, notice: Notice, exc: DeliveryFailed) -> str:
        now = self.now()
        if not exc.retryable or notice.attempt >= self.max_attempts:
            log.warning("delivery %s dead after %d attempt(s): %s", notice.delivery_id,
                        notice.attempt, exc)
            await self.store.failed(notice, self.owner, now, str(exc), None)
            return "dead"
        delay = backoff_seconds(notice.attempt, base=self.base, cap=self.cap)
        if exc.retry_after is not None:
            delay = max(delay, exc.retry_after)
        await self.store.failed(notice, self.owner, now, str(exc), now + timedelta(seconds=delay))
        return "retrying"
