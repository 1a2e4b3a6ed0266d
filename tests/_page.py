"""A demo-like run for the history page's tests, built with the use cases on a fake
clock: acme/alice's hourly "ETF holdings check" passes three slots (three completed
reports, delivered to the log and a file), then a tick after the fourth slot's grace
records ``skipped_expired``; alice also has an active weekly cron in Europe/London
whose next occurrence comes after a DST change; a second tenant, globex/gus, has a definition and a task
of its own that acme must never see."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from _helpers import utc

from watchkeeper.runtime import AgentCatalog, AgentResult, Settings
from watchkeeper.runtime.engine._clock import FakeClock
from watchkeeper.runtime.store._db import Database
from watchkeeper.runtime.usecases import (
    add_user,
    authenticate,
    confirm,
    create_key,
    propose_spec,
    tick_once,
)
from watchkeeper.sources import SourceRegistry

FIRST_SLOT = "2026-10-24T09:00:00Z"
"""A Saturday: the day before Europe/London leaves summer time (2026-10-25 01:00 UTC)."""
ETF = "etf-holdings"
ETF_TITLE = "ETF holdings check"
WEEKLY = "rank-check"
WEEKLY_SPEC = {"version": 1, "title": "Weekly rank check",
               "trigger": {"type": "cron", "expr": "0 9 * * 1", "zone": "Europe/London"}}
"""Monday 09:00 London time: its next occurrence (2026-10-26) is the first after the
clocks go back, which the preview notes."""
SECRET = "globex-merger-watch"
SECRET_TITLE = "Globex merger watch"
HOSTILE_REPORT = ("# Holdings <script>document.title='pwned'</script>\n\n"
                  "<img src=x onerror=\"document.title='pwned'\">\n\n"
                  "[click me](javascript:document.title='pwned') and **bold** text\n")
"""A report an agent wrote to attack the page: a script tag, an inline handler and a
javascript: link, among plain markdown."""


class Hostile:
    """An agent whose report is :data:`HOSTILE_REPORT`."""

    async def run(self, ctx: Any) -> AgentResult:
        return AgentResult(HOSTILE_REPORT)


@dataclass
class Demo:
    """What the run left: tokens and keys by name, and task ids by tenant."""

    tokens: dict[str, str] = field(default_factory=dict)
    acme_tasks: list[int] = field(default_factory=list)
    globex_tasks: list[int] = field(default_factory=list)


def spec(title: str, *, after: int, agent: str = "digest") -> dict[str, Any]:
    """An hourly schedule from FIRST_SLOT that ends after ``after`` occurrences."""
    return {"version": 1, "title": title, "agent": {"name": agent},
            "trigger": {"type": "interval", "every": 3600, "anchor": FIRST_SLOT},
            "lateness": {"policy": "skip_expired", "late_grace": 600},
            "ends": {"after": after}, "instructions": "Check my holdings.",
            "delivery": [{"channel": "log"}, {"channel": "file", "destination": "notices.jsonl"}]}


async def _agree(db: Database, clock: FakeClock, tenant: str, user: str, definition_id: str,
                 body: dict[str, Any]) -> str:
    """An agent key of ``tenant`` proposes ``body`` for ``user``, who confirms it;
    returns the user's token."""
    token = await add_user(db, clock, tenant, user, zone="Europe/Paris")
    agent = await create_key(db, clock, "agent", tenant_id=tenant, name="chat")
    from watchkeeper.runtime.usecases import authenticate_bearer
    proposer = await authenticate_bearer(db, clock, agent.token)
    view = await propose_spec(db, clock, proposer, definition_id=definition_id, spec=body,
                              owner_user_id=user, min_interval=timedelta(seconds=60))
    await confirm(db, clock, await authenticate(db, token), definition_id=definition_id,
                  revision=view.proposal.revision, spec_hash=view.proposal.spec_hash)
    return token


async def demo_run(db: Database, clock: FakeClock, home: Path, *,
                   hostile_task: bool = False) -> Demo:
    """The run described in the module docstring: the definitions are confirmed at
    08:00 UTC on 2026-10-24 (``clock`` must not be later), the clock ends at 12:11.
    With ``hostile_task``, alice also owns ``hostile``, one occurrence whose report is
    :data:`HOSTILE_REPORT`."""
    demo = Demo()
    clock.set_wall(utc(FIRST_SLOT) - timedelta(hours=1))
    demo.tokens["alice"] = await _agree(db, clock, "acme", "alice", ETF, spec(ETF_TITLE, after=4))
    me = await authenticate(db, demo.tokens["alice"])
    weekly = await propose_spec(db, clock, me, definition_id=WEEKLY, spec=WEEKLY_SPEC)
    await confirm(db, clock, me, definition_id=WEEKLY, revision=1,
                  spec_hash=weekly.proposal.spec_hash)
    demo.tokens["gus"] = await _agree(db, clock, "globex", "gus", SECRET,
                                      spec(SECRET_TITLE, after=1))
    catalog = AgentCatalog()
    if hostile_task:
        catalog.add("hostile", Hostile())
        view = await propose_spec(db, clock, me, definition_id="hostile",
                                  spec={**spec("<b>bold</b> title", after=1, agent="hostile")},
                                  min_interval=timedelta(seconds=60))
        await confirm(db, clock, me, definition_id="hostile", revision=view.proposal.revision,
                      spec_hash=view.proposal.spec_hash)
    for name, kind, tenant in (("operator@acme", "operator", "acme"),
                               ("agent@acme", "agent", "acme"), ("app@acme", "app", "acme"),
                               ("tick", "tick", None)):
        demo.tokens[name] = (await create_key(db, clock, kind, tenant_id=tenant,
                                              name="page")).token
    settings = Settings(home=home, min_interval=60)
    for hour in range(3):
        clock.set_wall(utc(FIRST_SLOT) + timedelta(hours=hour, seconds=1))
        done = await tick_once(db, clock, settings, agents=catalog, sources=SourceRegistry())
        assert done["tasks"].get("completed", 0) >= 1, done
    clock.set_wall(utc(FIRST_SLOT) + timedelta(hours=3, minutes=11))
    late = await tick_once(db, clock, settings, agents=catalog, sources=SourceRegistry())
    assert late["decisions"] == {"skipped_expired": 1}, late
    for tenant, box in (("acme", demo.acme_tasks), ("globex", demo.globex_tasks)):
        box += [r["task_id"] for r in await db.pool.fetch(
            "SELECT task_id FROM tasks WHERE tenant_id = $1 ORDER BY task_id", tenant)]
    return demo
