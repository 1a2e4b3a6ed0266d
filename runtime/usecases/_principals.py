"""Principals: users (with API tokens stored hashed), the operator, and how a door
turns what it was given (a token, or a tenant for the operator) into an actor.

DESIGN "Who may do what": a definition belongs to a real owner user; there is no
synthetic actor for user work. Tokens are shown once and stored as SHA-256; a lookup
compares digests inside PostgreSQL's unique index, never the token text.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from typing import Any

from watchkeeper.triggers import (
    SpecError,
    SpecProblems,
    check_identifier,
    check_zone,
    refuse_unstorable,
)

from .._errors import AuthError, Conflict, NotFound
from ..engine._clock import Clock
from ..store._db import Database

__all__ = ["OPERATOR", "REPLAY_TENANT_PREFIX", "Actor", "UserPrincipal", "add_user",
           "authenticate", "check_tenant", "list_users", "resolve_actor"]


@dataclass(frozen=True, slots=True)
class UserPrincipal:
    """An authenticated real user.

    Attributes:
        via: the app key that vouched for the user (an app authenticated the user
            itself and sent ``On-Behalf-Of``), e.g. ``"app key 3f9a1c2b4d5e"``; ``None``
            when the user presented their own token. Part of :attr:`label`, so every
            audit column (who confirmed, paused, cancelled) says through which key.
    """

    tenant_id: str
    user_id: str
    via: str | None = None

    @property
    def label(self) -> str:
        """How the user appears in audit columns: ``user:<tenant>/<user>``, plus
        `` via app key <key_id>`` when an app key acted for them."""
        plain = f"user:{self.tenant_id}/{self.user_id}"
        return plain if self.via is None else f"{plain} via {self.via}"


class _Operator:
    label = "operator"

    def __repr__(self) -> str:
        return "OPERATOR"


OPERATOR = _Operator()
"""The host operator: whoever holds the database credentials (the CLI without a
token). May pause, resume, cancel and trigger; may never confirm a user's revision."""

Actor = UserPrincipal | _Operator


def _token_digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


async def add_user(db: Database, clock: Clock, tenant_id: str, user_id: str, *,
                   display_name: str = "", zone: str = "UTC", rotate: bool = False,
                   replay: bool = False) -> str:
    """Create (or, with ``rotate``, re-key) a user; return their new API token.

    The token is shown once; only its SHA-256 is stored. A new token (``rotate``) ends
    every page session the old one signed in.

    Raises:
        SpecError: every invalid field at once: an invalid id; a zone that
            :func:`~watchkeeper.triggers.check_zone` refuses (not a place: ``CET``,
            ``UTC+1``; a link such as ``US/Eastern`` is accepted and stored under the
            zone it links to, ``America/New_York``); tenant ids may not start with
            ``_`` (except a replay's own ``_replay-`` tenant, with ``replay``); a display
            name PostgreSQL cannot store (a NUL, a lone surrogate from a byte that is not
            UTF-8).
        Conflict: the user exists and ``rotate`` is false.
        NotFound: ``rotate`` for a user that does not exist.
    """
    found = SpecProblems()
    with found.check():
        check_tenant(tenant_id, replay)
    with found.check():
        check_identifier(user_id, "user_id")
    with found.check():
        zone = check_zone(zone, "zone").key  # a link is stored under its target
    with found.check():
        refuse_unstorable(display_name, "display_name")
    found.raise_if_any()
    token = "wk_" + secrets.token_urlsafe(32)
    now = clock.now()
    async with db.transaction() as tx:
        if rotate:
            if await tx.fetchval("user_rotate_token", tenant_id, user_id, _token_digest(token),
                                 now) is None:
                raise NotFound(f"no user {tenant_id}/{user_id}")
            return token
        await tx.execute("tenant_ensure", tenant_id, now)
        inserted = await tx.fetchval("user_insert", tenant_id, user_id, display_name, zone,
                                     _token_digest(token), now)
        if inserted is None:
            raise Conflict(f"user {tenant_id}/{user_id} exists; use --rotate to issue a new token")
    return token


async def authenticate(db: Database, token: str | None) -> UserPrincipal:
    """The user a token belongs to.

    Raises:
        AuthError: no token, or an unknown one.
    """
    if not token:
        raise AuthError("a user token is required (--token or WATCHKEEPER_TOKEN)")
    row = await db.fetchrow("user_by_token", _token_digest(token))
    if row is None:
        raise AuthError("unknown token")
    return UserPrincipal(row["tenant_id"], row["user_id"])


REPLAY_TENANT_PREFIX = "_replay-"
"""Tenants of ``watchkeeper replay``: reserved (``_``), and invisible to live pollers,
workers and dispatchers, which run on the real clock."""


def check_tenant(tenant_id: str, replay: bool = False) -> None:
    """A tenant id a user may live in: an identifier not starting with ``_`` (reserved
    for the operator's ``_operator`` and replays' ``_replay-...``; with ``replay``, a
    ``_replay-`` id is allowed).

    Raises:
        SpecError: naming ``tenant_id``.
    """
    check_identifier(tenant_id.lstrip("_") if replay else tenant_id, "tenant_id")
    if replay and tenant_id.startswith(REPLAY_TENANT_PREFIX):
        return
    if tenant_id.startswith("_"):
        raise SpecError("tenant_id", f"{tenant_id!r} is reserved.", "pick an id not starting with '_'.")


async def list_users(db: Database, tenant_id: str | None = None) -> list[dict[str, Any]]:
    """Users (of one tenant, or all), never their tokens: ``tenant_id``, ``user_id``,
    ``display_name``, ``zone``, ``created_at``."""
    return [dict(r) for r in await db.fetch("users_list", tenant_id)]


async def resolve_actor(db: Database, *, token: str | None, tenant_id: str | None,
                        default_token: str | None = None) -> tuple[Actor, str]:
    """Who is acting, and in which tenant: the user a token belongs to (``token``, or
    ``default_token`` — ``WATCHKEEPER_TOKEN`` — when no tenant is named), else the
    operator of ``tenant_id``.

    Returns:
        ``(actor, tenant_id)``.

    Raises:
        AuthError: an unknown token.
        SpecError: neither a token nor a tenant (field ``--tenant``).
    """
    if token or (default_token and tenant_id is None):
        me = await authenticate(db, token or default_token)
        return me, me.tenant_id
    if tenant_id is None:
        raise SpecError("--tenant", "is required without a token.", "pass --tenant or --token.")
    return OPERATOR, tenant_id
