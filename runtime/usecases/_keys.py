"""API keys and bearer authentication: agent, app, operator keys and the tick secret.

DESIGN "Who may do what": an *agent* key proposes and reads in its tenant; a *user*
token (``users add``) confirms and controls its own definitions; an *app* key is a
trusted backend of one tenant that acts for a user it authenticated itself
(``On-Behalf-Of``); an *operator* key may do everything in its tenant; the *tick*
secret drives one tick and nothing else.

A key is shown once, as ``wk_<kind>_<key_id>_<secret>``; only the SHA-256 of the secret
is stored. A request is authenticated by looking the key up by its public ``key_id``
and comparing digests with :func:`hmac.compare_digest` (constant time); an unknown
``key_id`` is compared against a dummy digest so it takes as long as a known one.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from watchkeeper.triggers import SpecError, check_identifier

from .._errors import AuthError, NotFound
from ..engine._clock import Clock
from ..store._db import Database
from ._principals import UserPrincipal, authenticate

__all__ = ["AgentPrincipal", "ApiKey", "KeyKind", "NewKey", "OperatorPrincipal", "Principal",
           "TickPrincipal", "authenticate_bearer", "create_key", "list_keys", "revoke_key"]


class KeyKind(StrEnum):
    """What a key may act as."""

    AGENT = "agent"
    APP = "app"
    OPERATOR = "operator"
    TICK = "tick"


@dataclass(frozen=True, slots=True)
class AgentPrincipal:
    """A chat agent of one tenant: may propose for an owner user of that tenant and
    read the tenant's definitions, history, reports and timelines; never confirm,
    resume, trigger, cancel, raise a limit or change a delivery (seed 004)."""

    tenant_id: str
    key_id: str

    @property
    def label(self) -> str:
        """``agent:<tenant>/<key_id>`` (recorded as ``proposed_by``)."""
        return f"agent:{self.tenant_id}/{self.key_id}"


@dataclass(frozen=True, slots=True)
class OperatorPrincipal:
    """The operator of one tenant (an operator key): everything in that tenant."""

    tenant_id: str
    key_id: str

    @property
    def label(self) -> str:
        """``operator:<tenant>/<key_id>``."""
        return f"operator:{self.tenant_id}/{self.key_id}"


@dataclass(frozen=True, slots=True)
class TickPrincipal:
    """The tick secret: may drive one tick, nothing else."""

    key_id: str

    @property
    def label(self) -> str:
        """``tick:<key_id>``."""
        return f"tick:{self.key_id}"


Principal = AgentPrincipal | UserPrincipal | OperatorPrincipal | TickPrincipal
"""Who an authenticated request acts as. An app key authenticates as the
:class:`UserPrincipal` it vouches for, with ``via`` naming the key."""


@dataclass(frozen=True, slots=True)
class ApiKey:
    """A stored key, never its secret."""

    key_id: str
    kind: KeyKind
    tenant_id: str | None
    name: str
    created_at: datetime
    created_by: str
    revoked_at: datetime | None
    last_used_at: datetime | None

    @classmethod
    def of(cls, row: Any) -> ApiKey:
        """From an ``api_keys`` row."""
        return cls(row["key_id"], KeyKind(row["kind"]), row["tenant_id"], row["name"],
                   row["created_at"], row["created_by"], row["revoked_at"], row["last_used_at"])


@dataclass(frozen=True, slots=True)
class NewKey:
    """A key just created: ``token`` is the whole bearer credential, shown this once."""

    key: ApiKey
    token: str


_TOKEN = re.compile(r"wk_(agent|app|operator|tick)_([0-9a-f]{12})_([A-Za-z0-9_-]{43})")  # fullmatch
_DUMMY = hashlib.sha256(b"watchkeeper: no such key").digest()


def _digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode()).digest()


async def create_key(db: Database, clock: Clock, kind: KeyKind | str, *, tenant_id: str | None,
                     name: str, created_by: str = "operator") -> NewKey:
    """Create a key; return it with its token (shown once).

    Raises:
        SpecError: an unknown ``kind``; a tenant given for a tick key or missing for
            another kind; an invalid ``name`` (every problem at once).
        NotFound: ``tenant_id`` names no tenant.
    """
    try:
        kind = KeyKind(kind)
    except ValueError as exc:
        raise SpecError("kind", f"{kind!r} is not a key kind.",
                        f"use one of {', '.join(k.value for k in KeyKind)}.") from exc
    if (kind is KeyKind.TICK) != (tenant_id is None):
        raise SpecError("tenant", "a tick key belongs to no tenant; every other key to one."
                        if kind is KeyKind.TICK else f"an {kind.value} key needs a tenant.",
                        "give a tenant for agent, app and operator keys, none for tick.")
    check_identifier(name, "name")
    now = clock.now()
    key_id, secret = secrets.token_hex(6), secrets.token_urlsafe(32)
    async with db.transaction() as tx:
        if tenant_id is not None and await tx.fetchval("tenant_exists", tenant_id) is None:
            raise NotFound(f"no tenant {tenant_id}; add a user to it first")
        await tx.execute("api_key_insert", key_id, kind.value, tenant_id, name, _digest(secret),
                         now, created_by)
    key = ApiKey(key_id, kind, tenant_id, name, now, created_by, None, None)
    return NewKey(key, f"wk_{kind.value}_{key_id}_{secret}")


async def list_keys(db: Database, tenant_id: str | None = None) -> list[ApiKey]:
    """Keys of one tenant (or all, tick keys first), never their secrets."""
    return [ApiKey.of(r) for r in await db.fetch("api_keys_list", tenant_id)]


async def revoke_key(db: Database, clock: Clock, key_id: str, *,
                     tenant_id: str | None = None) -> None:
    """Revoke a key at once (its next request is 401), and end the page sessions it
    signed in. With ``tenant_id``, only a key of that tenant (an operator key revokes
    its own tenant's keys).

    Raises:
        NotFound: no such unrevoked key (in that tenant).
    """
    if await db.fetchval("api_key_revoke", key_id, tenant_id, clock.now()) is None:
        raise NotFound(f"no active key {key_id}" + (f" in tenant {tenant_id}" if tenant_id else ""))


async def authenticate_bearer(db: Database, clock: Clock, token: str | None, *,
                              on_behalf_of: str | None = None) -> Principal:
    """The principal a bearer credential stands for.

    A user token (``users add``) is that user. An app key must name, in
    ``on_behalf_of``, a user of its tenant (the app authenticated that user itself);
    it then acts as that user, with ``via`` recording the key. ``on_behalf_of`` is
    refused with any other credential.

    Raises:
        AuthError: no credential, an unknown or revoked one, an app key without
            ``on_behalf_of`` or naming a user its tenant does not have, or
            ``on_behalf_of`` sent with a credential that is not an app key.
    """
    if not token:
        raise AuthError("no credential: send Authorization: Bearer <key or user token> (for "
                        "the tick route, the tick secret of 'watchkeeper keys create tick')")
    match = _TOKEN.fullmatch(token)
    if match is None:
        if on_behalf_of is not None:
            raise AuthError("On-Behalf-Of is accepted with an app key only")
        return await authenticate(db, token)
    kind, key_id, secret = KeyKind(match.group(1)), match.group(2), match.group(3)
    row = await db.fetchrow("api_key_get", key_id)
    stored = row["secret_sha256"] if row is not None else _DUMMY
    if not hmac.compare_digest(bytes(stored), _digest(secret)) or row is None \
            or row["kind"] != kind.value:
        raise AuthError("unknown credential")
    if row["revoked_at"] is not None:
        raise AuthError(f"key {key_id} was revoked")
    await db.execute("api_key_used", key_id, clock.now())
    return await _principal(db, kind, key_id, row["tenant_id"], on_behalf_of)


async def _principal(db: Database, kind: KeyKind, key_id: str, tenant_id: str | None,
                     on_behalf_of: str | None) -> Principal:
    if kind is not KeyKind.APP and on_behalf_of is not None:
        raise AuthError("On-Behalf-Of is accepted with an app key only")
    if kind is KeyKind.TICK:
        return TickPrincipal(key_id)
    assert tenant_id is not None
    if kind is KeyKind.AGENT:
        return AgentPrincipal(tenant_id, key_id)
    if kind is KeyKind.OPERATOR:
        return OperatorPrincipal(tenant_id, key_id)
    if not on_behalf_of:
        raise AuthError("an app key acts for a user: send On-Behalf-Of: <user id>")
    if await db.fetchrow("user_get", tenant_id, on_behalf_of) is None:
        raise AuthError(f"tenant {tenant_id} has no user {on_behalf_of!r} (On-Behalf-Of)")
    return UserPrincipal(tenant_id, on_behalf_of, via=f"app key {key_id}")
