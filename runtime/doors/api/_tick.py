"""``/v1/tick``: the one authenticated tick route (seed 001), so a pinger (Vercel Cron,
GitHub Actions, any cron) can drive a deployment without a resident supervisor."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response

from watchkeeper.runtime import usecases as uc

from ._deps import Authenticated, Svc
from ._models import TickOut
from ._problems import PROBLEM_RESPONSES

__all__ = ["router"]

router = APIRouter(prefix="/v1", tags=["tick"], responses=PROBLEM_RESPONSES)


async def _tick(svc: Svc, principal: uc.Principal, response: Response) -> dict[str, Any]:
    uc.authorize(principal, uc.Capability.TICK)
    response.headers["Cache-Control"] = "no-store"
    return await uc.tick_once(svc.db, svc.clock, svc.settings, agents=svc.agents,
                              sources=svc.sources, actor="api-tick")


_DOC = """One tick, condition polls, every runnable task and every due notice, then the
counters: decisions, ranges, fenced-out plans, polls by action, tasks by status,
deliveries by outcome. Only the tick secret may call it; concurrent ticks admit each
occurrence once (the occurrence's primary key decides)."""


@router.post("/tick", response_model=TickOut, summary="Run one tick", description=_DOC,
             operation_id="tick")
async def tick(svc: Svc, principal: Authenticated, response: Response) -> dict[str, Any]:
    return await _tick(svc, principal, response)


@router.get("/tick", response_model=TickOut, summary="Run one tick (for pingers that GET)",
            description=_DOC, operation_id="tick_get")
async def tick_get(svc: Svc, principal: Authenticated, response: Response) -> dict[str, Any]:
    return await _tick(svc, principal, response)
