"""Read-only views and users: users add/list, status, list, show, report, history,
polls."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from watchkeeper.runtime import usecases as uc
from watchkeeper.triggers import format_utc

from ._app import INSTANT_HELP, MAX_ID, app, emit_json, err, instant, options, out, users_app, with_db, write
from ._render import definitions_table, history_table, utc_text

if TYPE_CHECKING:
    from watchkeeper.runtime import Database, Settings

__all__: list[str] = []


@users_app.command("add")
def users_add(
    tenant: str, user: str,
    zone: Annotated[str, typer.Option(help="The user's IANA zone.")] = "UTC",
    name: Annotated[str, typer.Option(help="Display name.")] = "",
    rotate: Annotated[bool, typer.Option(help="Issue a new token for an existing user.")] = False,
) -> None:
    """Create a user (and its tenant) and print its API token once."""
    from watchkeeper.runtime import SystemClock

    async def run(db: Database, _: Settings) -> str:
        return await uc.add_user(db, SystemClock(), tenant, user, display_name=name, zone=zone,
                                 rotate=rotate)
    token = with_db(run)
    err.print(f"user {tenant}/{user}; token (shown once on stdout, keep it secret):")
    write(token + "\n")


@users_app.command("list")
def users_list(tenant: Annotated[str | None, typer.Option()] = None,
               as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """List users (never their tokens)."""
    async def run(db: Database, _: Settings) -> list[dict[str, Any]]:
        return await uc.list_users(db, tenant)
    rows = with_db(run)
    if as_json:
        emit_json(rows)
        return
    for r in rows:
        out.print(f"{r['tenant_id']}/{r['user_id']}  {r['display_name']}  zone {r['zone']}")


@app.command("status")
def status_cmd(tenant: Annotated[str | None, typer.Option(help="Only this tenant's waiting "
                                                          "tasks.")] = None,
               as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Supervisors (liveness, clock offset, agents and sources they offer), tasks no
    running supervisor can take, and the outbox backlog."""
    from watchkeeper.triggers import MODEL_AGENT

    async def run(db: Database, _: Settings) -> uc.DeploymentStatus:
        return await uc.status(db, datetime.now(UTC), tenant_id=tenant)
    state = with_db(run)
    if as_json:
        emit_json(state.to_json())
        return
    if not state.supervisors:
        out.print("no supervisor has written a heartbeat to this database yet "
                  "('watchkeeper tick' runs without one)")
    for s in state.supervisors:
        offset = "" if s.clock_offset_ms is None else f", clock offset {s.clock_offset_ms:.0f} ms"
        was = "" if s.status == "lost" else f"; was {s.status}"
        shown = s.status if not s.lost else (
            f"lost (no heartbeat for {s.silent_seconds:.0f} s{was}; no stop recorded)")
        offers = ("" if s.agents is None else
                  f"; agents {', '.join(s.agents) or 'none'}, sources {', '.join(s.sources or ()) or 'none'}")
        out.print(f"{s.supervisor_id}: {shown}, last heartbeat {format_utc(s.heartbeat_at)}"
                  f"{offset}{offers}", soft_wrap=True)
    for task in state.unclaimable:
        out.print(f"[yellow]waiting[/] {task.tenant_id}/#{task.task_id} {escape(task.definition_id)} "
                  f"{task.slot}: no running supervisor offers agent {task.agent!r} (waited "
                  f"{task.waited_seconds:.0f} s; {_after_expiry(task)}); start one "
                  + ("with OPENAI_BASE_URL (and OPENAI_API_KEY) set" if task.agent == MODEL_AGENT
                     else f"with --agent {task.agent}=COMMAND"),
                  soft_wrap=True)
    counts = state.deliveries
    summary = ", ".join(f"{counts[k]} {k}" for k in uc.DELIVERY_STATUSES if counts.get(k))
    out.print(f"outbox: {summary or 'empty'}"
              + (f"; oldest due since {format_utc(state.oldest_due)}" if state.oldest_due else ""))
    if counts.get("dead"):
        out.print(f"[red]{counts['dead']} dead notice(s)[/]: watchkeeper deliveries --status dead;"
                  " fix the destination, then watchkeeper redeliver ID --tenant T")


_WHEN_EXPIRED = {"skip_expired": "expires", "review_late": "goes to review",
                 "catch_up_once": "runs late once an agent is there"}


def _after_expiry(task: uc.UnclaimableTask) -> str:
    """What happens to a waiting task: a first attempt follows its lateness policy past
    ``expires_at``; a retry or a takeover just waits for an agent."""
    if task.attempts or task.status == "running":
        return "a retry: it runs once an agent is there"
    return f"{_WHEN_EXPIRED[task.late_policy]} after {format_utc(task.expires_at)}"


@app.command("list")
def list_cmd(
    tenant: Annotated[str | None, typer.Option()] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """List definitions with their status and next due time."""
    async def run(db: Database, _: Settings) -> tuple[list[dict[str, Any]], list[Any]]:
        return (await uc.list_definitions(db, tenant),
                await uc.unclaimable_tasks(db, datetime.now(UTC), tenant_id=tenant))
    rows, waiting = with_db(run)
    by_definition: dict[tuple[str, str], list[Any]] = {}
    for task in waiting:
        by_definition.setdefault((task.tenant_id, task.definition_id), []).append(task)
    for row in rows:
        row["waiting_for_agent"] = [
            {"task_id": t.task_id, "agent": t.agent, "waited_seconds": t.waited_seconds}
            for t in by_definition.get((row["tenant_id"], row["definition_id"]), [])]
    if as_json:
        emit_json(rows)
        return
    out.print(definitions_table(rows))
    for task in waiting:
        out.print(f"{task.tenant_id}/{escape(task.definition_id)}: task #{task.task_id} waits "
                  f"{task.waited_seconds / 60:.0f} min for agent {task.agent!r} (no running "
                  "supervisor offers it)", soft_wrap=True)


@app.command("show")
def show_cmd(definition: str, tenant: Annotated[str, typer.Option()],
             as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Show a definition's revisions and its effective spec."""
    async def run(db: Database, _: Settings) -> uc.DefinitionView:
        return await uc.show_definition(db, tenant, definition)
    view = with_db(run)
    if as_json:
        emit_json(view.to_json())
        return
    row = view.definition
    out.print(f"{tenant}/{definition}: {row['status']}, fence {row['fence']}, effective revision "
              f"{row['effective_revision']}, next due {utc_text(row['next_due_at'])}")
    for r in view.revisions:
        out.print(f"  revision {r['revision']}: {r['status']} hash {r['spec_hash']} proposed by "
                  f"{r['proposed_by']} {format_utc(r['proposed_at'])}"
                  + (f", confirmed by {r['confirmed_by']}" if r["confirmed_by"] else ""))
    if row["spec"] is not None:
        emit_json(row["spec"])
    registration = row["registration"] or {}
    for binding in registration.get("bindings", []):
        out.print(f"  binding {binding['tenant_id']}/{binding['binding_id']}: owner "
                  f"{binding['owner_user_id']}, agent {binding['agent']}")
    if "resolver" in registration:
        out.print(f"  bindings resolved at tick time by {registration['resolver']}")
    if registration.get("terminal") == "run":
        out.print(f"  run terminal {registration['run']} for tenants {registration.get('tenants')}")


@app.command("report")
def report_cmd(task: Annotated[int, typer.Argument(min=1, max=MAX_ID)],
               tenant: Annotated[str, typer.Option(help="The task's tenant.")],
               as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Print a task's committed report and its receipt."""
    async def run(db: Database, _: Settings) -> dict[str, Any]:
        return await uc.report(db, tenant, task)
    row = with_db(run)
    if as_json:
        emit_json(row)
        return
    out.print(f"receipt: {'verified' if row['verified'] else 'NOT verified'} ({row['verification']}), "
              f"sha256 {row['content_sha256']}, output {row['output_ref']}, importance "
              f"{row['importance']}, finished {format_utc(row['finished_at'])}", soft_wrap=True,
              markup=False)
    if row["headline"]:
        out.print(f"headline: {row['headline']}", soft_wrap=True, markup=False)
    spent = row["usage"]
    out.print(f"took: {row['runs']} run(s) in {row['roots']} root(s)"
              + (f", model {row['model']}" if row["model"] else "")
              + f"; {spent['model_requests']} model request(s), {row['tool_calls']} tool "
              f"call(s), {spent['input_tokens']} input + {spent['output_tokens']} output "
              f"tokens, {spent['cost_usd']} USD", soft_wrap=True, markup=False)
    write(row["content_md"])


@app.command("history")
def history_cmd(
    definition: Annotated[str | None, typer.Argument()] = None,
    tenant: Annotated[str | None, typer.Option()] = None,
    user: Annotated[str | None, typer.Option()] = None,
    status: Annotated[str | None, typer.Option(help="A decision or task status.")] = None,
    since: Annotated[str | None, typer.Option(help=f"Scheduled at or after ({INSTANT_HELP}).")] = None,
    until: Annotated[str | None, typer.Option(help=f"Scheduled before ({INSTANT_HELP}).")] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000)] = 50,
    cursor: Annotated[str | None, typer.Option(help="Continue after this cursor (next_cursor "
                                                    "of the previous page).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help=(
        "Print the HTTP API's answer: {items, events, next_cursor}."))] = False,
) -> None:
    """Every occurrence with its decision, admission lateness, task, runs, report and
    delivery, newest first in pages (the table prints them oldest first)."""
    since_at = instant(since, "--since")
    until_at = instant(until, "--until")

    async def run(db: Database, _: Settings) -> uc.HistoryPage:
        with options(status="--status", limit="--limit", cursor="--cursor"):
            after = uc.decode_cursor(cursor, uc.HISTORY_CURSOR)
            return await uc.history(db, uc.HistoryQuery(
                tenant, definition, user, status, since_at, until_at, limit,
                after))  # type: ignore[arg-type]
    page = with_db(run)
    following = uc.encode_cursor(page.after)
    if as_json:
        emit_json(uc.HistoryPageOut(
            items=[{**e.row, "outcome": e.outcome, "next_step": e.next_step}
                   for e in page.entries],
            events=[e.row for e in page.events], next_cursor=following).model_dump())
        return
    out.print(history_table(page.entries, page.events, f"history {definition or ''}".strip()))
    if following:
        err.print(f"more: --cursor '{following}'")


@app.command("polls")
def polls_cmd(
    definition: Annotated[str | None, typer.Argument()] = None,
    tenant: Annotated[str, typer.Option(help="The tenant (e.g. a replay's _replay-...).")] = "",
    since: Annotated[str | None, typer.Option(help=f"Polls scheduled at or after ({INSTANT_HELP}); "
                                                   "read forwards.")] = None,
    after: Annotated[str | None, typer.Option(help="Continue after this cursor (next_after of "
                                                   "the previous page).")] = None,
    limit: Annotated[int, typer.Option(min=1, max=10000)] = 100,
    changes: Annotated[bool, typer.Option(help="Only polls whose verdict changed or that did "
                                          "something (fired, suppressed, denied, ...).")] = False,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """A condition's poll timeline: verdict, action, reason, task and what was read.

    Without --since or --after: the newest --limit polls. --changes filters before the
    limit; a full page read forwards prints the cursor to continue with (--after)."""
    from watchkeeper.triggers import SpecError

    from ._app import fail_input

    if not tenant:
        raise fail_input(SpecError("--tenant", "is required.", "give --tenant T."))
    try:
        cursor = uc.PollCursor.decode(after, "--after") if after else None
    except SpecError as exc:
        raise fail_input(exc) from exc
    query = uc.PollsQuery(tenant, definition, instant(since, "--since"),
                          cursor, limit, changes)

    async def run(db: Database, _: Settings) -> uc.PollsPage:
        with options(limit="--limit", after="--after"):
            return await uc.polls(db, query)
    page = with_db(run)
    following = page.next_after.encode() if page.next_after else None
    if as_json:
        emit_json({"polls": list(page.polls), "next_after": following})
        return
    if not page.polls:
        err.print("no polls match")
        return
    table = Table(title=f"polls {definition or tenant}", show_lines=False)
    for column in ("scheduled_for (UTC)", "definition", "verdict", "action", "task", "reason"):
        table.add_column(column)
    for row in page.polls:
        table.add_row(format_utc(row["scheduled_for"]), escape(row["definition_id"]),
                      row["verdict"] or "-", row["action"] or row["status"],
                      "" if row["task_id"] is None else f"#{row['task_id']}",
                      escape(row["reason"] or ""))
    out.print(table)
    if following:
        err.print(f"more: --after '{following}'")
