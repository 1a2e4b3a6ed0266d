"""``watchkeeper replay``: conditional definitions over a historical series, on a
virtual clock, through the real runtime (poll claim, admission, worker, outbox).

A replay makes a fresh tenant (``_replay-<UTC time>-<random>``: reserved, and invisible
to live pollers, workers and dispatchers) with one user, proposes
and confirms each definition at ``start`` as that user would, then moves a
:class:`FakeClock` from poll to poll — straight to the next ``next_due_at`` any of its
definitions has, never sleeping — and at each instant runs what a supervisor runs: the
poller (:func:`watchkeeper.runtime.engine._poller.poll_once`), the workers until no task is runnable,
and the outbox dispatcher. Everything is stored in PostgreSQL as a live run would store
it (polls, observation receipts, condition state, occurrences, tasks, reports), under
the replay's tenant, so ``watchkeeper history`` and SQL can inspect it afterwards.
The poller, worker and dispatcher of a replay touch only its own tenant's rows; live
ones never touch a replay's; and when it ends, fails or is interrupted its definitions
that are still open are cancelled: nothing of a replay runs later.
"""

from __future__ import annotations

import logging
import secrets
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio

from watchkeeper.outbox import FileChannel, LogChannel
from watchkeeper.sources import Source, SourceRegistry
from watchkeeper.triggers import (
    ConditionTrigger,
    Spec,
    SpecError,
    SpecProblems,
    check_identifier,
    format_utc,
    parse_spec,
)

from .._errors import WatchkeeperError
from ..engine._agents import AgentCatalog
from ..engine._clock import FakeClock, SystemClock
from ..engine._delivery_store import PgDeliveryStore
from ..engine._poller import PollEvent, poll_once
from ..engine._quiet import QuietRuns
from ..engine._supervisor import SupervisorConfig, make_dispatcher
from ..engine._worker import Worker
from ..store._db import Database
from ._definitions import cancel, confirm, propose
from ._principals import REPLAY_TENANT_PREFIX, add_user, authenticate
from ._specfile import load_data

log = logging.getLogger("watchkeeper.replay")

__all__ = ["ReplayDefinition", "ReplaySummary", "load_replay_definitions", "prune_replays",
           "remove_replay", "replay", "replay_window"]


@dataclass(frozen=True, slots=True)
class ReplayDefinition:
    """One ``[[definitions]]`` entry: an id and a condition spec."""

    definition_id: str
    spec: Spec


@dataclass
class ReplaySummary:
    """What a replay did: its tenant, the window, and counts by action."""

    tenant_id: str
    start: datetime
    end: datetime
    kept: bool = False
    polls: int = 0
    actions: dict[str, int] = field(default_factory=dict)
    tasks: dict[str, int] = field(default_factory=dict)


def load_replay_definitions(path: Path, *, min_interval: timedelta,
                            poll_every: str | float | None = None) -> list[ReplayDefinition]:
    """Read ``[[definitions]]`` tables (TOML) or a ``definitions`` list (JSON), each an
    ``id`` plus the fields of a condition spec (``version``, ``trigger``, ...).

    Args:
        poll_every: replaces every definition's ``trigger.poll_every`` (``--poll-every``:
            seconds or an ISO 8601 duration, checked as the spec field is).

    Raises:
        SpecError: listing every problem of every definition, each naming
            ``definitions[i].<field>`` (``--poll-every`` for the option) and the fix.
    """
    data = load_data(path)
    entries = data.get("definitions")
    if not isinstance(entries, list) or not entries:
        raise SpecError("definitions", f"{path} has no [[definitions]] tables.",
                        "add one [[definitions]] table per definition, with id and a spec.")
    found = SpecProblems()
    result: list[ReplayDefinition] = []
    for index, entry in enumerate(entries):
        where = f"definitions[{index}]"
        with found.check():
            item = _replay_definition(entry, where, min_interval, poll_every)
            if item.definition_id in {d.definition_id for d in result}:
                raise SpecError(f"{where}.id", f"{item.definition_id!r} is used twice.",
                                "make ids unique.")
            result.append(item)
    found.raise_if_any()
    return result


def _replay_definition(entry: Any, where: str, min_interval: timedelta,
                       poll_every: str | float | None) -> ReplayDefinition:
    """One ``[[definitions]]`` entry.

    Raises:
        SpecError: every problem of the entry, named under ``where``.
    """
    if not isinstance(entry, Mapping):
        raise SpecError(where, "is not a table.", "write [[definitions]] with key = value pairs.")
    raw = dict(entry)
    definition_id = raw.pop("id", None)
    found = SpecProblems()
    if definition_id is None:
        found.add(f"{where}.id", "is missing.", "give each definition an id.")
    else:
        with found.check():
            check_identifier(definition_id, f"{where}.id")
    if poll_every is not None and isinstance(raw.get("trigger"), Mapping):
        raw["trigger"] = {**raw["trigger"], "poll_every": poll_every}
    spec = None
    try:
        spec = parse_spec(raw, min_interval=min_interval)
    except SpecError as exc:
        found.extend(exc.renamed(lambda field: "--poll-every" if poll_every is not None
                                 and field == "trigger.poll_every" else f"{where}.{field}"))
    if spec is not None and not isinstance(spec.trigger, ConditionTrigger):
        found.add(f"{where}.trigger.type", f"is {spec.trigger.type!r}; replay runs "
                  "conditional definitions.", "use type = 'condition'.")
    found.raise_if_any()
    assert spec is not None and definition_id is not None
    return ReplayDefinition(definition_id, spec)


async def replay(db: Database, definitions: Sequence[ReplayDefinition], source: Source, *,
                 start: datetime, end: datetime, home: Path,
                 on_event: Callable[[dict[str, Any]], None] = lambda _: None,
                 on_progress: Callable[[datetime], None] = lambda _: None,
                 agents: AgentCatalog | None = None, keep: bool = False,
                 batched: bool = True) -> ReplaySummary:
    """Replay ``definitions`` over ``source`` from ``start`` to ``end`` (aware, UTC).

    ``on_event`` gets one JSON object per poll (see :meth:`PollEvent.to_json`) and one
    per finished task (``action`` ``task_completed``/``task_failed``...);
    ``on_progress`` the virtual time after each step.

    ``batched`` (default): the polls before the first that acts (a fire...) are decided
    in memory and written as one batch (:class:`~watchkeeper.runtime.engine._quiet.QuietRuns`),
    storing and printing what polling them one instant at a time would; ``False`` polls
    every instant through the poller (the reference the batches are tested against).

    However the replay ends — done, failed, cancelled, or ``on_event`` raising (a closed
    pipe) — its definitions are cancelled and what it created is settled: without
    ``keep`` the whole replay tenant is removed; with ``keep`` it stays for ``history``
    and SQL, and its notices that were never sent are ``suppressed`` with the reason
    (nothing of a replay stays due).

    Raises:
        SpecError: a definition names a source other than ``source`` (or another
            version), or an agent ``agents`` does not have (default: ``digest`` only);
            ``end`` is not after ``start``.
    """
    catalog = agents or AgentCatalog()
    found = SpecProblems()
    if end <= start:
        found.add("--to", f"{format_utc(end)} is not after --from {format_utc(start)}.",
                  "give a later --to.")
    for d in definitions:
        ref = d.spec.trigger.source  # type: ignore[union-attr]
        if (ref.name, ref.version) != (source.name, source.version):
            found.add(
                f"{d.definition_id}.trigger.source",
                f"names {ref.name} version {ref.version}; this replay's series is "
                f"{source.name} version {source.version}.",
                f"set source = {{ name = '{source.name}', version = '{source.version}' }}, or "
                "pass --source-name/--source-version.")
        for index, delivery in enumerate(d.spec.delivery):
            if delivery.channel == "webhook":
                found.add(
                    f"{d.definition_id}.delivery.{index}.channel",
                    "a replay sends no webhooks (its tenant has no endpoints, and a historical "
                    "replay must not notify anyone live).",
                    "use channel = 'file' or 'log' in the replay file.")
        if d.spec.agent.name not in catalog.names():
            found.add(
                f"{d.definition_id}.agent.name",
                f"names agent {d.spec.agent.name!r}; this replay has "
                f"{', '.join(catalog.names())} (its worker claims only tasks of an agent it "
                "has, so the task would wait forever).",
                "use the built-in agent 'digest', or give the replay that agent (--agent).")
    found.raise_if_any()
    clock = FakeClock(start)
    tenant = f"{REPLAY_TENANT_PREFIX}{datetime.now(UTC):%Y%m%dT%H%M%S}-{secrets.token_hex(3)}"
    # the tenant is created on the real clock (prune_replays goes by its age); all
    # else happens on the virtual one
    me = await authenticate(db, await add_user(db, SystemClock(), tenant, "replay", replay=True))
    async with db.transaction() as running:  # open while it runs: prune leaves it alone
        await running.execute("replay_lock", tenant)
        await running.execute("snapshot_release")  # hold the lock, not a vacuum horizon
        try:
            summary = await _run(db, clock, me, tenant, definitions, source, start, end, home,
                                 on_event, on_progress, catalog, batched)
            summary.kept = keep
            return summary
        finally:
            with anyio.CancelScope(shield=True):  # a replay's definitions never poll again
                await _settle(db, clock, me, tenant, definitions, keep, home)


async def _settle(db: Database, clock: FakeClock, me: Any, tenant: str,
                  definitions: Sequence[ReplayDefinition], keep: bool, home: Path) -> None:
    """Cancel what is still open; then remove the tenant, or (kept) suppress its unsent
    notices. Errors are logged: the replay's own error matters more."""
    try:
        if not keep:
            await remove_replay(db, tenant, home=home)
            return
        for d in definitions:
            if await db.fetchval("definition_is_open", tenant, d.definition_id):
                await cancel(db, clock, me, tenant, d.definition_id)
        await db.fetch("deliveries_settle_tenant", tenant,
                       "the replay ended before this notice was sent")
    except WatchkeeperError as exc:
        log.warning("could not settle replay tenant %s: %s", tenant, exc)


async def remove_replay(db: Database, tenant_id: str, *, home: Path | None = None) -> bool:
    """Remove a replay tenant and every row it owns, and (given ``home``,
    ``WATCHKEEPER_HOME``) the notice files and artifacts it wrote there; ``False`` if
    there was no such tenant.

    Raises:
        SpecError: ``tenant_id`` is not a replay tenant (``_replay-...``): nothing else
            is ever removed this way.
    """
    if not tenant_id.startswith(REPLAY_TENANT_PREFIX):
        raise SpecError("tenant", f"{tenant_id!r} is not a replay tenant.",
                        f"only {REPLAY_TENANT_PREFIX}... tenants can be removed.")
    async with db.transaction() as tx:
        removed = await tx.fetchval("tenant_purge", tenant_id) is not None
    if home is not None:
        for folder in (home / "notices" / tenant_id, home / "artifacts" / tenant_id):
            shutil.rmtree(folder, ignore_errors=True)
    return removed


async def prune_replays(db: Database, now: datetime, older_than: timedelta = timedelta(0), *,
                        home: Path | None = None) -> list[str]:
    """Remove the replay tenants (kept with ``--keep``, or left by a crashed replay)
    created before ``now - older_than``; return their ids, oldest first. A replay that
    is still running (it holds its tenant's advisory lock) is left alone.

    Raises:
        SpecError: a negative ``older_than`` (field ``--older-than``).
    """
    if not timedelta(0) <= older_than <= timedelta(days=36_500):
        raise SpecError("--older-than", f"{older_than} is outside 0 to 100 years.",
                        "give a duration such as P7D, or 0.")
    removed = []
    for row in await db.fetch("replay_tenants_before", now - older_than):
        tenant = row["tenant_id"]
        async with db.transaction() as conn:  # the lock is held until this ends
            if not await conn.fetchval("replay_try_lock", tenant):
                continue  # still running: its own end settles it
            if await remove_replay(db, tenant, home=home):
                removed.append(tenant)
    return removed


def replay_window(source: Source, start: datetime | None,
                  end: datetime | None) -> tuple[datetime, datetime]:
    """The replay's window: ``start``/``end`` when given, else the series' first and
    last ``as_of``.

    Raises:
        SpecError: the series is empty and a bound is missing (``--series``), or the
            window is empty (``--to``), saying which bound came from where.
    """
    span = source.span() if hasattr(source, "span") else None
    if span is None and (start is None or end is None):
        raise SpecError("--series", "the series holds no rows.",
                        "give a series with rows, or --from and --to.")
    first = start if start is not None else span[0]  # type: ignore[index]
    last = end if end is not None else span[1]  # type: ignore[index]
    if last <= first:
        given = (f"--to {format_utc(last)} is not after --from {format_utc(first)}"
                 if start and end else
                 f"the window {format_utc(first)} .. {format_utc(last)} "
                 f"({'--from' if start else 'the series start'} .. "
                 f"{'--to' if end else 'the series end'}) is empty")
        raise SpecError("--to", f"{given}.", "give --from and --to around the instants to replay.")
    return first, last


async def _run(db: Database, clock: FakeClock, me: Any, tenant: str,
               definitions: Sequence[ReplayDefinition], source: Source, start: datetime,
               end: datetime, home: Path, on_event: Callable[[dict[str, Any]], None],
               on_progress: Callable[[datetime], None],
               agents: AgentCatalog, batched: bool) -> ReplaySummary:
    for d in definitions:
        proposal = await propose(db, clock, tenant_id=tenant, definition_id=d.definition_id,
                                 owner_user_id=me.user_id, spec=d.spec, proposed_by="replay",
                                 replay=True)
        await confirm(db, clock, me, definition_id=d.definition_id, revision=proposal.revision,
                      spec_hash=proposal.spec_hash)
    summary = ReplaySummary(tenant, start, end)
    fired: dict[int, tuple[str, str]] = {}
    work = notices = False
    sources = SourceRegistry([source])
    worker = Worker(db, clock, agents, worker_id=f"{tenant}/worker",
                    artifact_root=home / "artifacts", lease_seconds=3600, tenant_id=tenant,
                    sources=sources)
    store = PgDeliveryStore(db, clock, tenant_id=tenant)
    dispatcher = make_dispatcher(SupervisorConfig(home=home), store,
                                 {"log": LogChannel(), "file": FileChannel(home / "notices")},
                                 clock, f"{tenant}/outbox")
    quiet = QuietRuns(db, sources, tenant, f"{tenant}/poller") if batched else None
    acts_at: datetime | None = None  # the last batch ended before a poll that acts, then
    while (due := await db.fetchval("replay_next_poll", tenant)) is not None and due <= end:
        if quiet is not None and not (work or notices) and clock.now() <= due \
                and due != acts_at:
            # every poll before the first that acts, decided in memory and written as one
            # batch: the same rows and lines as the poller's, one instant at a time
            batch = await quiet.run(end)
            if batch is not None:
                acts_at = batch.acts_at
                clock.set_wall(max(batch.last, clock.now()))
                for event in batch.events:
                    _count(summary, event)
                    on_event(event.to_json())
                on_progress(clock.now())
                continue
        clock.set_wall(max(due, clock.now()))
        report = await poll_once(db, clock, sources, actor=f"{tenant}/poller", tenant_id=tenant)
        for event in report.events:
            _count(summary, event)
            if event.task_id is not None:
                fired[event.task_id] = (event.definition_id, ",".join(event.subjects))
            on_event(event.to_json())
        # the worker and the outbox only when something may be waiting for them: a fire
        # now, or a retry left from an earlier step (a replay has no other tasks)
        work = work or any(e.task_id is not None for e in report.events)
        if work:
            work = False
            while (outcome := await worker.run_once()) is not None:
                summary.tasks[outcome.status] = summary.tasks.get(outcome.status, 0) + 1
                definition_id, subject = fired.get(outcome.task_id, (None, None))
                on_event({"at": format_utc(clock.now()), "definition": definition_id,
                          "subject": subject, "verdict": None,
                          "action": f"task_{outcome.status}", "reason": outcome.reason,
                          "task": outcome.task_id})
                work = work or outcome.status == "pending"  # a retry, later
            notices = True
        if notices:
            waiting = False
            while (stats := await dispatcher.dispatch_once()).claimed:
                waiting = waiting or bool(stats.retrying or stats.deferred)
            notices = waiting or work
        on_progress(clock.now())
    clock.set_wall(max(end, clock.now()))
    on_progress(end)
    return summary


def _count(summary: ReplaySummary, event: PollEvent) -> None:
    summary.polls += 1
    summary.actions[event.action] = summary.actions.get(event.action, 0) + 1
