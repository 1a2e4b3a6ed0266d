"""Webhook endpoints and their signing secrets: the operator's side of the outbox
(Standard Webhooks secrets, ``whsec_`` + base64; rotation with an overlap)."""

from __future__ import annotations

import base64
import os
import secrets as random_secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pydantic

from watchkeeper.triggers import SpecError, check_endpoint_name

from .._errors import Conflict, NotFound
from ..engine._clock import Clock
from ..store._db import Connection, Database
from ..store._sealing import Keyring, SealedSecret, parse_keys, write_key_file

__all__ = [
    "RotatedKey",
    "add_endpoint",
    "check_secret",
    "list_endpoints",
    "new_secret",
    "remove_endpoint",
    "rotate_secret",
    "rotate_secret_key",
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
    """Add a tenant's webhook endpoint; return its first secret (shown once; stored
    sealed under the database handle's keyring).

    Raises:
        ConfigError: the handle holds no keyring.
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
        await _store_secret(tx, db, tenant_id, name, secret, now)
    return secret


async def _store_secret(tx: Connection, db: Database, tenant_id: str, name: str, secret: str,
                        now: datetime) -> None:
    """Insert ``secret`` sealed under the database handle's keyring (never in clear)."""
    box = db.sealing_keyring().seal(secret, tenant_id, name)
    await tx.execute("webhook_secret_insert", tenant_id, name, box.sealed, box.data_key,
                     box.key_id, now)


async def rotate_secret(db: Database, clock: Clock, tenant_id: str, name: str, *,
                        overlap: timedelta = timedelta(hours=24)) -> str:
    """Add a new secret (stored sealed); the current ones keep signing for ``overlap``,
    then expire.

    Raises:
        ConfigError: the handle holds no keyring.
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
        await _store_secret(tx, db, tenant_id, name, secret, now)
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


@dataclass(frozen=True, slots=True)
class RotatedKey:
    """What :func:`rotate_secret_key` did.

    Attributes:
        secrets: how many sealed secrets were re-wrapped.
        old_key_id, new_key_id: the keys' public ids.
        key: the new key, to be shown once when it lives in ``WATCHKEEPER_SECRET_KEY``
            (``None`` when it was written to the key file ``path``).
    """

    secrets: int
    old_key_id: str
    new_key_id: str
    key: str | None
    path: Path | None


async def rotate_secret_key(db: Database) -> RotatedKey:
    """Re-seal every webhook secret under a new key: each secret's data key is unwrapped
    with the current key and wrapped under the new one, in one transaction (the sealed
    secrets themselves do not change). When the current key came from the key file, the
    new key replaces it there (written first beside it as ``secret.key.new``, renamed
    over it once the transaction committed); when it came from ``WATCHKEEPER_SECRET_KEY``
    the new key is returned, to be set there.

    Raises:
        ConfigError: the handle holds no keyring, or a stored secret does not open with it.
        DatabaseUnavailable: the store failed (nothing changed; a ``secret.key.new``
            left beside the key file is removed).
    """
    old = db.sealing_keyring()
    text = Keyring.generate()
    new = Keyring(parse_keys(text, "the new key"), source=old.source, path=old.path)
    staged = None if old.path is None else old.path.with_name(old.path.name + ".staged")
    if staged is not None:
        write_key_file(staged, text)
    try:
        async with db.transaction() as tx:
            rows = await tx.fetch("webhook_secrets_sealed_locked")
            for r in rows:
                box = old.rewrap(SealedSecret(bytes(r["sealed"]), bytes(r["data_key"]), r["key_id"]),
                                 r["tenant_id"], r["endpoint"], new)
                await tx.execute("webhook_secret_rewrap", r["tenant_id"], r["endpoint"],
                                 r["secret_id"], box.data_key, box.key_id)
    except BaseException:
        if staged is not None:
            staged.unlink(missing_ok=True)
        raise
    if staged is not None and old.path is not None:
        os.replace(staged, old.path)
    db.keyring = new
    return RotatedKey(len(rows), old.current_id, new.current_id,
                      None if old.path is not None else text, old.path)
