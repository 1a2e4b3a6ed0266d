"""``watchkeeper demo``: the acceptance of seed 004 (ETF Agent), in real time.

1. An agent proposes an interval schedule; the owner confirms the exact revision
   by presenting its spec hash.
2. A supervisor passes three slots and stores three distinct completed reports,
   each delivered through the outbox to a local webhook receiver (signed per Standard
   Webhooks, verified there), a file and the log.
3. The supervisor is stopped and a new one is started after the fourth slot's
   grace has passed: it admits no catch-up task and records ``skipped_expired``.
4. A preview of a weekly Monday 09:00 Europe/London schedule across the next two
   real DST changes, then the definition's history.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import anyio
from rich.console import Console

from watchkeeper.outbox import Receiver, serve
from watchkeeper.runtime import (
    Conflict,
    Database,
    NotFound,
    Settings,
    Supervisor,
    SupervisorConfig,
    SystemClock,
)
from watchkeeper.runtime.usecases import (
    HistoryQuery,
    add_endpoint,
    add_user,
    authenticate,
    confirm,
    history,
    propose,
    remove_endpoint,
    show_definition,
)
from watchkeeper.triggers import CronSchedule, format_utc, parse_spec, preview

from ._render import history_lines, preview_table

__all__ = ["run_demo"]

TENANT, USER = "demo", "alice"
NOTICES = "demo-notices.jsonl"


async def run_demo(db: Database, settings: Settings, console: Console, *,
                   interval: timedelta, grace: timedelta) -> bool:
    """Run the demo; True when every check held."""
    receiver = Receiver(())
    async with serve(receiver) as url:
        clock = SystemClock()
        hook = f"demo-hook-{clock.now():%Y%m%dT%H%M%S}"
        await _ensure_user(db, clock)
        receiver.secrets = (await add_endpoint(db, clock, TENANT, hook, url),)
        console.print(f"a local webhook receiver listens on {url} (endpoint {TENANT}/{hook}); "
                      "it verifies every Standard Webhooks signature and dedups by webhook-id")
        try:
            return await _acceptance(db, settings, console, clock, receiver, hook, interval, grace)
        finally:
            await remove_endpoint(db, TENANT, hook)


async def _acceptance(db: Database, settings: Settings, console: Console, clock: SystemClock,
                      receiver: Receiver, hook: str, interval: timedelta,
                      grace: timedelta) -> bool:
    definition_id, anchor = await _propose_and_confirm(db, clock, console, interval, grace, hook)
    config = SupervisorConfig(home=settings.home, tick_seconds=0.25, poll_seconds=0.25,
                              skew_budget=settings.clock_skew_budget)
    console.rule("2. a supervisor runs three slots")
    first = Supervisor(db, clock, config)
    with anyio.fail_after(interval.total_seconds() * 4 + 30):
        await _run_until(first, lambda s: s.completed >= 3 and s.deliveries >= 9)
    console.print(f"stopped supervisor 1 after {first.statistics().completed} completed tasks")
    fourth = anchor + 3 * interval
    resume_at = fourth + grace + timedelta(seconds=0.5)
    console.rule("3. restart after the fourth slot's grace")
    console.print(f"slot 4 is {format_utc(fourth)}, expires {format_utc(fourth + grace)}; "
                  f"waiting until {format_utc(resume_at)} to restart")
    await anyio.sleep(max((resume_at - clock.now()).total_seconds(), 0))
    second = Supervisor(db, clock, SupervisorConfig(**{**config.__dict__,
                                                       "supervisor_id": config.supervisor_id + "b"}))
    with anyio.fail_after(30):
        await _run_until(second, lambda s: s.ticks >= 1)
    console.print(f"supervisor 2 ticked once; the definition is now "
                  f"{await _status(db, definition_id)}")
    ok = await _verify(db, console, definition_id, settings, receiver)
    _dst_preview(console, clock)
    page = await history(db, HistoryQuery(tenant_id=TENANT, definition_id=definition_id))
    console.rule(f"5. history of {TENANT}/{definition_id} (watchkeeper history {definition_id} "
                 f"--tenant {TENANT})")
    for line in history_lines(page.entries, page.events):
        console.print(line, soft_wrap=True, highlight=False)
    console.print("[bold green]demo passed[/]" if ok else "[bold red]demo FAILED[/]")
    return ok


async def _ensure_user(db: Database, clock: SystemClock) -> str:
    """Create demo/alice, or issue a new token when the demo ran before."""
    try:
        return await add_user(db, clock, TENANT, USER, display_name="Alice", zone="Europe/Paris")
    except Conflict:
        return await add_user(db, clock, TENANT, USER, rotate=True)


async def _propose_and_confirm(db: Database, clock: SystemClock, console: Console,
                               interval: timedelta, grace: timedelta,
                               hook: str) -> tuple[str, Any]:
    token = await add_user(db, clock, TENANT, USER, rotate=True)
    now = clock.now()
    definition_id = f"etf-holdings-{now:%Y%m%dT%H%M%S}"
    anchor = (now + timedelta(seconds=3)).replace(microsecond=0)
    spec = parse_spec({
        "version": 1, "title": "ETF holdings check (demo)",
        "trigger": {"type": "interval", "every": interval, "anchor": anchor},
        "lateness": {"policy": "skip_expired", "late_grace": grace},
        "ends": {"after": 4},
        "instructions": "Check my holdings; notify me only if something important changed.",
        "delivery": [{"channel": "webhook", "destination": hook},
                     {"channel": "file", "destination": NOTICES}, {"channel": "log"}],
        "limits": {"deadline": 60, "max_attempts": 2},
    }, min_interval=timedelta(seconds=1))
    console.rule("1. an agent proposes, the owner confirms")
    proposal = await propose(db, clock, tenant_id=TENANT, definition_id=definition_id,
                             owner_user_id=USER, spec=spec, proposed_by="agent:etf-chat")
    console.print(preview_table(preview(spec.calendar(), now, 4),
                                f"{definition_id} revision {proposal.revision}: what Alice sees"))
    console.print(f"spec_hash {proposal.spec_hash}")
    me = await authenticate(db, token)
    done = await confirm(db, clock, me, definition_id=definition_id, revision=proposal.revision,
                         spec_hash=proposal.spec_hash)
    console.print(f"confirmed by {me.label} at {format_utc(done.effective_since)}; "
                  f"first slot {format_utc(done.next_due_at)}" if done.next_due_at else "")
    return definition_id, anchor


async def _run_until(supervisor: Supervisor, predicate: Any) -> None:
    async with anyio.create_task_group() as tg:
        await tg.start(supervisor.run)
        await supervisor.wait_until(predicate)
        supervisor.stop()


async def _status(db: Database, definition_id: str) -> str:
    try:
        view = await show_definition(db, TENANT, definition_id)
    except NotFound:
        return ""
    return str(view.definition["status"])


async def _verify(db: Database, console: Console, definition_id: str, settings: Settings,
                  receiver: Receiver) -> bool:
    page = await history(db, HistoryQuery(tenant_id=TENANT, definition_id=definition_id))
    entries = list(reversed(page.entries))
    tasks = [e for e in entries if e["task_id"] is not None]
    hashes = {e["content_sha256"] for e in tasks if e["task_status"] == "completed"}
    skipped = [e for e in entries if e["decision"] == "skipped_expired"]
    checks = {
        "three tasks, all completed": len(tasks) == 3 and all(
            e["task_status"] == "completed" for e in tasks),
        "three distinct verified reports": len(hashes) == 3 and all(e["verified"] for e in tasks),
        "no fourth task; slot 4 recorded skipped_expired": len(skipped) == 1 and len(entries) == 4,
        "every report delivered through the outbox (webhook, file, log)": all(
            {d["status"] for d in (e["deliveries"] or [])} == {"delivered"}
            and len(e["deliveries"]) == 3 for e in tasks),
        "the receiver verified three signed notices, each webhook-id once": (
            receiver.processed == 3 and receiver.rejected == 0
            and {r.payload["data"]["definition_id"] for r in receiver.seen.values() if r.payload}
            == {definition_id}),
    }
    console.rule("checks")
    for name, held in checks.items():
        console.print(f"{'[green]ok[/]' if held else '[red]FAILED[/]'}  {name}")
    notices = settings.home / "notices" / TENANT / NOTICES
    lines = [json.loads(x) for x in notices.read_text().splitlines()] if notices.exists() else []
    mine = [n for n in lines if n.get("definition_id") == definition_id]
    console.print(f"{notices}: {len(mine)} notice(s) for this run, e.g. "
                  f"{json.dumps(mine[0]) if mine else '-'}")
    return all(checks.values())


def _dst_preview(console: Console, clock: SystemClock) -> None:
    """The weekly rank check across the next two real DST changes, as the user sees it."""
    console.rule("4. Monday 09:00 Europe/London across the next two DST changes")
    items = preview(CronSchedule("0 9 * * 1", "Europe/London"), clock.now(), 60)
    changed = [i for i, item in enumerate(items) if item.note][:2]
    shown = sorted({j for i in changed for j in (i - 1, i, i + 1) if 0 <= j < len(items)})
    console.print(preview_table([items[j] for j in shown],
                                "weekly rank check: the UTC instant moves, the local time does not"))
