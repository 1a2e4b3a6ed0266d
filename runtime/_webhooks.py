"""Webhook endpoints and their signing secrets, notification preferences, and manual
redelivery: the operator's and the user's side of the outbox."""

from __future__ import annotations

import base64
import secrets as random_secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import time, timedelta
from typing import Any

import httpx

from triggers import Importance, SpecError, check_identifier

from ._clock import Clock
from ._db import Database
from ._errors import Conflict, NotFound

__all__ = [
    "PreferencesInput",
    "add_endpoint",
    "get_preferences",
    "new_secret",
    "parse_quiet",
    "redeliver",
    "remove_endpoint",
    "rotate_secret",
    "set_preferences",
]

CHANNELS = frozenset({"log", "file", "webhook"})


def new_secret() -> str:
    """A fresh Standard Webhooks secret: ``whsec_`` + base64 of 32 random bytes."""
    return "whsec_" + base64.b64encode(random_secrets.token_bytes(32)).decode()


def _check_url(url: str) -> str:
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL as exc:
        raise SpecError("url", f"{url!r} is not a URL ({exc}).", "e.g. https://example.com/hook") from exc
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise SpecError("url", f"{url!r} is not an http(s) URL.", "e.g. https://example.com/hook")
    return url


async def add_endpoint(db: Database, clock: Clock, tenant_id: str, name: str, url: str) -> str:
    """Add a tenant's webhook endpoint; return its first secret (shown once).

    Raises:
        SpecError: bad name or URL.
        NotFound: no such tenant.
        Conflict: the name exists (use rotate to change its secret).
    """
    check_identifier(name, "name")
    _check_url(url)
    now, secret = clock.now(), new_secret()
    async with db.transaction() as tx:
        if await tx.fetchval("tenant_exists", tenant_id) is None:
            raise NotFound(f"no tenant {tenant_id}; add a user to it first")
        if await tx.fetchval("webhook_endpoint_insert", tenant_id, name, url, now) is None:
            raise Conflict(f"tenant {tenant_id} already has a webhook endpoint {name!r}")
        await tx.execute("webhook_secret_insert", tenant_id, name, secret, now)
    return secret


async def rotate_secret(db: Database, clock: Clock, tenant_id: str, name: str, *,
                        overlap: timedelta = timedelta(hours=24)) -> str:
    """Add a new secret; the current ones keep signing for ``overlap``, then expire.

    Raises:
        NotFound: no such endpoint.
    """
    now, secret = clock.now(), new_secret()
    async with db.transaction() as tx:
        if await tx.fetchrow("webhook_endpoint_get", tenant_id, name, now) is None:
            raise NotFound(f"tenant {tenant_id} has no webhook endpoint {name!r}")
        await tx.execute("webhook_secrets_expire", tenant_id, name, now + overlap)
        await tx.execute("webhook_secret_insert", tenant_id, name, secret, now)
    return secret


async def remove_endpoint(db: Database, tenant_id: str, name: str) -> None:
    """Remove an endpoint and its secrets; its pending deliveries will go dead.

    Raises:
        NotFound: no such endpoint.
    """
    if await db.fetchval("webhook_endpoint_delete", tenant_id, name) is None:
        raise NotFound(f"tenant {tenant_id} has no webhook endpoint {name!r}")


@dataclass(frozen=True, slots=True)
class PreferencesInput:
    """What ``watchkeeper prefs set`` accepts (validated here)."""

    channels: Sequence[str] | None = None
    min_importance: Importance = Importance.LOW
    quiet: tuple[time, time] | None = None


def parse_quiet(text: str | None) -> tuple[time, time] | None:
    """``"22:00-07:00"`` -> (22:00, 07:00); ``None`` or ``""`` -> no quiet hours.

    Raises:
        SpecError: not HH:MM-HH:MM, or an empty span.
    """
    if not text:
        return None
    try:
        start_text, end_text = text.split("-")
        start, end = time.fromisoformat(start_text.strip()), time.fromisoformat(end_text.strip())
    except ValueError as exc:
        raise SpecError("quiet", f"{text!r} is not HH:MM-HH:MM.", "e.g. --quiet 22:00-07:00") from exc
    if start == end:
        raise SpecError("quiet", "starts and ends at the same time.", "e.g. --quiet 22:00-07:00")
    return start, end


async def set_preferences(db: Database, clock: Clock, tenant_id: str, user_id: str,
                          prefs: PreferencesInput) -> None:
    """Store a user's notification preferences (read at each delivery).

    Raises:
        SpecError: an unknown channel.
        NotFound: no such user.
    """
    if prefs.channels is not None:
        unknown = sorted(set(prefs.channels) - CHANNELS)
        if unknown:
            raise SpecError("channels", f"unknown channel(s) {unknown}.",
                            f"use some of {sorted(CHANNELS)}.")
    if await db.fetchrow("user_get", tenant_id, user_id) is None:
        raise NotFound(f"no user {tenant_id}/{user_id}")
    start, end = prefs.quiet or (None, None)
    await db.execute("preferences_upsert", tenant_id, user_id,
                     None if prefs.channels is None else list(prefs.channels),
                     prefs.min_importance.value, start, end, clock.now())


async def get_preferences(db: Database, tenant_id: str, user_id: str) -> dict[str, Any] | None:
    """A user's stored preferences, or ``None``."""
    row = await db.fetchrow("preferences_get", tenant_id, user_id)
    return None if row is None else dict(row)


async def redeliver(db: Database, clock: Clock, tenant_id: str, delivery_id: str,
                    actor: str) -> None:
    """Re-queue a dead, delivered or suppressed delivery under the same delivery id.

    Raises:
        NotFound: no such delivery.
        Conflict: it is still pending, retrying or being delivered.
    """
    now = clock.now()
    if await db.fetchval("delivery_redeliver", tenant_id, delivery_id, now,
                         f"redelivery requested by {actor}") is not None:
        return
    row = await db.fetchrow("delivery_get", tenant_id, delivery_id)
    if row is None:
        raise NotFound(f"no delivery {delivery_id} in tenant {tenant_id}")
    raise Conflict(f"delivery {delivery_id} is {row['status']}; only a dead, delivered or "
                   "suppressed delivery can be redelivered")
