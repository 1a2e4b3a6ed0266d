"""Commands on definitions: preview, propose, confirm, pause, resume, cancel, trigger,
review and register."""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from watchkeeper.runtime import usecases as uc
from watchkeeper.triggers import SpecError, SpecProblem, format_utc

from ._app import (
    INSTANT_HELP,
    MAX_REVISION,
    app,
    emit_json,
    err,
    fail_input,
    fail_json,
    out,
    parse_instant,
    settings,
    with_db,
)
from ._render import preview_table

if TYPE_CHECKING:
    from watchkeeper.runtime import Database, Settings

__all__: list[str] = []


_PREVIEW_OPTIONS = {"trigger.expr": "--cron", "trigger.zone": "--tz", "trigger.every": "--every",
                    "trigger.anchor": "--anchor", "trigger.at": "--at",
                    "trigger.dst_gap": "--dst-gap"}
"""The spec field each of ``preview``'s schedule options fills: what is said of the
field (errors, their fixes, warnings) is said of the option."""


def _option_named(text: str) -> str:
    """``text`` with each spec field :data:`_PREVIEW_OPTIONS` names written as its option."""
    for field, option in _PREVIEW_OPTIONS.items():
        text = text.replace(field, option)
    return text


def _as_options(exc: SpecError, schedule: str) -> SpecError:
    """``exc`` about a schedule given by options, said of the options: each field, and
    each spec field its words mention, is the option that fills it; ``trigger`` itself
    (the schedule as a whole: it has no occurrence) is ``schedule`` (``--cron``...)."""
    return SpecError.of(
        SpecProblem(schedule if p.field in ("trigger", "trigger.type") else
                    _option_named(p.field), _option_named(p.problem), _option_named(p.fix))
        for p in exc.problems)


def _every_value(text: str) -> str | float:
    """``--every``: a finite number of seconds, else the text (an ISO 8601 duration,
    which the spec's field checks)."""
    try:
        seconds = float(text)
    except ValueError:
        return text
    return seconds if math.isfinite(seconds) else text


@app.command("preview")
def preview_cmd(
    spec_file: Annotated[Path | None, typer.Argument(help="A spec file (TOML or JSON).")] = None,
    cron: Annotated[str | None, typer.Option(help="5-field cron expression.")] = None,
    tz: Annotated[str | None, typer.Option("--tz", "--zone",
                                           help="IANA zone (with --cron or --at).")] = None,
    every: Annotated[str | None, typer.Option(
        help="Interval: seconds (3600) or an ISO 8601 duration (PT1H).")] = None,
    anchor: Annotated[str | None, typer.Option(
        help="Interval anchor, ISO 8601 with offset (with --every).")] = None,
    at: Annotated[str | None, typer.Option(help="One local time (ISO 8601) in --tz.")] = None,
    after: Annotated[str | None, typer.Option(help="List occurrences strictly after this "
                                                    f"instant ({INSTANT_HELP}; default: now).")] = None,
    count: Annotated[int, typer.Option(min=1, max=10_000)] = 10,
    dst_gap: Annotated[str | None, typer.Option(
        help="skip (the default) or run_after (with --cron).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list.")] = False,
) -> None:
    """List the next occurrences: UTC instant, local time, slot, and a DST note."""
    from watchkeeper.triggers import SpecProblems, parse_spec, preview

    config = settings()
    found = SpecProblems()  # every problem of the command line at once
    schedules = {"SPEC_FILE": spec_file, "--cron": cron, "--every": every, "--at": at}
    chosen = [name for name, value in schedules.items() if value is not None]
    if len(chosen) != 1:
        found.add("preview", "give exactly one of SPEC_FILE, --cron, --every, --at"
                  + (f" (given: {', '.join(chosen)})." if chosen else "."),
                  "e.g. watchkeeper preview --cron '0 9 * * 1' --tz Europe/London")
    schedule = chosen[0] if len(chosen) == 1 else None
    for option, value, readers in (("--tz", tz, ("--cron", "--at")),
                                   ("--anchor", anchor, ("--every",)),
                                   ("--dst-gap", dst_gap, ("--cron",))):
        if value is not None and schedule is not None and schedule not in readers:
            found.add(option, f"is not read with {schedule} (a spec file carries its own "
                      "schedule)." if schedule == "SPEC_FILE" else
                      f"is not read with {schedule}.",
                      f"use {option} with {' or '.join(readers)}, or leave it out.")
    start = datetime.now(UTC)
    if after is not None:
        with found.check():
            start = parse_instant(after, "--after")
    spec = None
    if schedule == "SPEC_FILE":
        assert spec_file is not None
        with found.check():
            spec = uc.load_spec(spec_file, min_interval=config.min_interval_delta)
    elif schedule is not None:
        trigger: dict[str, Any]
        if cron is not None:
            trigger = {"type": "cron", "expr": cron, "zone": tz,
                       "dst_gap": "skip" if dst_gap is None else dst_gap}
        elif every is not None:
            trigger = {"type": "interval", "every": _every_value(every)}
            if anchor is not None:
                trigger["anchor"] = anchor
        else:
            trigger = {"type": "at", "at": at, "zone": "UTC" if tz is None else tz}
        try:
            spec = parse_spec({"version": 1, "trigger": trigger},
                              min_interval=config.min_interval_delta)
        except SpecError as exc:
            found.extend(_as_options(exc, schedule))
    try:
        found.raise_if_any()
        assert spec is not None
        try:
            items = preview(spec.bounded_calendar(), start, count)
        except SpecError as exc:
            if schedule == "SPEC_FILE":
                raise
            raise _as_options(exc, schedule or "") from exc
    except SpecError as exc:
        raise (fail_json(exc) if as_json else fail_input(exc)) from exc
    for warning in spec.warnings:  # stderr: --json stays a list of occurrences
        said = str(warning) if schedule == "SPEC_FILE" else _option_named(str(warning))
        err.print(f"note: {said}", markup=False, highlight=False)
    if as_json:
        emit_json([item.to_json() for item in items])
    else:
        out.print(preview_table(items, f"next {len(items)} occurrence(s) after {format_utc(start)}"))


@app.command("propose")
def propose_cmd(
    spec_file: Path,
    tenant: Annotated[str, typer.Option(help="Tenant of the definition.")],
    definition: Annotated[str, typer.Option("--id", help="Definition id.")],
    owner: Annotated[str, typer.Option(help="Owner user id (a real user).")],
    based_on: Annotated[int | None, typer.Option(min=1, max=MAX_REVISION,
                                                 help="Revision this edit starts from.")] = None,
    by: Annotated[str, typer.Option(help="The proposing agent principal.")] = "agent:cli",
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Record a proposed revision; the owner must confirm it with the printed hash.
    ``--json`` prints the HTTP API's answer (summary, next, warnings, confirm, ...)."""
    config = settings()
    try:
        data = uc.load_spec_data(spec_file)
    except SpecError as exc:
        raise (fail_json(exc) if as_json else fail_input(exc)) from exc

    async def run(db: Database, _: Settings) -> uc.ProposalView:
        # every problem at once: the id, the owner, the spec and its webhook destinations
        checked = await uc.checked_proposal(db, tenant, definition, owner, data,
                                            config.min_interval_delta)
        proposal = await uc.propose(db, await uc.database_clock(db), tenant_id=tenant,
                                    definition_id=definition, owner_user_id=owner,
                                    spec=checked, proposed_by=by, based_on=based_on)
        return await uc.proposal_view(db, proposal, checked, datetime.now(UTC))
    view = with_db(run, json_errors=as_json)
    if as_json:  # the HTTP API's answer (ProposalOut): the same names and the same values
        emit_json({**view.to_json(), "confirm": view.confirm_at()})
        return
    proposal, spec, items = view.proposal, view.spec, view.next
    out.print(f"{tenant}/{definition} revision {proposal.revision}: what the owner is asked to "
              "confirm (the hash covers all of it):")
    emit_json(spec.effective())
    for warning in view.warnings:
        out.print(f"note: {warning}", markup=False, highlight=False)
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
    revision: Annotated[int, typer.Option(min=1, max=MAX_REVISION, help="The proposed revision.")],
    spec_hash: Annotated[str, typer.Option(help="The spec_hash you were shown.")],
    token: Annotated[str | None, typer.Option(help="Owner's token (or WATCHKEEPER_TOKEN).")] = None,
) -> None:
    """Confirm a proposed revision as its owner; it becomes the effective one."""
    async def run(db: Database, config: Settings) -> uc.Confirmation:
        me = await uc.authenticate(db, token or config.token)
        return await uc.confirm(db, await uc.database_clock(db), me, definition_id=definition,
                                revision=revision, spec_hash=spec_hash)
    done = with_db(run)
    out.print(f"revision {done.revision} of {definition} is effective since "
              f"{format_utc(done.effective_since)} (fence {done.fence}); first occurrence "
              f"{format_utc(done.next_due_at) if done.next_due_at else '-'}")


_VERBS = {"pause": ("paused", "Suppress new occurrences; a running task goes on."),
          "resume": ("resumed", "Resume; the paused span is recorded once and not replayed."),
          "cancel": ("cancelled", "End the definition (--running also stops its active task).")}


def _actor_command(verb: str) -> Callable[..., None]:
    def command(
        definition: str,
        tenant: Annotated[str | None, typer.Option(help="Tenant (the operator's access).")] = None,
        token: Annotated[str | None, typer.Option(help="Owner's token instead of operator.")] = None,
        running: Annotated[bool, typer.Option(help="cancel: also stop the running task.")] = False,
    ) -> None:
        async def run(db: Database, config: Settings) -> int:
            actor, tenant_id = await uc.resolve_actor(db, token=token, tenant_id=tenant,
                                                      default_token=config.token)
            clock = await uc.database_clock(db)
            if verb == "pause":
                return await uc.pause(db, clock, actor, tenant_id, definition)
            if verb == "resume":
                return await uc.resume(db, clock, actor, tenant_id, definition)
            return await uc.cancel(db, clock, actor, tenant_id, definition, running=running)
        fence = with_db(run)
        out.print(f"{definition}: {_VERBS[verb][0]} (fence {fence})")
    command.__doc__ = _VERBS[verb][1]
    return command


for _verb in _VERBS:
    app.command(_verb)(_actor_command(_verb))


def _binding(text: str | None) -> tuple[str, str] | None:
    if text is None:
        return None
    tenant_id, sep, binding_id = text.partition("/")
    if not sep or not tenant_id or not binding_id:
        raise fail_input(SpecError("--binding", f"{text!r} is not TENANT/BINDING.",
                                   "e.g. --binding org_acme/acme"))
    return tenant_id, binding_id


@app.command("trigger")
def trigger_cmd(
    definition: str,
    tenant: Annotated[str | None, typer.Option(help="Tenant (operator access).")] = None,
    token: Annotated[str | None, typer.Option(help="Owner's token.")] = None,
    binding: Annotated[str | None, typer.Option(help="TENANT/BINDING of a registered "
                                                     "definition.")] = None,
) -> None:
    """Claim a manual occurrence now (a key distinct from any scheduled one)."""
    target = _binding(binding)

    async def run(db: Database, config: Settings) -> uc.TriggerResult:
        actor, tenant_id = await uc.resolve_actor(db, token=token, tenant_id=tenant,
                                                  default_token=config.token)
        return await uc.trigger_now(db, await uc.database_clock(db), actor, tenant_id, definition,
                                    binding=target)
    result = with_db(run)
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
    target = _binding(binding)

    async def run(db: Database, config: Settings) -> str:
        actor, tenant_id = await uc.resolve_actor(db, token=token, tenant_id=tenant,
                                                  default_token=config.token)
        if target is None:
            return await uc.review(db, await uc.database_clock(db), actor, tenant_id, definition, slot,
                                   approve=approve)
        return await uc.review(db, await uc.database_clock(db), actor, target[0], definition, slot,
                               approve=approve, binding_id=target[1],
                               definition_tenant_id=tenant_id)
    out.print(f"{definition} {slot}: {with_db(run)}")


@app.command("register")
def register_cmd(file: Path) -> None:
    """Register (or replace) operator definitions with static bindings from a file."""
    config = settings()
    try:
        items = uc.load_registrations(file, min_interval=config.min_interval_delta)
    except SpecError as exc:
        raise fail_input(exc) from exc

    from watchkeeper.runtime import register

    async def run(db: Database, _: Settings) -> list[tuple[str, int]]:
        return [(d.id, await register(db, await uc.database_clock(db), d)) for d in items]
    for definition_id, revision in with_db(run):
        out.print(f"registered {definition_id} (revision {revision})")
