"""``/v1/deliveries``, ``/v1/webhooks`` and ``/v1/users/{user_id}/preferences``."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, Query

from watchkeeper.runtime import usecases as uc
from watchkeeper.triggers import ENDPOINT_NAME_PATTERN, IDENTIFIER_PATTERN

from ._deps import Authenticated, Svc
from ._models import (
    DeliveryList,
    DeliveryOut,
    EndpointIn,
    EndpointList,
    PreferencesIn,
    PreferencesOut,
    RotateIn,
    SecretOut,
)
from ._problems import PROBLEM_RESPONSES

__all__ = ["router"]

router = APIRouter(prefix="/v1", responses=PROBLEM_RESPONSES)

Name = Annotated[str, Path(pattern=ENDPOINT_NAME_PATTERN)]
DeliveryStatus = Literal[uc.DELIVERY_STATUSES]  # type: ignore[valid-type]
UserId = Annotated[str, Path(pattern=IDENTIFIER_PATTERN, max_length=128)]


def _operator(principal: uc.Principal) -> str:
    uc.authorize(principal, uc.Capability.OPERATE)
    tenant = uc.visible_tenant(principal)
    assert tenant is not None
    return tenant


@router.get("/deliveries", response_model=DeliveryList, tags=["outbox"], summary="Deliveries")
async def deliveries(svc: Svc, principal: Authenticated,
                     status: Annotated[DeliveryStatus | None, Query()] = None,
                     task: Annotated[int | None, Query(ge=1, le=2**63 - 1)] = None,
                     limit: Annotated[int, Query(ge=1, le=1000)] = 50) -> dict[str, Any]:
    """The tenant's notices, newest first (operator)."""
    tenant = _operator(principal)
    rows = await uc.list_deliveries(svc.db, tenant_id=tenant, status=status, task_id=task,
                                    limit=limit)
    return {"items": [{**r, "delivery_id": str(r["delivery_id"])} for r in rows]}


@router.post("/deliveries/{delivery_id}/redeliver", response_model=DeliveryOut,
             tags=["outbox"], summary="Redeliver a notice")
async def redeliver(svc: Svc, principal: Authenticated, delivery_id: uuid.UUID) -> dict[str, Any]:
    """Re-queue a dead, delivered or suppressed notice under the same delivery id; the
    research is never rerun (operator)."""
    tenant = _operator(principal)
    row = await uc.redeliver(svc.db, svc.clock, tenant, str(delivery_id), principal.label)
    return {**row, "delivery_id": str(row["delivery_id"])}


@router.get("/webhooks", response_model=EndpointList, tags=["outbox"], summary="Webhook endpoints")
async def webhooks(svc: Svc, principal: Authenticated) -> dict[str, Any]:
    """The tenant's endpoints and how many secrets sign for each (operator)."""
    tenant = _operator(principal)
    return {"items": await uc.list_endpoints(svc.db, svc.clock.now(), tenant)}


@router.post("/webhooks", status_code=201, response_model=SecretOut, tags=["outbox"],
             summary="Add a webhook endpoint")
async def add_webhook(svc: Svc, principal: Authenticated, body: EndpointIn) -> dict[str, Any]:
    """Add an endpoint; the answer carries its signing secret, shown this once."""
    tenant = _operator(principal)
    secret = await uc.add_endpoint(svc.db, svc.clock, tenant, body.name, body.url)
    return {"tenant_id": tenant, "name": body.name, "secret": secret}


@router.post("/webhooks/{name}/rotate", response_model=SecretOut, tags=["outbox"],
             summary="Rotate a webhook secret")
async def rotate_webhook(svc: Svc, principal: Authenticated, name: Name,
                         body: RotateIn | None = None) -> dict[str, Any]:
    """A new secret (shown once); the old ones sign too until the overlap ends."""
    tenant = _operator(principal)
    hours = body.overlap_hours if body else 24.0
    secret = await uc.rotate_secret(svc.db, svc.clock, tenant, name,
                                    overlap=timedelta(hours=hours))
    return {"tenant_id": tenant, "name": name, "secret": secret}


@router.delete("/webhooks/{name}", status_code=204, tags=["outbox"],
               summary="Remove a webhook endpoint")
async def remove_webhook(svc: Svc, principal: Authenticated, name: Name,
                         force: bool = False) -> None:
    """Remove an endpoint (refused, 409, while a definition delivers to it, unless
    ``force``)."""
    tenant = _operator(principal)
    await uc.remove_endpoint(svc.db, tenant, name, force=force)


async def _prefs_scope(principal: uc.Principal, user_id: str) -> str:
    tenant = uc.visible_tenant(principal)
    uc.authorize(principal, uc.Capability.PREFERENCES, tenant_id=tenant, owner_user_id=user_id)
    assert tenant is not None
    return tenant


def _prefs_out(tenant: str, user_id: str, row: dict[str, Any] | None) -> dict[str, Any]:
    if row is None:
        return {"tenant_id": tenant, "user_id": user_id, "channels": None,
                "min_importance": "low", "quiet": None, "zone": "UTC"}
    quiet = (f"{row['quiet_start']:%H:%M}-{row['quiet_end']:%H:%M}"
             if row["quiet_start"] else None)
    return {**row, "quiet": quiet}


@router.get("/users/{user_id}/preferences", response_model=PreferencesOut, tags=["users"],
            summary="Notification preferences")
async def preferences(svc: Svc, principal: Authenticated, user_id: UserId) -> dict[str, Any]:
    """A user's channels, minimum importance and quiet hours (the user, or the operator)."""
    tenant = await _prefs_scope(principal, user_id)
    return _prefs_out(tenant, user_id, await uc.get_preferences(svc.db, tenant, user_id))


@router.put("/users/{user_id}/preferences", response_model=PreferencesOut, tags=["users"],
            summary="Set notification preferences")
async def set_preferences(svc: Svc, principal: Authenticated, user_id: UserId,
                          body: PreferencesIn) -> dict[str, Any]:
    """Replace all three; read at every delivery; notices held by the old quiet hours are
    re-evaluated at once."""
    tenant = await _prefs_scope(principal, user_id)
    prefs = uc.PreferencesInput(channels=body.channels,
                                min_importance=uc.parse_importance(body.min_importance),
                                quiet=uc.parse_quiet(body.quiet))
    await uc.set_preferences(svc.db, svc.clock, tenant, user_id, prefs)
    return _prefs_out(tenant, user_id, await uc.get_preferences(svc.db, tenant, user_id))
