"""The operator's routes: ``/v1/users``, ``/v1/keys`` and ``/v1/status``."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path
from pydantic import BaseModel, ConfigDict, Field

from watchkeeper.runtime import usecases as uc
from watchkeeper.triggers import IDENTIFIER_PATTERN

from ._deps import Authenticated, Svc
from ._problems import PROBLEM_RESPONSES

__all__ = ["router"]

router = APIRouter(prefix="/v1", tags=["operator"], responses=PROBLEM_RESPONSES)


class UserIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    user_id: str = Field(pattern=IDENTIFIER_PATTERN, max_length=128)
    zone: str = Field("UTC", max_length=64, description="The user's IANA zone.")
    display_name: str = Field("", max_length=200)


class UserOut(BaseModel):
    tenant_id: str
    user_id: str
    display_name: str
    zone: str


class UserList(BaseModel):
    items: list[UserOut]


class TokenOut(BaseModel):
    tenant_id: str
    user_id: str
    token: str = Field(description="The user's token, shown this once.")


class KeyIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Literal["agent", "app", "operator"]
    name: str = Field(pattern=IDENTIFIER_PATTERN, max_length=128)


class KeyOut(BaseModel):
    key_id: str
    kind: str
    tenant_id: str | None
    name: str
    created_by: str
    revoked: bool


class KeyList(BaseModel):
    items: list[KeyOut]


class NewKeyOut(KeyOut):
    token: str = Field(description="The key, shown this once.")


class StatusOut(BaseModel):
    tenant_id: str
    unclaimable: list[dict[str, Any]] = Field(
        description="The tenant's due tasks whose agent no live supervisor offers.")
    deliveries: dict[str, int] = Field(description="The tenant's notices by status.")
    oldest_due: datetime | None = Field(
        description="Since when the tenant's oldest due notice has waited (null: none).")


def _tenant(principal: uc.Principal) -> str:
    uc.authorize(principal, uc.Capability.OPERATE)
    tenant = uc.visible_tenant(principal)
    assert tenant is not None
    return tenant


@router.get("/users", response_model=UserList, summary="Users of the tenant")
async def users(svc: Svc, principal: Authenticated) -> dict[str, Any]:
    """Every user of the tenant (never a token)."""
    return {"items": await uc.list_users(svc.db, _tenant(principal))}


@router.post("/users", status_code=201, response_model=TokenOut, summary="Add a user")
async def add_user(svc: Svc, principal: Authenticated, body: UserIn) -> dict[str, Any]:
    """Add a user to the tenant; the answer carries their token, shown this once."""
    tenant = _tenant(principal)
    token = await uc.add_user(svc.db, svc.clock, tenant, body.user_id, zone=body.zone,
                              display_name=body.display_name)
    return {"tenant_id": tenant, "user_id": body.user_id, "token": token}


@router.post("/users/{user_id}/token", response_model=TokenOut, summary="Issue a new token")
async def rotate_token(svc: Svc, principal: Authenticated,
                       user_id: Annotated[str, Path(pattern=IDENTIFIER_PATTERN, max_length=128)]
                       ) -> dict[str, Any]:
    """Replace a user's token (the old one stops working at once)."""
    tenant = _tenant(principal)
    token = await uc.add_user(svc.db, svc.clock, tenant, user_id, rotate=True)
    return {"tenant_id": tenant, "user_id": user_id, "token": token}


def _key(key: uc.ApiKey) -> dict[str, Any]:
    return {"key_id": key.key_id, "kind": key.kind.value, "tenant_id": key.tenant_id,
            "name": key.name, "created_by": key.created_by, "revoked": key.revoked_at is not None}


@router.get("/keys", response_model=KeyList, summary="API keys of the tenant")
async def keys(svc: Svc, principal: Authenticated) -> dict[str, Any]:
    """The tenant's agent, app and operator keys (never a secret)."""
    return {"items": [_key(k) for k in await uc.list_keys(svc.db, _tenant(principal))]}


@router.post("/keys", status_code=201, response_model=NewKeyOut, summary="Create an API key")
async def create_key(svc: Svc, principal: Authenticated, body: KeyIn) -> dict[str, Any]:
    """An agent, app or operator key of the tenant, shown this once (a tick secret is the
    deployment's: ``watchkeeper keys create tick``)."""
    tenant = _tenant(principal)
    made = await uc.create_key(svc.db, svc.clock, body.kind, tenant_id=tenant, name=body.name,
                               created_by=principal.label)
    return {**_key(made.key), "token": made.token}


@router.delete("/keys/{key_id}", status_code=204, summary="Revoke an API key")
async def revoke_key(svc: Svc, principal: Authenticated,
                     key_id: Annotated[str, Path(min_length=1, max_length=64)]) -> None:
    """Revoke a key of the tenant at once (its next request is 401)."""
    await uc.revoke_key(svc.db, svc.clock, key_id, tenant_id=_tenant(principal))


@router.get("/status", response_model=StatusOut, summary="The tenant's waiting work")
async def status(svc: Svc, principal: Authenticated) -> dict[str, Any]:
    """The tenant's tasks no live supervisor can take and the tenant's outbox backlog.
    Nothing of the installation's fleet (supervisors, hosts, pids, the agents and
    sources they offer): that is the installation administrator's
    (``watchkeeper status``)."""
    return (await uc.tenant_status(svc.db, svc.clock.now(), _tenant(principal))).to_json()
