"""Webhook endpoints and their signing secrets, notification preferences, and manual
redelivery: the operator's and the user's side of the outbox."""

from __future__ import annotations

import base64
import re
import secrets as random_secrets
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import time, timedelta
from typing import Any

import pydantic
from watchkeeper.triggers import Importance, SpecError, check_endpoint_name

from .._errors import Conflict, NotFound
from ..engine._clock import Clock
from ..store._db import Database

__all__ = [
    "PreferencesInput",
    "add_endpoint",
    "check_secret",
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


MAX_OVERLAP = timedelta(days=30)


def check_secret(secret: str) -> str:
    """Return ``secret`` if it is a Standard Webhooks secret (``whsec_`` + base64 of
    24 to 64 bytes).

    Raises:
        SpecError: naming ``--secret``.
    """
    fix = "copy the secret printed by 'watchkeeper webhooks add' or 'rotate' (whsec_...)."
    if not secret.startswith("whsec_"):
        raise SpecError("--secret", "does not start with 'whsec_'.", fix)
    try:
        key = base64.b64decode(secret.removeprefix("whsec_"), validate=True)
    except ValueError as exc:
        raise SpecError("--secret", "is not base64 after 'whsec_'.", fix) from exc
    if not 24 <= len(key) <= 64:
        raise SpecError("--secret", f"holds {len(key)} bytes, not 24 to 64.", fix)
    return secret


def _check_url(url: str) -> str:
    """The URL, normalised (lower-case scheme and host); pydantic's ``HttpUrl`` rules.

    Raises:
        SpecError: naming ``url``.
    """
    fix = "give an http(s) URL, e.g. https://example.com/hook"
    try:
        parsed = _HTTP_URL.validate_python(url)
    except pydantic.ValidationError as exc:
        problem = exc.errors()[0]["msg"]
        raise SpecError("url", f"{url!r} is not an http(s) URL ({problem}).", fix) from exc
    if parsed.host is None or " " in url:
        raise SpecError("url", f"{url!r} is not an http(s) URL.", fix)
    return str(parsed)


_HTTP_URL = pydantic.TypeAdapter(pydantic.HttpUrl)


async def add_endpoint(db: Database, clock: Clock, tenant_id: str, name: str, url: str) -> str:
    """Add a tenant's webhook endpoint; return its first secret (shown once).

    Raises:
        SpecError: bad name or URL.
        NotFound: no such tenant.
        Conflict: the name exists (use rotate to change its secret).
    """
    check_endpoint_name(name, "name")
    url = _check_url(url)
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
        SpecError: a negative ``overlap`` (``--overlap``).
        NotFound: no such endpoint.
    """
    if not timedelta(0) <= overlap <= MAX_OVERLAP:
        raise SpecError("--overlap", f"{overlap.total_seconds() / 3600:g} h is outside 0 to "
                        f"{MAX_OVERLAP.days * 24} h.",
                        "give 0 to stop signing with the old secrets now, or hours, e.g. 24.")
    now, secret = clock.now(), new_secret()
    async with db.transaction() as tx:
        if await tx.fetchrow("webhook_endpoint_get", tenant_id, name, now) is None:
            raise NotFound(f"tenant {tenant_id} has no webhook endpoint {name!r}")
        await tx.execute("webhook_secrets_expire", tenant_id, name, now + overlap)
        await tx.execute("webhook_secret_insert", tenant_id, name, secret, now)
    return secret


async def remove_endpoint(db: Database, tenant_id: str, name: str, *, force: bool = False) -> None:
    """Remove an endpoint and its secrets; its pending deliveries will go dead.

    Raises:
        NotFound: no such endpoint.
        Conflict: an active or paused definition still delivers to it (unless ``force``).
    """
    async with db.transaction() as tx:
        users = await tx.fetch("webhook_endpoint_users", tenant_id, name)
        if users and not force:
            names = ", ".join(f"{r['tenant_id']}/{r['definition_id']}" for r in users)
            raise Conflict(f"webhook endpoint {tenant_id}/{name} is used by {names}; change or "
                           "cancel them first, or remove it anyway with --force (their notices "
                           "will go dead)")
        if await tx.fetchval("webhook_endpoint_delete", tenant_id, name) is None:
            raise NotFound(f"tenant {tenant_id} has no webhook endpoint {name!r}")


@dataclass(frozen=True, slots=True)
class PreferencesInput:
    """What ``watchkeeper prefs set`` accepts (validated here)."""

    channels: Sequence[str] | None = None
    min_importance: Importance = Importance.LOW
    quiet: tuple[time, time] | None = None


_WALL = re.compile(r"(\d{1,2}):(\d{2})")


def parse_quiet(text: str | None) -> tuple[time, time] | None:
    """``"22:00-07:00"`` -> (22:00, 07:00) (``H:MM`` also accepted); ``None`` or ``""``
    -> no quiet hours. Wall times in the user's zone, without an offset.

    Raises:
        SpecError: naming ``quiet``: not HH:MM-HH:MM, or an empty span.
    """
    if not text:
        return None
    fix = "e.g. --quiet 22:00-07:00 (to mute every notice instead: --channels none)"
    parts = text.split("-")
    walls = [_WALL.fullmatch(part.strip()) for part in parts]
    if len(parts) != 2 or not all(walls):
        raise SpecError("quiet", f"{text!r} is not HH:MM-HH:MM in the user's zone.", fix)
    try:
        start, end = (time(int(m.group(1)), int(m.group(2))) for m in walls if m)
    except ValueError as exc:
        raise SpecError("quiet", f"{text!r}: {exc} (hours 0-23, minutes 0-59).", fix) from exc
    if start == end:
        raise SpecError("quiet", f"{text!r} starts and ends at the same time.", fix)
    return start, end


async def set_preferences(db: Database, clock: Clock, tenant_id: str, user_id: str,
                          prefs: PreferencesInput) -> None:
    """Store a user's notification preferences (read at each delivery), replacing the
    previous ones; notices held back by the old quiet hours are re-evaluated at once.

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
    now = clock.now()
    async with db.transaction() as tx:
        await tx.execute("preferences_upsert", tenant_id, user_id,
                         None if prefs.channels is None else list(prefs.channels),
                         prefs.min_importance.value, start, end, now)
        await tx.execute("deliveries_release_deferred", tenant_id, user_id, now)


async def get_preferences(db: Database, tenant_id: str, user_id: str) -> dict[str, Any] | None:
    """A user's stored preferences, or ``None`` if they set none.

    Raises:
        NotFound: no such user.
    """
    if await db.fetchrow("user_get", tenant_id, user_id) is None:
        raise NotFound(f"no user {tenant_id}/{user_id}")
    row = await db.fetchrow("preferences_get", tenant_id, user_id)
    return None if row is None else dict(row)


async def redeliver(db: Database, clock: Clock, tenant_id: str, delivery_id: str,
                    actor: str) -> None:
    """Re-queue a dead, delivered or suppressed delivery under the same delivery id.

    Raises:
        SpecError: ``delivery_id`` is not a UUID.
        NotFound: no such delivery.
        Conflict: it is still pending, retrying or being delivered.
    """
    try:
        delivery_id = str(uuid.UUID(delivery_id))
    except ValueError as exc:
        raise SpecError("delivery_id", f"{delivery_id!r} is not a delivery id.",
                        "copy the id from 'watchkeeper deliveries'.") from exc
    now = clock.now()
    if await db.fetchval("delivery_redeliver", tenant_id, delivery_id, now,
                         f"redelivery requested by {actor}") is not None:
        return
    row = await db.fetchrow("delivery_get", tenant_id, delivery_id)
    if row is None:
        raise NotFound(f"no delivery {delivery_id} in tenant {tenant_id}")
    raise Conflict(f"delivery {delivery_id} is {row['status']}; only a dead, delivered or "
                   "suppressed delivery can be redelivered")
