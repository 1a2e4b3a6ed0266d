"""Webhook endpoints and their signing secrets: the operator's side of the outbox
(Standard Webhooks secrets, ``whsec_`` + base64; rotation with an overlap)."""

from __future__ import annotations

import base64
import secrets as random_secrets
from datetime import datetime, timedelta
from typing import Any

import pydantic

from watchkeeper.triggers import SpecError, check_endpoint_name

from .._errors import Conflict, NotFound
from ..engine._clock import Clock
from ..store._db import Database

__all__ = [
    "add_endpoint",
    "check_secret",
    "list_endpoints",
    "new_secret",
    "remove_endpoint",
    "rotate_secret",
]

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


async def list_endpoints(db: Database, now: datetime,
                         tenant_id: str | None = None) -> list[dict[str, Any]]:
    """A tenant's (or every tenant's) endpoints: ``tenant_id``, ``name``, ``url``,
    ``created_at`` and ``active_secrets`` (secrets signing at ``now``). Never a secret.

    Raises:
        NotFound: ``tenant_id`` names no tenant.
    """
    if tenant_id is not None and await db.fetchval("tenant_exists", tenant_id) is None:
        raise NotFound(f"no tenant {tenant_id}")
    return [dict(r) for r in await db.fetch("webhook_endpoints_list", tenant_id, now)]
