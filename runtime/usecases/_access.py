"""Who may do what: one policy for every door (DESIGN "Who may do what").

=========== ============================================================================
principal   may
=========== ============================================================================
agent       propose for an owner user of its tenant; preview; read its tenant's
            definitions, history, reports and poll timelines. Never confirm, resume,
            trigger, cancel, raise a limit or change a delivery ("saying understood
            cannot grant indefinite background execution authority", seed 004).
user        confirm their own proposals (presenting the spec_hash), pause, resume,
            cancel, trigger, review; read their own definitions and history; set their
            own preferences. An app key acts as the user it names (``via`` recorded).
operator    everything in its tenant: users, webhook endpoints, deliveries, keys.
tick        drive one tick.
=========== ============================================================================

Visibility comes before permission: a resource of another tenant — or, for a user,
another user's definition — does not exist for the principal (:class:`NotFound`, HTTP
404), never :class:`Forbidden` and never data. A visible resource the principal may
not act on is :class:`Forbidden` (HTTP 403: an agent key asking to confirm).
"""

from __future__ import annotations

from enum import StrEnum

from .._errors import Forbidden, NotFound
from ._keys import AgentPrincipal, OperatorPrincipal, Principal, TickPrincipal
from ._principals import UserPrincipal

__all__ = ["Capability", "authorize", "principal_kind", "reading_scope", "visible_tenant"]


class Capability(StrEnum):
    """What a request asks to do."""

    PREVIEW = "preview"
    PROPOSE = "propose"
    READ = "read"
    CONFIRM = "confirm"
    CONTROL = "control"        # pause, resume, cancel, trigger, review
    PREFERENCES = "preferences"
    OPERATE = "operate"        # users, webhook endpoints, deliveries, redelivery, keys
    TICK = "tick"


_ALLOWED: dict[Capability, frozenset[str]] = {
    Capability.PREVIEW: frozenset({"agent", "user", "operator"}),
    Capability.PROPOSE: frozenset({"agent", "user", "operator"}),
    Capability.READ: frozenset({"agent", "user", "operator"}),
    Capability.CONFIRM: frozenset({"user"}),
    Capability.CONTROL: frozenset({"user", "operator"}),
    Capability.PREFERENCES: frozenset({"user", "operator"}),
    Capability.OPERATE: frozenset({"operator"}),
    Capability.TICK: frozenset({"tick"}),
}

_WHY = {
    ("agent", Capability.CONFIRM): "an agent key may propose, never confirm: the owner "
                                   "confirms with their own token (or through an app key)",
    ("agent", Capability.CONTROL): "an agent key may not pause, resume, cancel, trigger or "
                                   "review: that is the owner's or the operator's decision",
    ("operator", Capability.CONFIRM): "only the owner confirms a revision (the hash they "
                                      "were shown); an operator key may not",
}


def principal_kind(principal: Principal) -> str:
    """``agent``, ``user``, ``operator`` or ``tick``."""
    if isinstance(principal, AgentPrincipal):
        return "agent"
    if isinstance(principal, UserPrincipal):
        return "user"
    if isinstance(principal, OperatorPrincipal):
        return "operator"
    assert isinstance(principal, TickPrincipal)
    return "tick"


def visible_tenant(principal: Principal) -> str | None:
    """The one tenant whose resources exist for ``principal`` (``None`` for the tick
    secret, which sees none)."""
    return None if isinstance(principal, TickPrincipal) else principal.tenant_id


def authorize(principal: Principal, capability: Capability, *, tenant_id: str | None = None,
              owner_user_id: str | None = None) -> None:
    """Allow ``principal`` to exercise ``capability`` on a resource of ``tenant_id``
    (owned by ``owner_user_id``, when it is a user's), or raise.

    Raises:
        NotFound: the resource is not visible to the principal (another tenant's; for a
            user, another user's).
        Forbidden: it is visible, but the principal may never do this.
    """
    kind = principal_kind(principal)
    if tenant_id is not None and tenant_id != visible_tenant(principal):
        raise NotFound("no such resource")
    if (kind == "user" and owner_user_id is not None
            and owner_user_id != principal.user_id):  # type: ignore[union-attr]
        raise NotFound("no such resource")
    if kind not in _ALLOWED[capability]:
        raise Forbidden(_WHY.get((kind, capability),
                                 f"{'an' if kind[0] in 'aeiou' else 'a'} {kind} credential may not "
                                 f"{capability.value}; use a credential that may (see the "
                                 f"README's 'Who may do what')"))


def reading_scope(principal: Principal) -> tuple[str, str | None]:
    """What a list or history read of ``principal`` covers: ``(tenant_id, owner)`` —
    a user reads their own definitions and history (``owner`` = them); an agent and
    the operator read their whole tenant (``owner`` = ``None``).

    Raises:
        Forbidden: the tick secret reads nothing.
    """
    authorize(principal, Capability.READ)
    tenant = visible_tenant(principal)
    assert tenant is not None
    return tenant, principal.user_id if isinstance(principal, UserPrincipal) else None
