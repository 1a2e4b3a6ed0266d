"""The poller: conditional triggers, from the poll slot to the admitted task.

One pass (:func:`poll_once`) has three steps (DESIGN "Conditions (three-valued)",
"Admission", "Scale"):

1. **Claim** (one short transaction per pass): lock the due condition definitions
   (``FOR UPDATE SKIP LOCKED``), take the latest due poll slot of each (older missed
   ones only counted: a condition is about now), and in one statement
   (``condition_polls_claim``) insert the pass's ``condition_polls`` rows (the primary
   key makes it at most one poll per slot, however many supervisors race), move every
   locked definition to its next poll and consume the polling budget of each poll
   claimed — every poll does, whatever it will return. A poll over budget is recorded
   ``denied_poll_budget`` and reads nothing. A poll whose readings this process already
   holds (an earlier pass of the same poll instant read them) has nothing to wait for:
   it is judged in the claim's transaction, and when it is quiet (nothing to admit or
   complete, the common case) it is inserted decided, with its receipts and state, in
   the same statement — one write instead of an insert and an update, and no step 3.
2. **Read** (no transaction): one read per (source, subject, poll instant), shared by
   every definition that reads it — in this pass, or in an earlier pass of the same
   instant in this process; concurrently. The result carries the revision and fence
   each poll was claimed under.
3. **Decide** (one short transaction per chunk of :data:`DECIDE_CHUNK` polls,
   :data:`DECIDE_LANES` at once, set-based: :mod:`._poll_decide`): lock the polls and
   definitions, read the states, recheck
   each poll's fence and revision (else ``fenced_out``), step the firstMatch/everyEdge
   machine (pure), run the fires through the same overrun and budget rules as any
   admission, and commit the receipts, condition states, occurrences and tasks
   together. A lost COMMIT acknowledgement is settled and read back by the polls' keys;
   nothing is decided twice.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

import anyio

from watchkeeper.sources import SourceRegistry, UnknownSource
from watchkeeper.triggers import (
    USER_BINDING_ID,
    ConditionTrigger,
    DefinitionFacts,
    Evaluation,
    Observation,
    ObservationStatus,
    PollJudgement,
    Spec,
    budget_period,
    evaluate,
    format_utc,
    in_range,
    judge_poll,
    load_zone,
)

from ..store._db import Connection, Database, StoreError
from ..store._specs import cached_spec, spec_from_json
from ._clock import Clock
from ._lanes import lanes as in_lanes
from ._poll_decide import (
    PLAN_PER_BATCH,
    Claim,
    Polled,
    PollEvent,
    decide_polls,
    poll_event,
    stage_receipts,
    stored_condition,
)
from ._registry import Registry
from ._tick import DueDefinition, epoch_us

__all__ = ["PollEvent", "PollReport", "poll_once", "read_observations", "read_subject"]

log = logging.getLogger("watchkeeper.conditions")

ABANDON_AFTER = timedelta(minutes=10)
"""A poll still ``reading`` this long after its claim is decided ``abandoned``."""
READ_TIMEOUT = 10.0
"""Seconds (real time) one source read may take before it counts as timed out."""
DECIDE_CHUNK = 500
"""Polls decided per admission transaction: each is decided on its own (its own fence,
revision and state checks, its own receipt), with one statement per kind of row."""
DECIDE_LANES = 2
"""Chunks of one pass decided at once (each in its own transaction and connection)."""


@dataclass
class PollReport:
    """What one pass did."""

    claimed: int = 0
    events: list[PollEvent] = field(default_factory=list)
    abandoned: int = 0


async def poll_once(db: Database, clock: Clock, sources: SourceRegistry, *, actor: str,
                    limit: int = 200, concurrency: int = 16,
                    registry: Registry | None = None, tenant_id: str | None = None,
                    read_timeout: float = READ_TIMEOUT) -> PollReport:
    """Claim, read and decide the due polls (at most ``limit`` definitions).

    Args:
        actor: recorded as the poll's claimant.
        concurrency: source reads in flight at once.
        tenant_id: poll only this tenant's definitions (a replay on a virtual clock
            must never poll anyone else's); ``None``: every tenant's but the replays'.
        read_timeout: seconds one source read may take (real time); then the reading
            is ``timed_out`` (unknown).

    Raises:
        DatabaseUnavailable: the store failed in step 1 or 3 (claimed polls are then
            decided ``abandoned`` after :data:`ABANDON_AFTER`; nothing is admitted twice).
    """
    report = PollReport()
    now = clock.now()
    report.abandoned = len(await db.fetch("condition_polls_abandon", now, now - ABANDON_AFTER,
                                          tenant_id))
    registry = registry or Registry()
    try:
        claims, denied, quiet = await _claim(db, now, limit, actor, tenant_id, sources)
    except _RefusedAtClaim as refusal:
        # rolled back, nothing claimed: claim again, every poll decided in step 3, which
        # records a poll the store refuses 'failed' and decides the others alone
        log.warning("the store refused the claim of %d poll(s) decided at it (%s); claiming "
                    "again without deciding any", refusal.count, refusal.__cause__)
        claims, denied, quiet = await _claim(db, now, limit, actor, tenant_id, sources,
                                             decide=False)
    report.claimed = len(claims) + len(denied) + len(quiet)
    report.events.extend(denied)
    if not claims:
        report.events.extend(sorted(quiet, key=_definition_order))
        return report
    observations = await _shared_reads(sources, claims, clock, concurrency, read_timeout)
    decided = sorted(_evaluated(sources, claims, observations),
                     key=lambda d: (d[0].item.tenant_id, d[0].item.definition_id))
    # one lock order for every poller (polls with their definitions, in key order): no
    # deadlock between two supervisors whose chunks hold the same definitions. The chunks
    # of one pass hold disjoint definitions: DECIDE_LANES of them are decided at once, so
    # one's statements run while the next is judged.
    chunks = [decided[start:start + DECIDE_CHUNK] for start in range(0, len(decided),
                                                                        DECIDE_CHUNK)]
    results: dict[int, list[PollEvent]] = {}
    lanes = anyio.CapacityLimiter(DECIDE_LANES)

    async def decide(index: int) -> None:
        async with lanes:
            results[index] = await decide_polls(db, clock, chunks[index], actor, registry)

    async with in_lanes() as tg:  # an outage reaches the loop as DatabaseUnavailable
        for index in range(len(chunks)):
            tg.start_soon(decide, index)
    # the events in the order of a pass that decides every poll in step 3
    report.events.extend(sorted([*quiet, *(e for i in range(len(chunks)) for e in results[i])],
                                key=_definition_order))
    return report


def _definition_order(event: PollEvent) -> tuple[str, str]:
    """The order of a pass's decided events: (tenant, definition), as step 3 decides
    them — whether decided there or at the claim (whose order is next_due_at first)."""
    return event.tenant_id, event.definition_id


class _RefusedAtClaim(Exception):
    """The store refused a claim that decided ``count`` quiet polls (a receipt or state
    it will not take: the claim's one statement failed, and the claim rolled back)."""

    def __init__(self, count: int) -> None:
        super().__init__(count)
        self.count = count


_Key = tuple[str, str, str]  # source name, version, subject
_Reading = tuple[datetime, Observation]  # when it was read, what was read
_READS: weakref.WeakKeyDictionary[SourceRegistry, dict[datetime, dict[_Key, _Reading]]] = \
    weakref.WeakKeyDictionary()
"""Per source registry (one per supervisor or replay): the readings of the latest poll
instants, so the passes that share one poll instant share its reads."""
_INSTANTS_KEPT = 4


async def _shared_reads(sources: SourceRegistry, claims: Sequence[Claim], clock: Clock,
                        concurrency: int, read_timeout: float
                        ) -> dict[tuple[datetime, _Key], _Reading]:
    """The reading of each (poll instant, source, subject) the claims need: read once
    per process — by this pass, at one instant, or by an earlier pass of the same poll
    instant — and shared by every definition that reads it (DESIGN "Scale")."""
    kept = _READS.setdefault(sources, {})
    wanted = {(c.slot.scheduled_for, (c.trigger.source.name, c.trigger.source.version, subject))
              for c in claims for subject in c.trigger.subjects}
    missing = {key for at, key in wanted if key not in kept.get(at, {})}
    read_at = clock.now()
    fresh = await read_observations(sources, missing, read_at, concurrency=concurrency,
                                     read_timeout=read_timeout) if missing else {}
    out: dict[tuple[datetime, _Key], _Reading] = {}
    for at, key in wanted:
        reading = kept.get(at, {}).get(key)
        if reading is None:
            reading = kept.setdefault(at, {})[key] = (read_at, fresh[key])
        out[(at, key)] = reading
    for old in sorted(kept)[:-_INSTANTS_KEPT]:
        del kept[old]
    return out


def _evaluated(sources: SourceRegistry, claims: Sequence[Claim],
               readings: dict[tuple[datetime, _Key], _Reading]) -> list[Polled]:
    """Each claim with its predicate's evaluation at its read instant (the latest of its
    readings'). Claims of one spec, poll instant and readings share one evaluation — in
    this pass, or in an earlier pass of the same poll instant in this process (kept
    with the readings it was made of, and dropped with them: 100,000 definitions over
    10,000 specs evaluate 10,000 times an instant, not 100,000)."""
    kept = _EVALUATIONS.setdefault(sources, {})
    instants = _READS.get(sources, {})
    for old in [at for at, (made_of, _) in kept.items() if instants.get(at) is not made_of]:
        del kept[old]  # its readings are gone (or read anew): the ids in its keys are void
    out: list[Polled] = []
    for claim in claims:
        ref, at = claim.trigger.source, claim.slot.scheduled_for
        seen = {subject: readings[(at, (ref.name, ref.version, subject))]
                for subject in claim.trigger.subjects}
        read_at = max(r for r, _ in seen.values())
        entry = kept.get(at)
        if entry is None:
            made_of = instants.get(at)
            entry = (made_of, {})
            if made_of is not None:  # else its readings are dropped already: not kept
                kept[at] = entry
        shared = entry[1]
        key = (claim.item.spec_hash, read_at, *(id(o) for _, o in seen.values()))
        evaluation = shared.get(key)
        if evaluation is None:
            evaluation = shared[key] = evaluate(
                claim.trigger.predicate, {s: o for s, (_, o) in seen.items()}, read_at)
        out.append((claim, read_at, evaluation))
    return out


_EVALUATIONS: weakref.WeakKeyDictionary[
    SourceRegistry, dict[datetime, tuple[Any, dict[tuple[Any, ...], Evaluation]]]] = \
    weakref.WeakKeyDictionary()
"""Per source registry: the evaluations made of the readings kept in :data:`_READS`, per
poll instant — with the readings' dict they were made of (a dict no longer kept, or
replaced, voids them) — keyed by spec hash, read instant and the readings' identities."""


# ---------------------------------------------------------------- step 1: claim


_Window = Any  # triggers.DueWindow


async def _claim(db: Database, now: datetime, limit: int, actor: str, tenant_id: str | None,
                 sources: SourceRegistry, *, decide: bool = True
                 ) -> tuple[list[Claim], list[PollEvent], list[PollEvent]]:
    """Step 1: lock the due definitions, advance them, and insert their polls; with
    ``decide``, a quiet poll whose readings this process kept from an earlier pass of its
    poll instant is decided here too (:func:`_decided_at_claim`). Returns the claims still
    to read and decide, the events of the polls denied by the polling budget, and those
    of the quiet polls decided.

    Raises:
        _RefusedAtClaim: the store refused the claim while it decided quiet polls (the
            transaction rolled back; claim again without ``decide``).
    """
    claims: list[Claim] = []
    early: list[PollEvent] = []
    decided_now: list[PollEvent] = []
    async with db.transaction() as tx:
        rows = await tx.fetch("conditions_due_lock", now, limit, tenant_id,
                              sorted(sources.names()))
        if not rows:
            return claims, early, decided_now
        if len(rows) >= PLAN_PER_BATCH:
            await tx.execute("admission_planner")  # plans for the batch's own keys
        specs = await _specs(tx, rows)
        advances: list[tuple[Any, ...]] = []
        due: list[tuple[DueDefinition, Spec, _Window]] = []
        for row in rows:
            spec = specs[row["spec_hash"]]
            if isinstance(spec, str):
                log.error("cannot poll %s/%s: %s", row["tenant_id"], row["definition_id"], spec)
                await _fail_definition(tx, row, now, actor, spec)
                continue
            item = DueDefinition(row["tenant_id"], row["definition_id"], row["origin"],
                                 row["owner_user_id"], row["fence"], row["effective_revision"],
                                 row["spec_hash"], row["cursor_at"], row["slots_seen"],
                                 spec.compiled, None)
            window = spec.window(item.cursor_at, now, item.slots_seen)
            advances.append(_advance(item, window))
            if window.candidate is not None:
                due.append((item, spec, window))
        budgets = await _poll_budgets(tx, due)
        pending = {(item.tenant_id, item.definition_id): Claim(item, spec.trigger,
                                                               window.candidate, window.count - 1)
                   for item, spec, window in due
                   if not isinstance(budgets.get((item.tenant_id, item.definition_id)), str)}
        quiet = await _decided_at_claim(tx, sources, list(pending.values())) if decide else {}
        polls, charges = [], []
        for item, spec, window in due:
            trigger = spec.trigger
            assert isinstance(trigger, ConditionTrigger)
            slot = window.candidate
            budget = budgets.get((item.tenant_id, item.definition_id))
            denied = budget if isinstance(budget, str) else None
            decided = quiet.get((item.tenant_id, item.definition_id))
            if decided is not None:
                _, read_at, evaluation, judgement = decided
                action, reason = judgement.action, judgement.reason[:2000]
                verdict, read_us = evaluation.verdict.value, epoch_us(read_at)
            else:
                action, reason = ("denied_poll_budget", denied) if denied else (None, None)
                verdict = read_us = None
            polls.append((item.tenant_id, item.definition_id, USER_BINDING_ID, slot.key,
                          epoch_us(slot.scheduled_for), item.revision, item.fence,
                          trigger.condition_key, window.count - 1, action, reason, verdict,
                          read_us))
            if isinstance(budget, tuple):  # the claimed poll is the one that is paid for
                charges.append((item.tenant_id, item.definition_id, USER_BINDING_ID, slot.key,
                                *budget))
        await tx.stage("wk_stage_claims", CLAIM_COLUMNS, polls)
        await tx.stage("wk_stage_advances", ADVANCE_COLUMNS, advances)
        try:
            # staged even when no poll is quiet: the statement reads these tables, and each
            # exists only in the transaction that stages it
            await stage_receipts(tx, [(c, r, e) for c, r, e, _ in quiet.values()],
                                 [(c, j.state, c.slot.scheduled_for)
                                  for c, _, _, j in quiet.values() if j.state is not None])
            lost = {(r["tenant_id"], r["definition_id"], r["slot"]) for r in await tx.fetch(
                "condition_polls_claim", now, actor, *_columns(charges, 7))}
        except StoreError as exc:
            # one quiet poll's receipt or state refused fails the whole claim; step 3 would
            # have recorded that poll 'failed' and decided the others
            if not quiet:
                raise
            raise _RefusedAtClaim(len(quiet)) from exc
        for item, spec, window in due:
            key, slot = (item.tenant_id, item.definition_id), window.candidate
            if lost and (*key, slot.key) in lost:
                continue  # this slot was polled already: it costs no second poll
            denied = budgets.get(key)
            if isinstance(denied, str):
                early.append(PollEvent(item.tenant_id, item.definition_id, slot.key,
                                       slot.scheduled_for, spec.trigger.subjects, None,
                                       "denied_poll_budget", denied, revision=item.revision))
            elif key in quiet:
                claim, _, evaluation, judgement = quiet[key]
                decided_now.append(poll_event(claim, evaluation, judgement.action,
                                              judgement.reason, None))
            else:
                claims.append(pending[key])
    return claims, early, decided_now


async def _decided_at_claim(tx: Connection, sources: SourceRegistry, pending: Sequence[Claim]
                            ) -> dict[tuple[str, str], tuple[Claim, datetime, Evaluation,
                                                             PollJudgement]]:
    """The claims of ``pending`` that are decided in the claim's own transaction: those
    whose every reading this process kept from an earlier pass of the same poll instant
    (:data:`_READS`: nothing to read, so nothing to wait for while the definitions are
    locked) and whose judgement is quiet (:attr:`PollJudgement.quiet`: nothing to admit,
    nothing to complete). Judged as step 3 judges them — against the definition as
    locked now and its stored condition state — so the poll is written once, decided,
    with its receipts and state. The others (a fire, a fence that moved, a superseded
    poll) are claimed ``reading`` and decided by step 3. Keyed by (tenant, definition)."""
    kept = _READS.get(sources, {})
    ready = [c for c in pending
             if (at := kept.get(c.slot.scheduled_for)) is not None
             and all((c.trigger.source.name, c.trigger.source.version, s) in at
                     for s in c.trigger.subjects)]
    if not ready:
        return {}
    readings = {(c.slot.scheduled_for, key): kept[c.slot.scheduled_for][key] for c in ready
                for key in ((c.trigger.source.name, c.trigger.source.version, s)
                            for s in c.trigger.subjects)}
    states = {(r["tenant_id"], r["definition_id"]): r for r in await tx.fetch(
        "condition_states_get", [c.item.tenant_id for c in ready],
        [c.item.definition_id for c in ready], [USER_BINDING_ID] * len(ready))}
    out = {}
    for claim, read_at, evaluation in _evaluated(sources, ready, readings):
        item = claim.item
        judgement = judge_poll(
            current=DefinitionFacts("active", item.fence, item.revision),
            claimed_fence=item.fence, claimed_revision=item.revision,
            stored=stored_condition(states.get((item.tenant_id, item.definition_id))),
            condition_key=claim.trigger.condition_key, mode=claim.trigger.mode,
            cooldown=claim.trigger.cooldown, slot_at=claim.slot.scheduled_for,
            read_at=read_at, evaluation=evaluation)
        if judgement.quiet:
            out[(item.tenant_id, item.definition_id)] = (claim, read_at, evaluation, judgement)
    return out


CLAIM_COLUMNS = ("tenant_id", "definition_id", "binding_id", "slot", "scheduled_for_us",
                 "revision", "fence", "condition_key", "superseded", "action", "reason",
                 "verdict", "read_at_us")
"""The columns of ``wk_stage_claims``: a claimed poll (action and reason set only on one
inserted decided: denied by its polling budget, or quiet and judged at the claim, which
also has its verdict and read instant); instants as :func:`._tick.epoch_us`."""
ADVANCE_COLUMNS = ("tenant_id", "definition_id", "cursor_us", "slots_seen", "next_due_us",
                   "status")
"""The columns of ``wk_stage_advances``: a locked definition moved to its next poll."""


def _columns(rows: Sequence[Sequence[Any]], width: int) -> list[list[Any]]:
    if not rows:
        return [[] for _ in range(width)]
    return [list(column) for column in zip(*rows, strict=True)]


async def _specs(tx: Connection, rows: Sequence[Any]) -> dict[str, Spec | str]:
    """The spec of each row's hash, parsed once per process; a spec that no longer
    parses maps to the reason (its definitions stop: :func:`_fail_definition`)."""
    out: dict[str, Spec | str] = {}
    missing = []
    for row in rows:
        digest = row["spec_hash"]
        if digest in out:
            continue
        spec = cached_spec(digest)
        if spec is None:
            missing.append(digest)
            out[digest] = "not found"
        else:
            out[digest] = spec
    if missing:
        for stored in await tx.fetch("specs_by_hash", missing):
            try:
                out[stored["spec_hash"]] = spec_from_json(stored["spec_hash"], stored["spec"])
            except Exception as exc:  # noqa: BLE001 - one bad definition must not stop polling
                out[stored["spec_hash"]] = f"{type(exc).__name__}: {exc}"
    return out


def _advance(item: DueDefinition, window: _Window) -> tuple[Any, ...]:
    cursor = window.last.scheduled_for if window.last is not None else item.cursor_at
    next_due = window.next_slot.scheduled_for if window.next_slot is not None else None
    return (item.tenant_id, item.definition_id, epoch_us(cursor), item.slots_seen + window.count,
            epoch_us(next_due), "completed" if window.ended else "active")


async def _fail_definition(tx: Connection, row: Any, now: datetime, actor: str,
                           why: str) -> None:
    """Stop a definition whose stored spec cannot be polled any more (status failed, an
    event says why); a corrected revision makes it active again."""
    await tx.execute("definitions_advance", [row["tenant_id"]], [row["definition_id"]],
                     [row["cursor_at"]], [row["slots_seen"]], [None], ["failed"], now)
    await tx.execute("event_insert", row["tenant_id"], row["definition_id"], "*",
                     row["effective_revision"], "planning_failed", None, None, now, now, 0,
                     f"cannot be polled, so it stopped: {why}; propose a corrected revision"[:2000],
                     now, actor)


async def _poll_budgets(tx: Connection, due: Sequence[tuple[DueDefinition, Spec, _Window]]
                        ) -> dict[tuple[str, str], str | tuple[datetime, datetime, int]]:
    """The polling budget of each due poll whose spec has one: the reason when it is
    exhausted, else the (period start, period end, limit) the poll is charged to."""
    periods: dict[tuple[str, str], tuple[datetime, datetime, int]] = {}
    for item, spec, window in due:
        limit = spec.limits.max_polls_per_period
        if limit is not None:
            start, end = budget_period(window.candidate.scheduled_for, spec.limits.period,
                                       load_zone(spec.zone))
            periods[(item.tenant_id, item.definition_id)] = (start, end, limit)
    if not periods:
        return {}
    keys = list(periods)
    rows = await tx.fetch("poll_budgets_for", [k[0] for k in keys], [k[1] for k in keys],
                          [USER_BINDING_ID] * len(keys), [periods[k][0] for k in keys])
    found = {(r["tenant_id"], r["definition_id"]): r for r in rows}
    specs = {(item.tenant_id, item.definition_id): spec for item, spec, _ in due}
    out: dict[tuple[str, str], str | tuple[datetime, datetime, int]] = {}
    for key, (start, end, limit) in periods.items():
        row = found.get(key)
        cap, used = (row["poll_limit"], row["used"]) if row else (limit, 0)
        if used >= cap:
            period = specs[key].limits.period.value
            out[key] = (f"polling budget exhausted: {used} of {cap} polls this {period} "
                        f"(until {format_utc(end)}); nothing was read")
        else:
            out[key] = (start, end, cap)
    return out


# ---------------------------------------------------------------- step 2: read


async def read_observations(sources: SourceRegistry, wanted: set[tuple[str, str, str]],
                            read_at: datetime, *, concurrency: int = 16,
                            read_timeout: float = READ_TIMEOUT
                            ) -> dict[tuple[str, str, str], Observation]:
    """Read each wanted (source name, version, subject) once at ``read_at``, at most
    ``concurrency`` at a time; outside any transaction. Whatever a source does — raise,
    hang past ``read_timeout`` (real) seconds, return something that is not a sound
    observation — becomes an observation with status failed or timed_out."""
    out: dict[tuple[str, str, str], Observation] = {}
    limiter = anyio.CapacityLimiter(concurrency)

    async def read_one(key: tuple[str, str, str]) -> None:
        async with limiter:
            out[key] = await read_subject(*key, sources, read_at, read_timeout)

    async with anyio.create_task_group() as tg:
        for key in sorted(wanted):
            tg.start_soon(read_one, key)
    return out


async def read_subject(name: str, version: str, subject: str, sources: SourceRegistry,
                       read_at: datetime, limit_seconds: float) -> Observation:
    """What source ``name`` says of ``subject`` at ``read_at``, as a sound observation:
    an unknown source, another version, an exception, no answer within
    ``limit_seconds`` (real) or an unsound answer becomes a failed or timed-out one."""
    try:
        source = sources.get(name)
    except UnknownSource as exc:
        return _unusable(name, version, subject, read_at, ObservationStatus.FAILED, str(exc))
    if source.version != version:
        return _unusable(name, source.version, subject, read_at, ObservationStatus.FAILED,
                         f"source {name} is version {source.version}; the definition was "
                         f"confirmed with version {version}")
    try:
        if getattr(source, "in_memory", False) is True:  # a series: no I/O to time out
            observation = await source.read(subject, read_at)
        else:
            with anyio.fail_after(limit_seconds):
                observation = await source.read(subject, read_at)
    except TimeoutError:
        return _unusable(name, version, subject, read_at, ObservationStatus.TIMED_OUT,
                         f"source {name} did not answer within {limit_seconds:g} s")
    except Exception as exc:  # a source must not stop the poller; recorded as failed
        log.exception("source %s raised for %s", name, subject)
        return _unusable(name, version, subject, read_at, ObservationStatus.FAILED,
                         f"{type(exc).__name__}: {exc}"[:2000])
    problem = unsound(observation)
    return observation if problem is None else _unusable(
        name, version, subject, read_at, ObservationStatus.FAILED,
        f"source {name} returned {problem}"[:2000])


_TEXT_FIELDS = (("unit", 256, False), ("currency", 256, False), ("observation_id", 1024, True),
                ("subject", 256, True), ("source", 256, True), ("source_version", 256, True),
                ("detail", 2000, True))
"""An observation's text fields: name, most characters, whether it may not be None."""


def unsound(observation: Any) -> str | None:
    """Why a source's answer cannot be used as an observation (stored and compared),
    or ``None``: not an Observation, a value that is not a finite Decimal in range, an
    as_of or fetched_at that is not an aware datetime, over-long text fields."""
    if not isinstance(observation, Observation):
        return f"a {type(observation).__name__}, not an Observation"
    if observation.value is not None and (not isinstance(observation.value, Decimal)
                                          or not in_range(observation.value)):
        return f"value {observation.value!r}: not a Decimal in range"
    for name in ("as_of", "fetched_at"):
        instant = getattr(observation, name)
        if instant is None and name == "as_of":
            continue
        if not isinstance(instant, datetime) or instant.utcoffset() is None:
            return f"{name} {instant!r}: not an aware datetime"
    for name, limit, required in _TEXT_FIELDS:
        text = getattr(observation, name)
        if text is None and not required:
            continue
        if not isinstance(text, str) or len(text) > limit or "\x00" in text:
            return f"{name}: not a string of at most {limit} characters without NUL"
    if not isinstance(observation.status, ObservationStatus):
        return f"status {observation.status!r}"
    return None


def _unusable(name: str, version: str, subject: str, at: datetime, status: ObservationStatus,
              detail: str) -> Observation:
    return Observation(name, version, subject, f"{subject}@unread", None, None, None, None, at,
                       status, detail)
