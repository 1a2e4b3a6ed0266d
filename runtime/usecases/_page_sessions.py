"""Server-side sessions of the history page.

Signing in on the page opens a session: a random id (``wkpage_`` and 43 URL-safe
characters, 256 bits) that the browser keeps in its cookie and that is shown nowhere
else; only its SHA-256 is stored (``page_sessions``). The id is not a credential of the
API (a Bearer of it is 401), so a stolen cookie opens the page alone, until the
session ends. A session ends:

* at its ``expires_at`` (:data:`SESSION_SECONDS` after sign-in by default);
* at sign-out (:func:`close_page_session`);
* when the operator key that signed in is revoked, or the user's token is replaced
  (``revoke_key``, ``add_user(rotate=True)``: the same statement revokes the
  sessions, and :func:`page_session_principal` also checks the credential is still the
  one that signed in).
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from ..engine._clock import Clock
from ..store._db import Database
from ._keys import OperatorPrincipal, Principal
from ._principals import UserPrincipal

__all__ = ["SESSION_SECONDS", "PageSession", "close_page_session", "open_page_session",
           "page_session_principal"]

SESSION_SECONDS = 12 * 3600
"""How long a page session lasts after sign-in, seconds (12 h)."""

_PREFIX = "wkpage_"


@dataclass(frozen=True, slots=True)
class PageSession:
    """A session just opened.

    Attributes:
        session_id: the cookie's value, given this once (only its digest is stored).
        expires_at: when it ends at the latest (UTC).
    """

    session_id: str
    principal: Principal
    expires_at: datetime


def _digest(session_id: str) -> bytes:
    return hashlib.sha256(session_id.encode()).digest()


async def open_page_session(db: Database, clock: Clock, principal: Principal, credential: str,
                            *, seconds: float = SESSION_SECONDS) -> PageSession:
    """Open a session for ``principal``, who just authenticated with ``credential``
    (a user's own token, or an operator key), for ``seconds`` (> 0); sessions already
    expired are deleted on the way.

    Raises:
        ValueError: ``principal`` is not a user acting with their own token or an
            operator key (the page signs in nobody else), or ``seconds`` is not > 0.
        DatabaseUnavailable: the store failed.
    """
    if not seconds > 0:
        raise ValueError(f"a session of {seconds} s: give seconds > 0")
    now = clock.now()
    expires_at = now + timedelta(seconds=seconds)
    session_id = _PREFIX + secrets.token_urlsafe(32)
    if isinstance(principal, UserPrincipal) and principal.via is None:
        row = ("user", principal.tenant_id, principal.user_id,
               hashlib.sha256(credential.encode()).digest(), None)
    elif isinstance(principal, OperatorPrincipal):
        row = ("operator", principal.tenant_id, None, None, principal.key_id)
    else:
        raise ValueError(f"{principal.label} does not sign in on the page")
    async with db.transaction() as tx:
        await tx.execute("page_sessions_prune", now)
        await tx.execute("page_session_insert", _digest(session_id), *row, now, expires_at)
    return PageSession(session_id, principal, expires_at)


async def page_session_principal(db: Database, clock: Clock, session_id: str) -> Principal | None:
    """Who the session ``session_id`` (a cookie's value) is, at the clock's now; ``None``
    when there is no such session, or it expired, was closed, or its credential was
    revoked or replaced.

    Raises:
        DatabaseUnavailable: the store failed.
    """
    if not session_id.startswith(_PREFIX) or len(session_id) > 100:
        return None
    row = await db.fetchrow("page_session_use", _digest(session_id), clock.now())
    if row is None:
        return None
    if row["kind"] == "user":
        return UserPrincipal(row["tenant_id"], row["user_id"])
    return OperatorPrincipal(row["tenant_id"], row["key_id"])


async def close_page_session(db: Database, clock: Clock, session_id: str) -> bool:
    """End the session ``session_id`` (sign-out); whether there was one still open.

    Raises:
        DatabaseUnavailable: the store failed.
    """
    if not session_id.startswith(_PREFIX) or len(session_id) > 100:
        return False
    return await db.fetchval("page_session_revoke", _digest(session_id), clock.now(),
                             "signed out") is not None
