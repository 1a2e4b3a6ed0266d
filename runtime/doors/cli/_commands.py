"""The ``watchkeeper`` command line (typer + rich).

Every command that touches the database opens it from ``DATABASE_URL`` or, when that
is unset, starts (or joins) the embedded PostgreSQL under ``WATCHKEEPER_HOME``, and
applies pending migrations first. Exit codes: 0 ok; 1 runtime failure; 2 bad input
(spec, option or file); 3 not found; 4 not authorized; 5 conflict with the current
state; 6 the database is unreachable.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import logging
import os
import shlex
import socket
import sys
from collections.abc import Awaitable, Callable, Iterator
from datetime import UTC, date, datetime, time, timedelta
from pathlib import Path
from typing import Annotated, Any, TypeVar

import anyio
import pydantic
import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from watchkeeper.sources import SourceRegistry
from watchkeeper.triggers import Importance, NoOccurrenceError, SpecError, format_utc, parse_spec, preview

from ..._errors import (
    AuthError,
    Conflict,
    DatabaseUnavailable,
    NotFound,
    WatchkeeperError,
)
from ..._settings import Settings
from ...engine._agents import AgentCatalog, CommandAgent
from ...engine._clock import SystemClock
from ...engine._delivery_store import PgDeliveryStore
from ...engine._poller import poll_once, polls_page
from ...engine._registry import Registry, ScheduleDef, register
from ...engine._scheduler import tick
from ...engine._supervisor import (
    Supervisor,
    SupervisorConfig,
    close_channels,
    default_channels,
    make_dispatcher,
)
from ...engine._worker import Worker
from ...store._db import Database
from ...store._embedded import EmbeddedPostgresError, embedded_postgres
from ...usecases import _definitions as defs
from ...usecases import _webhooks as webhooks
from ...usecases._history import HISTORY_STATUSES, HistoryQuery, history
from ...usecases._manual import review, trigger_now
from ...usecases._replay import load_replay_definitions, replay
from ...usecases._specfile import load_registrations, load_spec
from ._render import definitions_table, history_table, preview_table

__all__ = ["app", "main"]

app = typer.Typer(no_args_is_help=True, add_completion=False,
                  help="Keep the standing agreements people make with their AI agents.")
users_app = typer.Typer(no_args_is_help=True, help="Users and their API tokens.")
db_app = typer.Typer(no_args_is_help=True, help="Database maintenance.")
webhooks_app = typer.Typer(no_args_is_help=True,
                           help="A tenant's webhook endpoints and their signing secrets.")
prefs_app = typer.Typer(no_args_is_help=True, help="A user's notification preferences.")
app.add_typer(users_app, name="users")
app.add_typer(db_app, name="db")
app.add_typer(webhooks_app, name="webhooks")
app.add_typer(prefs_app, name="prefs")

out = Console()
if not out.is_terminal:  # a pipe or a file: do not fold tables to 80 columns
    out = Console(width=140)
err = Console(stderr=True)
if not err.is_terminal:  # keep each message on one line for grep and scripts
    err = Console(stderr=True, soft_wrap=True)
T = TypeVar("T")

DELIVERY_STATUSES = ("pending", "delivering", "delivered", "retrying", "dead", "suppressed")

_EXIT = ((SpecError, 2), (NotFound, 3), (AuthError, 4), (Conflict, 5),
         (DatabaseUnavailable, 6), (EmbeddedPostgresError, 6), (WatchkeeperError, 1))


def main() -> None:
    """Entry point of the ``watchkeeper`` script."""
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("watchkeeper.notify").setLevel(logging.INFO)  # the log channel
    app()


def _settings() -> Settings:
    try:
        return Settings()
    except pydantic.ValidationError as exc:
        first = exc.errors()[0]
        err.print(f"[red]error:[/] setting WATCHKEEPER_{str(first['loc'][0]).upper()}: "
                  f"{escape(str(first['msg']))}")
        raise typer.Exit(2) from exc


@contextlib.contextmanager
def _server(settings: Settings) -> Iterator[str]:
    if settings.database_url:
        yield settings.database_url
    else:
        with embedded_postgres(settings.home) as dsn:
            yield dsn


def _with_db(fn: Callable[[Database, Settings], Awaitable[T]]) -> T:
    """Open the database (embedded or DATABASE_URL), migrate, run ``fn``; map errors
    to exit codes with the message on stderr."""
    settings = _settings()
    try:
        with _server(settings) as dsn:

            async def run() -> T:
                async with Database.open(dsn) as db:
                    return await fn(db, settings)

            return anyio.run(run)
    except tuple(cls for cls, _ in _EXIT) as exc:
        code = next(code for cls, code in _EXIT if isinstance(exc, cls))
        err.print(f"[red]error:[/] {escape(str(exc))}")
        raise typer.Exit(code) from exc


def _fail_input(exc: SpecError) -> typer.Exit:
    err.print(f"[red]error:[/] {escape(str(exc))}")
    return typer.Exit(2)


def _json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=_json_value) + "\n")


def _json_value(value: Any) -> Any:
    """Instants as ISO 8601 UTC ending in Z (as everywhere in the CLI's JSON)."""
    if isinstance(value, datetime) and value.tzinfo is not None:
        return format_utc(value)
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    return str(value)


def _instant(text: str, option: str) -> datetime:
    try:
        value = datetime.fromisoformat(text)
    except ValueError as exc:
        raise _fail_input(SpecError(option, f"{text!r} is not an ISO 8601 time.",
                                    "write e.g. 2026-12-02T20:00:00Z.")) from exc
    if value.tzinfo is None:
        raise _fail_input(SpecError(option, f"{text!r} has no UTC offset.", "add Z or +01:00."))
    return value


# ---------------------------------------------------------------- preview


@app.command("preview")
def preview_cmd(
    spec_file: Annotated[Path | None, typer.Argument(help="A spec file (TOML or JSON).")] = None,
    cron: Annotated[str | None, typer.Option(help="5-field cron expression.")] = None,
    tz: Annotated[str | None, typer.Option(help="IANA zone (with --cron or --at).")] = None,
    every: Annotated[float | None, typer.Option(help="Interval in seconds.")] = None,
    anchor: Annotated[str | None, typer.Option(help="Interval anchor, ISO 8601 with offset.")] = None,
    at: Annotated[str | None, typer.Option(help="One local time (ISO 8601) in --tz.")] = None,
    after: Annotated[str | None, typer.Option(help="List occurrences strictly after this "
                                                    "instant (default: now).")] = None,
    count: Annotated[int, typer.Option(min=1, max=10_000)] = 10,
    dst_gap: Annotated[str, typer.Option(help="skip or run_after")] = "skip",
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list.")] = False,
) -> None:
    """List the next occurrences: UTC instant, local time, slot, and a DST note."""
    settings = _settings()
    chosen = [x for x in (spec_file, cron, every, at) if x is not None]
    if len(chosen) != 1:
        raise _fail_input(SpecError("preview", "give exactly one of SPEC_FILE, --cron, --every, --at.",
                                    "e.g. watchkeeper preview --cron '0 9 * * 1' --tz Europe/London"))
    try:
        if spec_file is not None:
            spec = load_spec(spec_file, min_interval=settings.min_interval_delta)
        else:
            trigger: dict[str, Any]
            if cron is not None:
                trigger = {"type": "cron", "expr": cron, "zone": tz, "dst_gap": dst_gap}
            elif every is not None:
                trigger = {"type": "interval", "every": every}
                if anchor is not None:
                    trigger["anchor"] = anchor
            else:
                trigger = {"type": "at", "at": at, "zone": tz or "UTC"}
            spec = parse_spec({"version": 1, "trigger": trigger},
                              min_interval=settings.min_interval_delta)
        start = _instant(after, "--after") if after else datetime.now(UTC)
        items = preview(spec.bounded_calendar(), start, count)
    except SpecError as exc:
        raise _fail_input(exc) from exc
    if as_json:
        _json([item.to_json() for item in items])
    else:
        out.print(preview_table(items, f"next {len(items)} occurrence(s) after {format_utc(start)}"))


# ---------------------------------------------------------------- users and definitions


@users_app.command("add")
def users_add(
    tenant: str, user: str,
    zone: Annotated[str, typer.Option(help="The user's IANA zone.")] = "UTC",
    name: Annotated[str, typer.Option(help="Display name.")] = "",
    rotate: Annotated[bool, typer.Option(help="Issue a new token for an existing user.")] = False,
) -> None:
    """Create a user (and its tenant) and print its API token once."""
    async def run(db: Database, settings: Settings) -> str:
        return await defs.add_user(db, SystemClock(), tenant, user, display_name=name, zone=zone,
                                   rotate=rotate)
    token = _with_db(run)
    out.print(f"user {tenant}/{user}; token (shown once, keep it secret):")
    sys.stdout.write(token + "\n")


@users_app.command("list")
def users_list(tenant: Annotated[str | None, typer.Option()] = None,
               as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """List users (never their tokens)."""
    async def run(db: Database, _: Settings) -> list[dict[str, Any]]:
        return [dict(r) for r in await db.fetch("users_list", tenant)]
    rows = _with_db(run)
    if as_json:
        _json(rows)
        return
    for r in rows:
        out.print(f"{r['tenant_id']}/{r['user_id']}  {r['display_name']}  zone {r['zone']}")


@app.command("status")
def status_cmd(as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Supervisors (heartbeat, status, clock offset) and the outbox backlog."""
    async def run(db: Database, _: Settings) -> dict[str, Any]:
        return {"supervisors": [dict(r) for r in await db.fetch("supervisors_list")],
                "deliveries": {r["status"]: r["count"]
                               for r in await db.fetch("deliveries_summary")},
                "oldest_due": min((r["oldest_due"] for r in await db.fetch("deliveries_summary")
                                   if r["oldest_due"] is not None), default=None)}
    state = _with_db(run)
    if as_json:
        _json(state)
        return
    rows = state["supervisors"]
    if not rows:
        out.print("no supervisor has run against this database yet")
    now = datetime.now(UTC)
    for r in rows:
        offset = "" if r["clock_offset_ms"] is None else f", clock offset {r['clock_offset_ms']:.0f} ms"
        status = r["status"]
        every = float((r["detail"] or {}).get("heartbeat_seconds", 5))
        age = (now - r["heartbeat_at"]).total_seconds()
        if status != "stopped" and age > 3 * every:
            status = f"unresponsive (no heartbeat for {age:.0f} s; was {status})"
        out.print(f"{r['supervisor_id']}: {status}, last heartbeat "
                  f"{format_utc(r['heartbeat_at'])}{offset}")
    counts = state["deliveries"]
    summary = ", ".join(f"{counts[k]} {k}" for k in DELIVERY_STATUSES if counts.get(k))
    out.print(f"outbox: {summary or 'empty'}"
              + (f"; oldest due since {format_utc(state['oldest_due'])}" if state["oldest_due"]
                 else ""))
    if counts.get("dead"):
        out.print(f"[red]{counts['dead']} dead notice(s)[/]: watchkeeper deliveries --status dead;"
                  " fix the destination, then watchkeeper redeliver ID --tenant T")


@app.command("propose")
def propose_cmd(
    spec_file: Path,
    tenant: Annotated[str, typer.Option(help="Tenant of the definition.")],
    definition: Annotated[str, typer.Option("--id", help="Definition id.")],
    owner: Annotated[str, typer.Option(help="Owner user id (a real user).")],
    based_on: Annotated[int | None, typer.Option(help="Revision this edit starts from.")] = None,
    by: Annotated[str, typer.Option(help="The proposing agent principal.")] = "agent:cli",
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Record a proposed revision; the owner must confirm it with the printed hash."""
    settings = _settings()
    try:
        spec = load_spec(spec_file, min_interval=settings.min_interval_delta)
    except SpecError as exc:
        raise _fail_input(exc) from exc

    async def run(db: Database, _: Settings) -> defs.Proposal:
        return await defs.propose(db, SystemClock(), tenant_id=tenant, definition_id=definition,
                                  owner_user_id=owner, spec=spec, proposed_by=by,
                                  based_on=based_on)
    proposal = _with_db(run)
    try:
        items = preview(spec.bounded_calendar(), datetime.now(UTC), 5)
    except NoOccurrenceError:
        items = []
    if as_json:
        _json({"tenant_id": tenant, "definition_id": definition, "revision": proposal.revision,
               "spec_hash": proposal.spec_hash, "needs_confirmation": proposal.needs_confirmation,
               "effective": spec.effective(), "next": [i.to_json() for i in items]})
        return
    out.print(f"{tenant}/{definition} revision {proposal.revision}: what the owner is asked to "
              "confirm (the hash covers all of it):")
    _json(spec.effective())
    polls = spec.trigger.type == "condition"
    out.print(preview_table(items, "its next polls (a task runs only when the condition fires)"
                            if polls else "its next occurrences"))
    if proposal.needs_confirmation:
        out.print(f"spec_hash {proposal.spec_hash}")
        out.print(f"confirm with: watchkeeper confirm {definition} --revision {proposal.revision} "
                  f"--spec-hash {proposal.spec_hash} --token <owner's token>", soft_wrap=True)
    else:
        out.print("descriptive edit only: effective at once, no confirmation needed")


@app.command("confirm")
def confirm_cmd(
    definition: str,
    revision: Annotated[int, typer.Option(help="The proposed revision.")],
    spec_hash: Annotated[str, typer.Option(help="The spec_hash you were shown.")],
    token: Annotated[str | None, typer.Option(help="Owner's token (or WATCHKEEPER_TOKEN).")] = None,
) -> None:
    """Confirm a proposed revision as its owner; it becomes the effective one."""
    async def run(db: Database, settings: Settings) -> defs.Confirmation:
        me = await defs.authenticate(db, token or settings.token)
        return await defs.confirm(db, SystemClock(), me, definition_id=definition,
                                  revision=revision, spec_hash=spec_hash)
    done = _with_db(run)
    out.print(f"revision {done.revision} of {definition} is effective since "
              f"{format_utc(done.effective_since)} (fence {done.fence}); first occurrence "
              f"{format_utc(done.next_due_at) if done.next_due_at else '-'}")


def _actor_command(verb: str) -> Callable[..., None]:
    def command(
        definition: str,
        tenant: Annotated[str | None, typer.Option(help="Tenant (the operator's access).")] = None,
        token: Annotated[str | None, typer.Option(help="Owner's token instead of operator.")] = None,
        running: Annotated[bool, typer.Option(help="cancel: also stop the running task.")] = False,
    ) -> None:
        async def run(db: Database, settings: Settings) -> int:
            actor, tenant_id = await _actor(db, settings, token, tenant)
            clock = SystemClock()
            if verb == "pause":
                return await defs.pause(db, clock, actor, tenant_id, definition)
            if verb == "resume":
                return await defs.resume(db, clock, actor, tenant_id, definition)
            return await defs.cancel(db, clock, actor, tenant_id, definition, running=running)
        fence = _with_db(run)
        done = {"pause": "paused", "resume": "resumed", "cancel": "cancelled"}[verb]
        out.print(f"{definition}: {done} (fence {fence})")
    command.__doc__ = {"pause": "Suppress new occurrences; a running task goes on.",
                       "resume": "Resume; the paused span is recorded once and not replayed.",
                       "cancel": "End the definition (--running also stops its active task)."}[verb]
    return command


async def _actor(db: Database, settings: Settings, token: str | None,
                 tenant: str | None) -> tuple[defs.Actor, str]:
    if token or (settings.token and tenant is None):
        me = await defs.authenticate(db, token or settings.token)
        return me, me.tenant_id
    if tenant is None:
        raise SpecError("--tenant", "is required without a token.", "pass --tenant or --token.")
    return defs.OPERATOR, tenant


for _verb in ("pause", "resume", "cancel"):
    app.command(_verb)(_actor_command(_verb))


@app.command("trigger")
def trigger_cmd(
    definition: str,
    tenant: Annotated[str | None, typer.Option(help="Tenant (operator access).")] = None,
    token: Annotated[str | None, typer.Option(help="Owner's token.")] = None,
    binding: Annotated[str | None, typer.Option(help="TENANT/BINDING of a registered "
                                                     "definition.")] = None,
) -> None:
    """Claim a manual occurrence now (a key distinct from any scheduled one)."""
    async def run(db: Database, settings: Settings) -> Any:
        actor, tenant_id = await _actor(db, settings, token, tenant)
        target = tuple(binding.split("/", 1)) if binding else None
        return await trigger_now(db, SystemClock(), actor, tenant_id, definition,
                                 binding=target)  # type: ignore[arg-type]
    result = _with_db(run)
    for (tenant_id, binding_id), decision in result.decisions.items():
        out.print(f"{definition} {tenant_id}/{binding_id} manual {result.slot}: {decision}")


@app.command("review")
def review_cmd(
    definition: str, slot: str,
    approve: Annotated[bool, typer.Option("--approve/--skip", help="Admit it late, or skip it.")],
    tenant: Annotated[str | None, typer.Option(help="The definition's tenant (_operator for "
                                                   "registered ones).")] = None,
    token: Annotated[str | None, typer.Option()] = None,
    binding: Annotated[str | None, typer.Option(help="TENANT/BINDING of a registered "
                                                     "definition.")] = None,
) -> None:
    """Decide an occurrence waiting in review_required."""
    async def run(db: Database, settings: Settings) -> str:
        actor, tenant_id = await _actor(db, settings, token, tenant)
        if binding is None:
            return await review(db, SystemClock(), actor, tenant_id, definition, slot,
                                approve=approve)
        if "/" not in binding:
            raise SpecError("--binding", f"{binding!r} is not TENANT/BINDING.",
                            "e.g. --binding org_acme/acme")
        occurrence_tenant, binding_id = binding.split("/", 1)
        return await review(db, SystemClock(), actor, occurrence_tenant, definition, slot,
                            approve=approve, binding_id=binding_id, definition_tenant_id=tenant_id)
    out.print(f"{definition} {slot}: {_with_db(run)}")


@app.command("register")
def register_cmd(file: Path) -> None:
    """Register (or replace) operator definitions with static bindings from a file."""
    settings = _settings()
    try:
        items = load_registrations(file, min_interval=settings.min_interval_delta)
    except SpecError as exc:
        raise _fail_input(exc) from exc

    async def run(db: Database, _: Settings) -> list[tuple[str, int]]:
        return [(d.id, await register(db, SystemClock(), d)) for d in items]
    for definition_id, revision in _with_db(run):
        out.print(f"registered {definition_id} (revision {revision})")


@app.command("list")
def list_cmd(
    tenant: Annotated[str | None, typer.Option()] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """List definitions with their status and next due time."""
    async def run(db: Database, _: Settings) -> list[dict[str, Any]]:
        return [dict(r) for r in await db.fetch("definitions_list", tenant)]
    rows = _with_db(run)
    if as_json:
        _json(rows)
    else:
        out.print(definitions_table(rows))


@app.command("show")
def show_cmd(definition: str, tenant: Annotated[str, typer.Option()]) -> None:
    """Show a definition's revisions and its effective spec."""
    async def run(db: Database, _: Settings) -> tuple[Any, list[Any]]:
        row = await db.fetchrow("definition_get", tenant, definition)
        if row is None:
            raise NotFound(f"no definition {tenant}/{definition}")
        return row, await db.fetch("revisions_list", tenant, definition)
    row, revisions = _with_db(run)
    out.print(f"{tenant}/{definition}: {row['status']}, fence {row['fence']}, effective revision "
              f"{row['effective_revision']}, next due {row['next_due_at']}")
    for r in revisions:
        out.print(f"  revision {r['revision']}: {r['status']} hash {r['spec_hash']} proposed by "
                  f"{r['proposed_by']} {format_utc(r['proposed_at'])}"
                  + (f", confirmed by {r['confirmed_by']}" if r["confirmed_by"] else ""))
    if row["spec"] is not None:
        _json(row["spec"])
    registration = row["registration"] or {}
    for binding in registration.get("bindings", []):
        out.print(f"  binding {binding['tenant_id']}/{binding['binding_id']}: owner "
                  f"{binding['owner_user_id']}, agent {binding['agent']}")
    if "resolver" in registration:
        out.print(f"  bindings resolved at tick time by {registration['resolver']}")
    if registration.get("terminal") == "run":
        out.print(f"  run terminal {registration['run']} for tenants {registration.get('tenants')}")


@app.command("report")
def report_cmd(task: int, tenant: Annotated[str, typer.Option(help="The task's tenant.")],
               as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Print a task's committed report and its receipt."""
    async def run(db: Database, _: Settings) -> dict[str, Any]:
        row = await db.fetchrow("report_get", tenant, task)
        if row is None:
            raise NotFound(f"no report for task {tenant}/{task}")
        return dict(row)
    row = _with_db(run)
    if as_json:
        _json(row)
        return
    out.print(f"receipt: {'verified' if row['verified'] else 'NOT verified'} ({row['verification']}), "
              f"sha256 {row['content_sha256']}, output {row['output_ref']}, importance "
              f"{row['importance']}, finished {format_utc(row['finished_at'])}", soft_wrap=True)
    sys.stdout.write(row["content_md"])


@app.command("history")
def history_cmd(
    definition: Annotated[str | None, typer.Argument()] = None,
    tenant: Annotated[str | None, typer.Option()] = None,
    user: Annotated[str | None, typer.Option()] = None,
    status: Annotated[str | None, typer.Option(help="A decision or task status.")] = None,
    since: Annotated[str | None, typer.Option()] = None,
    until: Annotated[str | None, typer.Option()] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000)] = 50,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Every occurrence with its decision, lateness, task, runs, report and delivery."""
    if status is not None and status not in HISTORY_STATUSES:
        raise _fail_input(SpecError("--status", f"{status!r} is not a decision or task status.",
                                    f"use one of {', '.join(sorted(HISTORY_STATUSES))}."))
    query = HistoryQuery(tenant, definition, user, status,
                         _instant(since, "--since") if since else None,
                         _instant(until, "--until") if until else None, limit)

    async def run(db: Database, _: Settings) -> Any:
        return await history(db, query)
    page = _with_db(run)
    if as_json:
        _json({"entries": [e.to_json() for e in page.entries],
               "events": [e.to_json() for e in page.events],
               "next_after": [_iso(x) for x in page.after] if page.after else None})
        return
    out.print(history_table(page.entries, page.events, f"history {definition or ''}".strip()))


def _iso(value: Any) -> Any:
    return format_utc(value) if isinstance(value, datetime) else value


@app.command("polls")
def polls_cmd(
    definition: Annotated[str | None, typer.Argument()] = None,
    tenant: Annotated[str, typer.Option(help="The tenant (e.g. a replay's _replay-...).")] = "",
    since: Annotated[str | None, typer.Option(help="Polls scheduled at or after (ISO 8601).")] = None,
    limit: Annotated[int, typer.Option(min=1, max=10000)] = 100,
    changes: Annotated[bool, typer.Option(help="Only polls whose verdict changed or that did "
                                          "something (fired, suppressed, denied, ...).")] = False,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """A condition's poll timeline: verdict, action, reason, task and what was read."""
    if not tenant:
        raise _fail_input(SpecError("--tenant", "is required.", "give --tenant T."))
    start = _instant(since, "--since") if since else None

    async def run(db: Database, _: Settings) -> list[dict[str, Any]]:
        return await polls_page(db, tenant, definition, since=start, limit=limit)
    rows = _with_db(run)
    if changes:
        last: dict[str, Any] = {}
        kept = []
        for row in rows:
            key = row["definition_id"]
            if row["action"] != "none" or last.get(key) != row["verdict"]:
                kept.append(row)
            last[key] = row["verdict"]
        rows = kept
    if as_json:
        for row in rows:
            if isinstance(row.get("observations"), str):
                row["observations"] = json.loads(row["observations"])
        _json(rows)
        return
    if not rows:
        err.print("no polls match")
        return
    table = Table(title=f"polls {definition or tenant}", show_lines=False)
    for column in ("scheduled_for (UTC)", "definition", "verdict", "action", "task", "reason"):
        table.add_column(column)
    for row in rows:
        table.add_row(format_utc(row["scheduled_for"]), escape(row["definition_id"]),
                      row["verdict"] or "-", row["action"] or row["status"],
                      "" if row["task_id"] is None else f"#{row['task_id']}",
                      escape(row["reason"] or ""))
    out.print(table)


# ---------------------------------------------------------------- running


def _outbox_config(settings: Settings) -> dict[str, Any]:
    """The outbox fields of SupervisorConfig from the settings."""
    return {"delivery_max_attempts": settings.delivery_max_attempts,
            "delivery_max_age": settings.delivery_max_age,
            "webhook_timeout": settings.webhook_timeout}


def _catalog(agents: list[str]) -> AgentCatalog:
    catalog = AgentCatalog()
    for item in agents:
        name, sep, command = item.partition("=")
        if not sep or not name or not command:
            raise _fail_input(SpecError("--agent", f"{item!r} is not NAME=COMMAND.",
                                        "e.g. --agent research='python research.py'"))
        catalog.add(name, CommandAgent(shlex.split(command)))
    return catalog


def _sources(target: str | None, series: list[str]) -> SourceRegistry:
    """The condition sources of ``run``/``tick``: ``--sources module:attr`` (a
    SourceRegistry, a list of sources, or a callable returning either) and ``--series
    NAME[@VERSION]=CSV`` (a historical series; version 1 unless given)."""
    from watchkeeper.sources import SeriesError, SeriesSource, Source

    found = SourceRegistry()
    if target is not None:
        module_name, _, attr = target.partition(":")
        try:
            value = getattr(importlib.import_module(module_name), attr or "SOURCES")
        except (ImportError, AttributeError, ValueError) as exc:
            raise _fail_input(SpecError("--sources", f"cannot load {target!r}: {exc}.",
                                        "give module:attribute of a list of sources.")) from exc
        value = value() if callable(value) and not isinstance(value, SourceRegistry) else value
        try:
            items = list(value)
        except TypeError:
            items = [None]
        if not all(isinstance(i, Source) for i in items):
            raise _fail_input(SpecError("--sources", f"{target} is not a list of sources.",
                                        "each needs name, version and async read(subject, at)."))
        for item in items:
            found.add(item)
    for item in series:
        label, sep, path = item.partition("=")
        name, _, version = label.partition("@")
        if not sep or not name or not path:
            raise _fail_input(SpecError("--series", f"{item!r} is not NAME=CSV or NAME@VERSION=CSV.",
                                        "e.g. --series prices@1=prices.csv."))
        if name in found.names():
            raise _fail_input(SpecError("--series", f"two sources are named {name!r}.",
                                        "give each series its own name."))
        try:
            found.add(SeriesSource.from_csv(Path(path), name=name, version=version or "1"))
        except (SeriesError, OSError) as exc:
            raise _fail_input(SpecError("--series", str(exc), "fix the file or path.")) from exc
    return found


def _schedules(target: str | None) -> Registry:
    if target is None:
        return Registry()
    module_name, _, attr = target.partition(":")
    try:
        value = getattr(importlib.import_module(module_name), attr or "SCHEDULES")
    except (ImportError, AttributeError) as exc:
        raise _fail_input(SpecError("--schedules", f"cannot load {target!r}: {exc}.",
                                    "give module:attribute of a list of ScheduleDef.")) from exc
    items = value() if callable(value) else value
    if not all(isinstance(i, ScheduleDef) for i in items):
        raise _fail_input(SpecError("--schedules", f"{target} is not a list of ScheduleDef.",
                                    "see 'Operator-registered definitions' in the README."))
    return Registry(items)


@app.command("run")
def run_cmd(
    workers: Annotated[int | None, typer.Option(min=1, max=64)] = None,
    schedules: Annotated[str | None, typer.Option(help="module:attr with operator ScheduleDefs.")] = None,
    agent: Annotated[list[str], typer.Option(help="NAME=COMMAND: a command agent.")] = [],  # noqa: B006
    sources: Annotated[str | None, typer.Option(help="module:attr with condition sources.")] = None,
    series: Annotated[list[str], typer.Option(help="NAME[@VERSION]=CSV: a series source.")] = [],  # noqa: B006
) -> None:
    """Run the supervisor until SIGINT/SIGTERM."""
    registry, catalog = _schedules(schedules), _catalog(agent)
    found = _sources(sources, series)

    async def run(db: Database, settings: Settings) -> dict[str, Any]:
        config = SupervisorConfig(home=settings.home, workers=workers or settings.workers,
                                  lease_seconds=settings.lease_seconds,
                                  tick_seconds=settings.tick_seconds,
                                  skew_budget=settings.clock_skew_budget,
                                  **_outbox_config(settings))
        supervisor = Supervisor(db, SystemClock(), config, registry=registry, agents=catalog,
                                sources=found)
        err.print(f"supervisor {config.supervisor_id} running ({config.workers} workers); "
                  "Ctrl-C to stop")
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(_stop_on_signal, supervisor)
                try:
                    await supervisor.run()
                finally:
                    tg.cancel_scope.cancel()
        except BaseExceptionGroup as group:
            raise _first_error(group) from group
        return {"statistics": supervisor.statistics()}
    logging.getLogger("watchkeeper").setLevel(logging.INFO)
    result = _with_db(run)
    stats = result["statistics"]
    err.print(f"stopped: {stats.ticks} ticks, {stats.polls} polls ({stats.fires} fired), "
              f"{stats.admitted} admitted, "
              f"task outcomes {stats.task_outcomes}, {stats.deliveries} notices delivered, "
              f"loop restarts {stats.restarts or 'none'}")


def _first_error(group: BaseExceptionGroup) -> BaseException:
    """The first watchkeeper error in a task group's exception group (else the group)."""
    for exc in group.exceptions:
        if isinstance(exc, BaseExceptionGroup):
            exc = _first_error(exc)
        if isinstance(exc, WatchkeeperError | SpecError):
            return exc
    return group


async def _stop_on_signal(supervisor: Supervisor) -> None:
    import signal

    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for _ in signals:
            err.print("stopping...")
            supervisor.stop()
            return


@app.command("replay")
def replay_cmd(
    definitions: Annotated[Path, typer.Option(help="TOML/JSON with [[definitions]]: id + a "
                                                   "condition spec.")],
    series: Annotated[Path, typer.Option(help="CSV with header as_of,subject,value,unit,currency.")],
    from_: Annotated[str | None, typer.Option("--from", help="Start (ISO 8601 with offset); "
                                              "default: the series' first as_of.")] = None,
    to: Annotated[str | None, typer.Option(help="End (ISO 8601 with offset); default: the "
                                           "series' last as_of.")] = None,
    poll_every: Annotated[str | None, typer.Option(help="Replace every definition's poll_every "
                                                   "(seconds or ISO 8601, e.g. P1D).")] = None,
    source_name: Annotated[str, typer.Option(help="The name the series is registered under "
                                             "(definitions name it in trigger.source).")] = "series",
    source_version: Annotated[str, typer.Option(help="The series' source version.")] = "1",
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per event per line.")] = False,
) -> None:
    """Replay conditional definitions over a historical series on a virtual clock.

    Prints the timeline (polls, verdicts, fires, suppressions, tasks); stores it in
    PostgreSQL under a fresh tenant (named on stderr at the end)."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
    from watchkeeper.sources import SeriesError, SeriesSource

    settings = _settings()
    every: str | float | None = poll_every
    if poll_every is not None and poll_every.replace(".", "", 1).isdigit():
        every = float(poll_every)
    try:
        items = load_replay_definitions(definitions, min_interval=settings.min_interval_delta,
                                        poll_every=every)
    except SpecError as exc:
        raise _fail_input(exc) from exc
    try:
        source = SeriesSource.from_csv(series, name=source_name, version=source_version)
    except SeriesError as exc:
        raise _fail_input(SpecError("--series", str(exc), "fix the file (see README 'Series "
                                    "files').")) from exc
    except OSError as exc:
        raise _fail_input(SpecError("--series", f"cannot read {series}: {exc.strerror}.",
                                    "check the path.")) from exc
    span = source.span()
    if span is None and (from_ is None or to is None):
        raise _fail_input(SpecError("--series", f"{series} holds no rows.",
                                    "give a series with rows, or --from and --to."))
    start = _instant(from_, "--from") if from_ else span[0]  # type: ignore[index]
    end = _instant(to, "--to") if to else span[1]  # type: ignore[index]
    if end <= start:
        given = (f"--to {format_utc(end)} is not after --from {format_utc(start)}"
                 if from_ and to else
                 f"the window {format_utc(start)} .. {format_utc(end)} "
                 f"({'--from' if from_ else 'the series start'} .. "
                 f"{'--to' if to else 'the series end'}) is empty")
        raise _fail_input(SpecError("--to", f"{given}.", "give --from and --to around the "
                                    "instants to replay."))
    # notices go through the outbox as usual; the log channel's lines would drown the
    # timeline, so they are kept out of stderr here (the deliveries are still recorded)
    logging.getLogger("watchkeeper.notify").setLevel(logging.WARNING)
    last: dict[str, str | None] = {}

    def show(event: dict[str, Any]) -> None:
        if as_json:
            sys.stdout.write(json.dumps(event) + "\n")
            return
        key = str(event["definition"])
        changed = event["verdict"] is not None and last.get(key) != event["verdict"]
        if event["verdict"] is not None:
            last[key] = event["verdict"]
        if event["action"] == "none" and not changed:
            return
        task = f" task {event['task']}" if event["task"] is not None else ""
        verdict = event["verdict"] or "-"
        out.print(f"{event['at']}  {escape(key):<24} {verdict:<7} {event['action']:<20}{task}  "
                  f"[dim]{escape(str(event['reason']))}[/]", highlight=False, soft_wrap=True)

    with Progress(TextColumn("replay"), BarColumn(), TextColumn("{task.description}"),
                  TimeElapsedColumn(), console=err, transient=True) as progress:
        bar = progress.add_task(format_utc(start), total=max((end - start).total_seconds(), 1))

        def moved(at: datetime) -> None:
            progress.update(bar, completed=(at - start).total_seconds(),
                            description=format_utc(at)[:10])

        async def run(db: Database, settings: Settings) -> Any:
            try:
                return await replay(db, items, source, start=start, end=end,
                                    home=settings.home, on_event=show, on_progress=moved)
            except SpecError as exc:
                raise _fail_input(exc) from exc

        summary = _with_db(run)
    actions = ", ".join(f"{k} {v}" for k, v in sorted(summary.actions.items()))
    err.print(f"replayed {format_utc(summary.start)} .. {format_utc(summary.end)}: "
              f"{summary.polls} polls ({actions}); tasks {summary.tasks or 'none'}; "
              f"stored under tenant {summary.tenant_id}")


@app.command("tick")
def tick_cmd(
    work: Annotated[bool, typer.Option(help="Also run due tasks and send due notices.")] = True,
    agent: Annotated[list[str], typer.Option(help="NAME=COMMAND: a command agent.")] = [],  # noqa: B006
    sources: Annotated[str | None, typer.Option(help="module:attr with condition sources.")] = None,
    series: Annotated[list[str], typer.Option(help="NAME[@VERSION]=CSV: a series source.")] = [],  # noqa: B006
) -> None:
    """One tick (and one pass of the condition poller), for hosts that drive watchkeeper
    from an external cron."""
    catalog = _catalog(agent)
    found = _sources(sources, series)

    async def run(db: Database, settings: Settings) -> dict[str, Any]:
        clock = SystemClock()
        report = await tick(db, clock, actor="cli-tick")
        polls: dict[str, int] = {}
        while True:
            polled = await poll_once(db, clock, found, actor="cli-tick")
            for event in polled.events:
                polls[event.action] = polls.get(event.action, 0) + 1
            if polled.claimed < 200:
                break
        done: dict[str, int] = {}
        sent: dict[str, int] = {}
        if work:
            name = f"cli-tick-{socket.gethostname()}-{os.getpid()}"
            worker = Worker(db, clock, catalog, worker_id=name,
                            artifact_root=settings.home / "artifacts",
                            lease_seconds=settings.lease_seconds)
            while (outcome := await worker.run_once()) is not None:
                done[outcome.status] = done.get(outcome.status, 0) + 1
            store = PgDeliveryStore(db, clock)
            config = SupervisorConfig(home=settings.home, **_outbox_config(settings))
            channels = default_channels(settings.home, store, clock,
                                        webhook_timeout=config.webhook_timeout)
            dispatcher = make_dispatcher(config, store, channels, clock, name)
            try:
                while (stats := await dispatcher.dispatch_once()).claimed:
                    for kind in ("delivered", "retrying", "dead", "suppressed", "deferred"):
                        sent[kind] = sent.get(kind, 0) + getattr(stats, kind)
            finally:
                await close_channels(channels)
        return {"decisions": dict(report.decisions), "ranges": report.ranges,
                "fenced_out": report.fenced_out, "polls": polls, "tasks": done,
                "deliveries": {k: v for k, v in sent.items() if v}}
    _json(_with_db(run))


@webhooks_app.command("add")
def webhooks_add(tenant: str, name: str, url: str) -> None:
    """Add an endpoint; prints its signing secret once (whsec_...)."""
    async def run(db: Database, _: Settings) -> str:
        return await webhooks.add_endpoint(db, SystemClock(), tenant, name, url)
    secret = _with_db(run)
    out.print(f"webhook {tenant}/{name} -> {url}; signing secret (shown once):")
    sys.stdout.write(secret + "\n")


@webhooks_app.command("rotate")
def webhooks_rotate(tenant: str, name: str,
                    overlap: Annotated[float, typer.Option(
                        min=0, max=720, help="Hours the old secret keeps signing (0-720).")] = 24.0,
                    ) -> None:
    """Add a new secret; the old one signs too until the overlap ends."""
    async def run(db: Database, _: Settings) -> str:
        return await webhooks.rotate_secret(db, SystemClock(), tenant, name,
                                            overlap=timedelta(hours=overlap))
    secret = _with_db(run)
    out.print(f"new signing secret for {tenant}/{name} (shown once); the old one expires in "
              f"{overlap:g} h:")
    sys.stdout.write(secret + "\n")


@webhooks_app.command("list")
def webhooks_list(tenant: Annotated[str | None, typer.Option()] = None) -> None:
    """Endpoints and how many secrets sign for each."""
    async def run(db: Database, _: Settings) -> list[dict[str, Any]]:
        return [dict(r) for r in await db.fetch("webhook_endpoints_list", tenant,
                                                datetime.now(UTC))]
    for r in _with_db(run):
        out.print(f"{r['tenant_id']}/{r['name']}: {r['url']} ({r['active_secrets']} active "
                  "secret(s))")


@webhooks_app.command("remove")
def webhooks_remove(tenant: str, name: str,
                    force: Annotated[bool, typer.Option(
                        help="Remove it even if definitions still deliver to it.")] = False,
                    ) -> None:
    """Remove an endpoint and its secrets (refused while a definition delivers to it)."""
    async def run(db: Database, _: Settings) -> None:
        await webhooks.remove_endpoint(db, tenant, name, force=force)
    _with_db(run)
    out.print(f"removed {tenant}/{name}")


@prefs_app.command("set")
def prefs_set(
    tenant: str, user: str,
    channels: Annotated[str | None, typer.Option(
        help="Comma-separated enabled channels; 'none' mutes every channel "
             "(default: all).")] = None,
    min_importance: Annotated[str, typer.Option(help="low, normal or high.")] = "low",
    quiet: Annotated[str | None, typer.Option(help="Quiet hours HH:MM-HH:MM in the user's "
                                                   "zone (default: none).")] = None,
) -> None:
    """Set a user's notification preferences, replacing all of them.

    Options left out go back to their defaults. Read at every delivery; notices held
    back by the old quiet hours are re-evaluated at once.
    """
    enabled: list[str] | None = None
    if channels is not None and channels.strip() not in ("", "all"):
        enabled = [] if channels.strip() == "none" else [
            c.strip() for c in channels.split(",") if c.strip()]
    try:
        prefs = webhooks.PreferencesInput(
            channels=enabled,
            min_importance=Importance(min_importance), quiet=webhooks.parse_quiet(quiet))
    except ValueError as exc:
        raise _fail_input(exc if isinstance(exc, SpecError) else SpecError(
            "--min-importance", f"{min_importance!r} is not low, normal or high.",
            "e.g. --min-importance high")) from exc

    async def run(db: Database, _: Settings) -> None:
        await webhooks.set_preferences(db, SystemClock(), tenant, user, prefs)
    _with_db(run)
    out.print(f"preferences of {tenant}/{user} saved")


@prefs_app.command("show")
def prefs_show(tenant: str, user: str,
               as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """A user's notification preferences."""
    async def run(db: Database, _: Settings) -> Any:
        return await webhooks.get_preferences(db, tenant, user)
    row = _with_db(run)
    if as_json:
        _json(row)
        return
    if row is None:
        out.print(f"{tenant}/{user}: no preferences (every notice is delivered)")
        return
    quiet = (f"{row['quiet_start']:%H:%M}-{row['quiet_end']:%H:%M} {row['zone']}"
             if row["quiet_start"] else "none")
    channels = "all" if row["channels"] is None else ", ".join(row["channels"]) or "none (muted)"
    out.print(f"{tenant}/{user}: channels {channels}, minimum importance "
              f"{row['min_importance']}, quiet hours {quiet}")


@app.command("deliveries")
def deliveries_cmd(
    tenant: Annotated[str | None, typer.Option()] = None,
    status: Annotated[str | None, typer.Option(help="pending, delivering, delivered, "
                                                    "retrying, dead or suppressed.")] = None,
    task: Annotated[int | None, typer.Option()] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000)] = 50,
    attempts: Annotated[bool, typer.Option(help="Also list each delivery's attempts.")] = False,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """List deliveries (newest first) with their status, attempts and last response."""
    if status is not None and status not in DELIVERY_STATUSES:
        raise _fail_input(SpecError("--status", f"{status!r} is not a delivery status.",
                                    f"use one of {', '.join(DELIVERY_STATUSES)}."))

    async def run(db: Database, _: Settings) -> list[dict[str, Any]]:
        rows = [dict(r) for r in await db.fetch("deliveries_list", tenant, status, task, limit)]
        if attempts:
            for row in rows:
                row["attempt_log"] = [dict(a) for a in await db.fetch(
                    "delivery_attempts_list", row["tenant_id"], row["delivery_id"])]
        return rows
    rows = _with_db(run)
    if as_json:
        _json(rows)
        return
    if not rows:
        err.print("no deliveries match")
    for r in rows:
        state = f"{r['status']} after {r['attempts']} attempt(s)" + (
            f", redelivered {r['redeliveries']}x" if r["redeliveries"] else "")
        if r["status"] == "delivered":
            state += f" at {_utc_text(r['delivered_at'])}: {r['response'] or ''}"
        elif r["status"] in ("pending", "retrying"):
            state += f"; next attempt {_utc_text(r['next_attempt_at'])}"
        if r["status"] != "delivered" and (r["last_error"] or r["status_reason"]):
            state += f"; {r['last_error'] or r['status_reason']}"
        out.print(f"{r['delivery_id']}  {r['tenant_id']} task {r['task_id']} "
                  f"{r['channel']}:{r['destination'] or '-'}  {state}", soft_wrap=True)
        for a in r.get("attempt_log", []):
            number = f"#{a['attempt']}" if a["outcome"] not in ("deferred", "suppressed") else "--"
            code = a["response_status"]
            detail = a["detail"] if code is None or a["detail"].startswith(str(code)) \
                else f"HTTP {code}: {a['detail']}"
            out.print(f"    {number:>3} {_utc_text(a['finished_at'])} {a['outcome']:<10} "
                      f"{detail[:160]}", soft_wrap=True)


def _utc_text(value: datetime | None) -> str:
    return "-" if value is None else format_utc(value)


@app.command("redeliver")
def redeliver_cmd(delivery_id: str, tenant: Annotated[str, typer.Option()]) -> None:
    """Re-queue a dead, delivered or suppressed notice under the same delivery id."""
    async def run(db: Database, _: Settings) -> None:
        await webhooks.redeliver(db, SystemClock(), tenant, delivery_id, "operator")
    _with_db(run)
    out.print(f"{delivery_id} re-queued")


@app.command("receiver")
def receiver_cmd(
    secret: Annotated[list[str], typer.Option(
        help="Accepted signing secret (whsec_...); repeat the option to accept several.")],
    port: Annotated[int, typer.Option(min=1, max=65535)] = 8099,
) -> None:
    """A local webhook receiver: verifies signatures, prints each notice once.

    To try a webhook endpoint: watchkeeper webhooks add T hook http://127.0.0.1:8099/
    """
    from watchkeeper.outbox import Receiver, serve

    for value in secret:
        try:
            webhooks.check_secret(value)
        except SpecError as exc:
            raise _fail_input(exc) from exc
    receiver = Receiver(tuple(secret))

    async def main() -> None:
        async with serve(receiver, port=port) as url:
            err.print(f"listening on {url} (any path); Ctrl-C to stop")
            printed: set[str] = set()
            answered: dict[str, int] = {}
            rejected = 0
            while True:
                await anyio.sleep(0.5)
                for msg_id, record in list(receiver.seen.items()):
                    if record.payload is not None and msg_id not in printed:
                        printed.add(msg_id)
                        _json(record.payload)
                    elif record.answered_ok > answered.get(msg_id, 1) and msg_id in printed:
                        err.print(f"webhook-id {msg_id} arrived again (request "
                                  f"{record.requests}): acknowledged, not processed twice")
                    answered[msg_id] = max(record.answered_ok, 1)
                if receiver.rejected > rejected:
                    err.print(f"[red]rejected[/] {receiver.rejected - rejected} request(s) "
                              f"with 401: {receiver.last_rejection}")
                    rejected = receiver.rejected

    try:
        anyio.run(main)
    except KeyboardInterrupt:
        pass
    except (OSError, OverflowError) as exc:
        raise _fail_input(SpecError("--port", f"cannot listen on 127.0.0.1:{port} ({exc}).",
                                    "choose a free port, e.g. --port 8199.")) from exc


@db_app.command("migrate")
def db_migrate() -> None:
    """Apply pending migrations (every command also does this on start)."""
    async def run(db: Database, _: Settings) -> list[int]:
        return await db.migrate()
    applied = _with_db(run)
    out.print("schema is current" if not applied else f"applied {applied}")


@app.command("demo")
def demo_cmd(
    interval: Annotated[float, typer.Option(min=2.0, help="Demo interval, seconds.")] = 8.0,
    grace: Annotated[float, typer.Option(min=0.5, help="late_grace, seconds.")] = 2.0,
) -> None:
    """The ETF Agent acceptance in real time (about a minute); see the README.

    Three slots, three reports delivered by webhook, file and log; a restart after the
    fourth slot's grace admits no catch-up task.
    """
    from ._demo import run_demo

    async def run(db: Database, settings: Settings) -> bool:
        return await run_demo(db, settings, out, interval=timedelta(seconds=interval),
                              grace=timedelta(seconds=grace))
    if not _with_db(run):
        raise typer.Exit(1)

