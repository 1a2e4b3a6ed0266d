"""Commands that run watchkeeper: run (the supervisor), tick, replay and its kept
tenants, demo, db migrate."""

from __future__ import annotations

import json
import logging
import signal
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from watchkeeper.runtime import WatchkeeperError
from watchkeeper.runtime import usecases as uc
from watchkeeper.triggers import SpecError, format_utc

from ._app import (
    INSTANT_HELP,
    app,
    db_app,
    emit_json,
    err,
    fail_input,
    fail_json,
    first_leaf,
    instant,
    out,
    replays_app,
    series_error,
    settings,
    with_db,
    write,
)
from ._loading import agents_from, schedules_from, sources_from

if TYPE_CHECKING:
    import anyio

    from watchkeeper.runtime import Database, Settings, Supervisor, SupervisorStatistics

__all__: list[str] = []

_AGENT_HELP = "NAME=COMMAND: a command agent."
_AGENTS_HELP = "module:attr with a dict of name -> Python agent (async run(ctx))."
_SOURCES_HELP = "module:attr with condition sources."
_SERIES_HELP = "NAME[@VERSION]=CSV: a series source."


@app.command("run")
def run_cmd(
    workers: Annotated[int | None, typer.Option(min=1, max=64)] = None,
    schedules: Annotated[str | None, typer.Option(help="module:attr with operator ScheduleDefs.")] = None,
    agent: Annotated[list[str], typer.Option(help=_AGENT_HELP)] = [],  # noqa: B006
    agents: Annotated[str | None, typer.Option(help=_AGENTS_HELP)] = None,
    sources: Annotated[str | None, typer.Option(help=_SOURCES_HELP)] = None,
    series: Annotated[list[str], typer.Option(help=_SERIES_HELP)] = [],  # noqa: B006
) -> None:
    """Run the supervisor until SIGTERM or SIGINT, which drain it: nothing new is claimed,
    runs in flight get WATCHKEEPER_DRAIN_SECONDS to finish, then the rest are interrupted
    and their tasks released for another supervisor; a second signal interrupts at once."""
    import anyio

    from watchkeeper.runtime import Supervisor, SystemClock

    registry, catalog = schedules_from(schedules), agents_from(agent, agents)
    found = sources_from(sources, series)

    async def run(db: Database, config: Settings) -> tuple[SupervisorStatistics, Supervisor]:
        supervisor = Supervisor(db, SystemClock(), uc.supervisor_config(config, workers=workers),
                                registry=registry, agents=catalog, sources=found)
        err.print(f"supervisor {supervisor.config.supervisor_id} running "
                  f"({supervisor.config.workers} workers); Ctrl-C or SIGTERM to stop")
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(_stop_on_signal, supervisor)
                try:
                    await supervisor.run()
                finally:
                    tg.cancel_scope.cancel()
        except BaseExceptionGroup as group:
            raise _first_error(group) from group
        return supervisor.statistics(), supervisor
    logging.getLogger("watchkeeper").setLevel(logging.INFO)
    stats, supervisor = with_db(run, wait=True)
    report = supervisor.drain_report()
    if report is not None:
        err.print(report.summary(), highlight=False)
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
    """Each SIGTERM / SIGINT takes the supervisor one step further in its shutdown."""
    import anyio

    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for _ in signals:
            err.print(shutdown_note(supervisor), highlight=False)


def shutdown_note(supervisor: Supervisor) -> str:
    """Move ``supervisor`` one step on in its shutdown (:meth:`Supervisor.drain`) and
    say what that does (``run`` and ``serve`` print it on each signal)."""
    from watchkeeper.runtime import Shutdown

    phase = supervisor.drain()
    if phase is Shutdown.DRAINING:
        return (f"draining: claiming nothing new; runs in flight have "
                f"{supervisor.config.drain_seconds:g} s to finish (signal again to interrupt "
                "them now)")
    if phase is Shutdown.INTERRUPTING:
        return ("interrupting the runs in flight: each is recorded interrupted and its task "
                "released for another attempt (signal again to stop at once)")
    return "stopping at once: what is still in flight keeps its lease until it expires"


@app.command("tick")
def tick_cmd(
    work: Annotated[bool, typer.Option(help="Also run due tasks and send due notices.")] = True,
    agent: Annotated[list[str], typer.Option(help=_AGENT_HELP)] = [],  # noqa: B006
    agents: Annotated[str | None, typer.Option(help=_AGENTS_HELP)] = None,
    sources: Annotated[str | None, typer.Option(help=_SOURCES_HELP)] = None,
    series: Annotated[list[str], typer.Option(help=_SERIES_HELP)] = [],  # noqa: B006
) -> None:
    """One tick (and one pass of the condition poller), for hosts that drive watchkeeper
    from an external cron."""
    catalog = agents_from(agent, agents)
    found = sources_from(sources, series)

    async def run(db: Database, config: Settings) -> dict[str, Any]:
        return await uc.tick_once(db, await uc.database_clock(db), config, agents=catalog,
                                  sources=found, work=work)
    emit_json(with_db(run))


@app.command("replay")
def replay_cmd(
    definitions: Annotated[Path, typer.Option(help="TOML/JSON with [[definitions]]: id + a "
                                                   "condition spec.")],
    series: Annotated[Path, typer.Option(help="CSV with header as_of,subject,value,unit,currency.")],
    from_: Annotated[str | None, typer.Option("--from", help=f"Start ({INSTANT_HELP}); "
                                              "default: the series' first as_of.")] = None,
    to: Annotated[str | None, typer.Option(help=f"End ({INSTANT_HELP}); default: the "
                                           "series' last as_of.")] = None,
    poll_every: Annotated[str | None, typer.Option(help="Replace every definition's poll_every "
                                                   "(seconds or ISO 8601, e.g. P1D).")] = None,
    source_name: Annotated[str, typer.Option(help="The name the series is registered under "
                                             "(definitions name it in trigger.source).")] = "series",
    source_version: Annotated[str, typer.Option(help="The series' source version.")] = "1",
    keep: Annotated[bool, typer.Option(help="Keep the replay's tenant for history and SQL "
                                       "(default: removed once the replay has printed).")] = False,
    agent: Annotated[list[str], typer.Option(help=_AGENT_HELP)] = [],  # noqa: B006
    agents: Annotated[str | None, typer.Option(help=_AGENTS_HELP)] = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per event per line.")] = False,
) -> None:
    """Replay conditional definitions over a historical series on a virtual clock.

    Prints the timeline (polls, verdicts, fires, suppressions, tasks). It runs under a
    fresh tenant, removed at the end unless --keep ('replays prune' removes kept ones)."""
    import anyio
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from watchkeeper.sources import SeriesError, SeriesSource

    config = settings()
    catalog = agents_from(agent, agents)
    every: str | float | None = poll_every
    if poll_every is not None and poll_every.replace(".", "", 1).isdigit():
        every = float(poll_every)
    try:
        items = uc.load_replay_definitions(definitions, min_interval=config.min_interval_delta,
                                           poll_every=every)
        source = SeriesSource.from_csv(series, name=source_name, version=source_version)
        start, end = uc.replay_window(source, instant(from_, "--from"),
                                      instant(to, "--to"))
    except SeriesError as exc:
        raise fail_input(series_error(exc)) from exc
    except OSError as exc:
        raise fail_input(SpecError("--series", f"cannot read {series}: {exc.strerror}.",
                                   "check the path.")) from exc
    except SpecError as exc:
        raise (fail_json(exc) if as_json else fail_input(exc)) from exc
    # notices go through the outbox as usual; the log channel's lines would drown the
    # timeline, so they are kept out of stderr here (the deliveries are still recorded)
    logging.getLogger("watchkeeper.notify").setLevel(logging.WARNING)
    show = _timeline_printer(as_json, max(len(d.definition_id) for d in items))
    with Progress(TextColumn("replay"), BarColumn(), TextColumn("{task.description}"),
                  TimeElapsedColumn(), console=err, transient=True) as progress:
        bar = progress.add_task(format_utc(start), total=max((end - start).total_seconds(), 1))

        def moved(at: datetime) -> None:
            progress.update(bar, completed=(at - start).total_seconds(),
                            description=format_utc(at)[:10])

        async def run(db: Database, config: Settings) -> uc.ReplaySummary | None:
            done: list[uc.ReplaySummary] = []
            stopped: list[int] = []
            try:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(_cancel_on_sigterm, tg.cancel_scope, stopped)
                    done.append(await uc.replay(db, items, source, start=start, end=end,
                                                home=config.home, on_event=show,
                                                on_progress=moved, keep=keep, agents=catalog))
                    tg.cancel_scope.cancel()
            except BaseExceptionGroup as group:  # the replay's own error, not the group's
                raise first_leaf(group) from None
            return done[0] if done and not stopped else None

        summary = with_db(run, json_errors=as_json)
    if summary is None:
        err.print("stopped by SIGTERM: the replay was settled "
                  + ("(its tenant kept)" if keep else "(its tenant removed)"))
        raise typer.Exit(128 + signal.SIGTERM)
    actions = ", ".join(f"{k} {v}" for k, v in sorted(summary.actions.items()))
    where = (f"stored under tenant {summary.tenant_id}" if summary.kept else
             f"tenant {summary.tenant_id} removed (--keep keeps it)")
    err.print(f"replayed {format_utc(summary.start)} .. {format_utc(summary.end)}: "
              f"{summary.polls} polls ({actions}); tasks {summary.tasks or 'none'}; {where}")


async def _cancel_on_sigterm(scope: anyio.CancelScope, stopped: list[int]) -> None:
    """Cancel ``scope`` on SIGTERM (the replay's own cleanup then runs, shielded), and
    note it in ``stopped``; Ctrl-C already arrives as KeyboardInterrupt."""
    import anyio

    with anyio.open_signal_receiver(signal.SIGTERM) as signals:
        async for signum in signals:
            stopped.append(signum)
            scope.cancel()
            return


def _timeline_printer(as_json: bool, id_width: int = 24) -> Any:
    """The timeline's printer: every event as a JSON line (``as_json``), or the polls
    whose verdict changed and every other action, one line each, the definition ids in a
    column ``id_width`` wide (the longest id of the replay)."""
    last: dict[str, str | None] = {}

    def show(event: dict[str, Any]) -> None:
        if as_json:
            write(json.dumps(event) + "\n")
            return
        key = str(event["definition"])
        changed = event["verdict"] is not None and last.get(key) != event["verdict"]
        if event["verdict"] is not None:
            last[key] = event["verdict"]
        if event["action"] == "none" and not changed:
            return
        task = f" task {event['task']}" if event["task"] is not None else ""
        verdict = event["verdict"] or "-"
        out.print(f"{event['at']}  {escape(key):<{id_width}} {verdict:<7} {event['action']:<20}{task}  "
                  f"[dim]{escape(str(event['reason']))}[/]", highlight=False, soft_wrap=True,
                  emoji=False)  # an id such as "a:smile:" is printed as written
    return show


@replays_app.command("prune")
def replays_prune(
    older_than: Annotated[str, typer.Option(help="Only tenants created longer ago than this "
                                            "(ISO 8601 duration such as P7D, or seconds).")] = "0",
) -> None:
    """Remove the tenants that 'replay --keep' (or a crashed replay) left behind."""
    import pydantic

    try:
        age = (timedelta(seconds=float(older_than)) if older_than.replace(".", "", 1).isdigit()
               else pydantic.TypeAdapter(timedelta).validate_python(older_than))
    except pydantic.ValidationError as exc:
        raise fail_input(SpecError("--older-than", f"{older_than!r} is not a duration.",
                                   "give seconds or ISO 8601, e.g. P7D.")) from exc

    async def run(db: Database, config: Settings) -> list[str]:
        return await uc.prune_replays(db, datetime.now(UTC), age, home=config.home)
    removed = with_db(run)
    for tenant in removed:
        out.print(f"removed {tenant}")
    err.print(f"{len(removed)} replay tenant(s) removed")


@db_app.command("migrate")
def db_migrate() -> None:
    """Apply pending migrations (every command also does this on start)."""
    async def run(db: Database, _: Settings) -> list[int]:
        return await db.migrate()
    applied = with_db(run, migrate=False)
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

    async def run(db: Database, config: Settings) -> bool:
        return await run_demo(db, config, out, interval=timedelta(seconds=interval),
                              grace=timedelta(seconds=grace))
    if not with_db(run):
        raise typer.Exit(1)
