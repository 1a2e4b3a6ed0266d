"""The outbox's commands: webhook endpoints, preferences, deliveries, redelivery, and a
local receiver to try an endpoint."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Annotated, Any

import typer

from watchkeeper.runtime import usecases as uc
from watchkeeper.triggers import SpecError

from ._app import (
    MAX_ID,
    app,
    collect,
    emit_json,
    err,
    fail_input,
    options,
    out,
    prefs_app,
    secrets_app,
    webhooks_app,
    with_db,
    write,
)
from ._render import utc_text

if TYPE_CHECKING:
    from watchkeeper.runtime import Database, Settings

__all__: list[str] = []


@webhooks_app.command("add")
def webhooks_add(tenant: str, name: str, url: str) -> None:
    """Add an endpoint; prints its signing secret once (whsec_...)."""
    from watchkeeper.runtime import SystemClock

    async def run(db: Database, _: Settings) -> str:
        return await uc.add_endpoint(db, SystemClock(), tenant, name, url)
    secret = with_db(run)
    err.print(f"webhook {tenant}/{name} -> {url}; signing secret (shown once, on stdout):")
    write(secret + "\n")


@webhooks_app.command("rotate")
def webhooks_rotate(tenant: str, name: str,
                    overlap: Annotated[float, typer.Option(
                        min=0, max=720, help="Hours the old secret keeps signing (0-720).")] = 24.0,
                    ) -> None:
    """Add a new secret; the old one signs too until the overlap ends."""
    async def run(db: Database, _: Settings) -> str:
        return await uc.rotate_secret(db, await uc.database_clock(db), tenant, name,
                                      overlap=timedelta(hours=overlap))
    secret = with_db(run)
    err.print(f"new signing secret for {tenant}/{name} (shown once, on stdout); the old one expires in "
              f"{overlap:g} h:")
    write(secret + "\n")


@secrets_app.command("rotate-key")
def secrets_rotate_key() -> None:
    """Re-seal every webhook signing secret under a new key (the data keys are re-wrapped
    in one transaction). With the key file (WATCHKEEPER_SECRET_KEY unset), the new key
    replaces it, and running processes pick it up at the next secret they open; with
    WATCHKEEPER_SECRET_KEY, the new key is printed once on stdout: set it there and
    restart the processes (until then they cannot sign; their notices are retried)."""
    async def run(db: Database, _: Settings) -> uc.RotatedKey:
        return await uc.rotate_secret_key(db)
    done = with_db(run)
    err.print(f"{done.secrets} webhook secret(s) re-sealed: key {done.old_key_id} -> "
              f"{done.new_key_id}")
    if done.key is None:
        err.print(f"the new key replaced the key file {done.path}")
        return
    err.print("the new key (shown once, on stdout): set WATCHKEEPER_SECRET_KEY to it, then "
              "restart every watchkeeper process")
    write(done.key + "\n")


@webhooks_app.command("list")
def webhooks_list(tenant: Annotated[str | None, typer.Option()] = None,
                  as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Endpoints and how many secrets sign for each (never the secrets)."""
    async def run(db: Database, _: Settings) -> list[dict[str, Any]]:
        return await uc.list_endpoints(db, datetime.now(UTC), tenant)
    rows = with_db(run)
    if as_json:
        emit_json(rows)
        return
    if not rows:
        err.print("no webhook endpoints" + (f" in tenant {tenant}" if tenant else ""))
    for r in rows:
        out.print(f"{r['tenant_id']}/{r['name']}: {r['url']} ({r['active_secrets']} active "
                  "secret(s))")


@webhooks_app.command("remove")
def webhooks_remove(tenant: str, name: str,
                    force: Annotated[bool, typer.Option(
                        help="Remove it even if definitions still deliver to it.")] = False,
                    ) -> None:
    """Remove an endpoint and its secrets (refused while a definition delivers to it)."""
    async def run(db: Database, _: Settings) -> None:
        await uc.remove_endpoint(db, tenant, name, force=force)
    with_db(run)
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
    try:
        prefs = uc.PreferencesInput(
            channels=uc.parse_channels(channels),
            min_importance=uc.parse_importance(min_importance, "--min-importance"),
            quiet=uc.parse_quiet(quiet))
    except SpecError as exc:
        raise fail_input(exc) from exc

    async def run(db: Database, _: Settings) -> None:
        await uc.set_preferences(db, await uc.database_clock(db), tenant, user, prefs)
    with_db(run)
    out.print(f"preferences of {tenant}/{user} saved")


@prefs_app.command("show")
def prefs_show(tenant: str, user: str,
               as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """A user's notification preferences."""
    async def run(db: Database, _: Settings) -> Any:
        return await uc.get_preferences(db, tenant, user)
    row = with_db(run)
    if as_json:
        emit_json(row)
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
    task: Annotated[int | None, typer.Option(min=1, max=MAX_ID)] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000)] = 50,
    attempts: Annotated[bool, typer.Option(help="Also list each delivery's attempts.")] = False,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """List deliveries (newest first) with their status, attempts and last response."""
    async def run(db: Database, _: Settings) -> list[dict[str, Any]]:
        with options(status="--status", limit="--limit"):
            return await uc.list_deliveries(db, tenant_id=tenant, status=status, task_id=task,
                                            limit=limit, attempts=attempts)
    rows = with_db(run)
    if as_json:
        emit_json(rows)
        return
    if not rows:
        err.print("no deliveries match")
    for r in rows:
        out.print(_delivery_line(r), soft_wrap=True)
        for a in r.get("attempt_log", []):
            number = f"#{a['attempt']}" if a["outcome"] not in ("deferred", "suppressed") else "--"
            code = a["response_status"]
            detail = a["detail"] if code is None or a["detail"].startswith(str(code)) \
                else f"HTTP {code}: {a['detail']}"
            out.print(f"    {number:>3} {utc_text(a['finished_at'])} {a['outcome']:<10} "
                      f"{detail[:160]}", soft_wrap=True)


def _delivery_line(r: dict[str, Any]) -> str:
    state = f"{r['status']} after {r['attempts']} attempt(s)" + (
        f", redelivered {r['redeliveries']}x" if r["redeliveries"] else "")
    if r["status"] == "delivered":
        state += f" at {utc_text(r['delivered_at'])}: {r['response'] or ''}"
    elif r["status"] in ("pending", "retrying"):
        state += f"; next attempt {utc_text(r['next_attempt_at'])}"
    if r["status"] != "delivered" and (r["last_error"] or r["status_reason"]):
        state += f"; {r['last_error'] or r['status_reason']}"
    subject = (f"task {r['task_id']}" if r.get("event", "report.committed") == "report.committed"
               else f"{r['event']} {r['definition_id']} {r['slot']}")
    return (f"{r['delivery_id']}  {r['tenant_id']} {subject} "
            f"{r['channel']}:{r['destination'] or '-'}  {state}")


@app.command("redeliver")
def redeliver_cmd(delivery_id: str, tenant: Annotated[str, typer.Option()]) -> None:
    """Re-queue a dead, delivered or suppressed notice under the same delivery id."""
    async def run(db: Database, _: Settings) -> None:
        await uc.redeliver(db, await uc.database_clock(db), tenant, delivery_id, "operator")
    with_db(run)
    out.print(f"{delivery_id} re-queued")


@app.command("receiver")
def receiver_cmd(
    secret: Annotated[list[str], typer.Option(
        help="Accepted signing secret (whsec_...); repeat the option to accept several.")],
    port: Annotated[int, typer.Option(min=1, max=65535)] = 8099,
) -> None:
    """A local webhook receiver: verifies signatures, prints each notice once (one JSON
    object per line on stdout).

    To try a webhook endpoint: watchkeeper webhooks add T hook http://127.0.0.1:8099/
    """
    import anyio

    from watchkeeper.outbox import Receiver, serve

    collect()  # a server: runs until stopped
    for value in secret:
        try:
            uc.check_secret(value)
        except SpecError as exc:
            raise fail_input(exc) from exc
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
                        emit_json(record.payload, line=True)
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
        raise fail_input(SpecError("--port", f"cannot listen on 127.0.0.1:{port} ({exc}).",
                                   "choose a free port, e.g. --port 8199.")) from exc
