"""The poller: conditional triggers, from the poll slot to the admitted task.

One pass (:func:`poll_once`) has three steps (DESIGN "Conditions (three-valued)",
"Admission"):

1. **Claim** (one short transaction): lock the due condition definitions
   (``FOR UPDATE SKIP LOCKED``), take the latest due poll slot of each (older missed
   ones only counted: a condition is about now), insert its ``condition_polls`` row
   (the primary key makes it at most one poll per slot, however many supervisors
   race), consume the polling budget — every poll does, whatever it will return — and
   move the definition to its next poll. A poll over budget is recorded
   ``denied_poll_budget`` and reads nothing.
2. **Read** (no transaction): ask each subject's source, concurrently. The result
   carries the revision and fence it was read under.
3. **Decide** (one short transaction per poll): lock the definition, recheck fence
   and revision (else ``fenced_out``), evaluate the predicate (Kleene, pure), step the
   firstMatch/everyEdge machine (pure), and on a fire run the same overrun and budget
   rules as any admission; then commit the observation receipts, the condition state
   and the occurrence + task together. A fire that is not admitted keeps the previous
   state (nothing latches). A lost COMMIT acknowledgement is settled and read back by
   the poll's key; nothing is decided twice.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

import anyio

from watchkeeper.sources import SourceRegistry, UnknownSource
from watchkeeper.triggers import (
    USER_BINDING_ID,
    ConditionState,
    ConditionTrigger,
    Decision,
    DueWindow,
    EdgeAction,
    Evaluation,
    LatenessVerdict,
    Observation,
    ObservationStatus,
    Slot,
    Spec,
    budget_period,
    decide_admission,
    evaluate,
    format_utc,
    in_range,
    load_zone,
    not_admitted,
    occurrence_timing,
    step,
    subjects_of,
    tzdata_version,
)

from .._errors import CommitOutcomeUnknown
from ..store._db import Connection, Database, StoreError
from ..store._specs import spec_from_row
from ._admission import active_tasks, budget_states, insert_tasks, task_row
from ._clock import Clock
from ._registry import Registry
from ._tick import Candidate, DueDefinition, Plan, units_of

__all__ = ["PollEvent", "PollReport", "poll_once"]

log = logging.getLogger("watchkeeper.conditions")

ABANDON_AFTER = timedelta(minutes=10)
"""A poll still ``reading`` this long after its claim is decided ``abandoned``."""
READ_TIMEOUT = 10.0
"""Seconds (real time) one source read may take before it counts as timed out."""
DECIDE_CHUNK = 50
"""Polls decided per admission transaction: each is decided on its own (its own fence,
revision and state checks, its own receipt), but one COMMIT covers the chunk."""


@dataclass(frozen=True, slots=True)
class _Claim:
    """A claimed poll: what was locked and decided in step 1."""

    item: DueDefinition
    trigger: ConditionTrigger
    slot: Slot
    superseded: int


@dataclass(frozen=True, slots=True)
class PollEvent:
    """One decided poll, as the timeline shows it.

    Attributes:
        at: the poll slot's instant (UTC).
        verdict: ``true``, ``false`` or ``unknown`` (``None`` when nothing was read).
        action: ``fired``, ``suppressed_cooldown``, ``none``, ``skipped_overrun``,
            ``denied_budget``, ``denied_poll_budget``, ``fenced_out``, ``superseded``,
            ``abandoned``, ``failed``.
        task_id: the admitted task, when the poll fired.
        observations: what each subject's source said.
    """

    tenant_id: str
    definition_id: str
    slot: str
    at: datetime
    subjects: tuple[str, ...]
    verdict: str | None
    action: str
    reason: str
    task_id: int | None = None
    revision: int = 0
    observations: tuple[Observation, ...] = ()
    recovered: bool = False

    def to_json(self) -> dict[str, Any]:
        """The replay's stable JSON line: at, definition, subject, verdict, action,
        reason, task (plus revision and the observations' values)."""
        return {
            "at": format_utc(self.at), "definition": self.definition_id,
            "subject": ",".join(self.subjects), "verdict": self.verdict, "action": self.action,
            "reason": self.reason, "task": self.task_id, "revision": self.revision,
            "observations": [{"subject": o.subject, "value": None if o.value is None else str(o.value),
                              "unit": o.unit, "currency": o.currency,
                              "as_of": None if o.as_of is None else format_utc(o.as_of),
                              "status": o.status.value} for o in self.observations],
        }


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
    claims, early = await _claim(db, now, limit, actor, registry, tenant_id,
                                 sorted(sources.names()))
    report.claimed = len(claims) + len(early)
    report.events.extend(early)
    if not claims:
        return report
    readings: dict[int, tuple[datetime, dict[str, Observation]]] = {}
    limiter = anyio.CapacityLimiter(concurrency)

    async def read(index: int, claim: _Claim) -> None:
        async with limiter:
            readings[index] = await _read(claim, sources, clock, read_timeout)

    async with anyio.create_task_group() as tg:
        for index, claim in enumerate(claims):
            tg.start_soon(read, index, claim)
    decided = sorted(((claim, *readings[index]) for index, claim in enumerate(claims)),
                     key=lambda d: (d[0].item.tenant_id, d[0].item.definition_id))
    # one lock order for every poller (definition, then its state): no deadlock between
    # two supervisors whose chunks hold the same definitions
    for start in range(0, len(decided), DECIDE_CHUNK):
        report.events.extend(await _decide_durably(db, clock, decided[start:start + DECIDE_CHUNK],
                                                   actor, registry))
    return report


# ---------------------------------------------------------------- step 1: claim


async def _claim(db: Database, now: datetime, limit: int, actor: str, registry: Registry,
                 tenant_id: str | None,
                 source_names: list[str]) -> tuple[list[_Claim], list[PollEvent]]:
    claims: list[_Claim] = []
    early: list[PollEvent] = []
    async with db.transaction() as tx:
        rows = await tx.fetch("conditions_due_lock", now, limit, tenant_id, source_names)
        for row in rows:
            try:
                spec = spec_from_row(row)
            except Exception as exc:  # noqa: BLE001 - one bad definition must not stop polling
                log.exception("cannot poll %s/%s", row["tenant_id"], row["definition_id"])
                await _fail_definition(tx, row, now, actor, f"{type(exc).__name__}: {exc}")
                continue
            item = DueDefinition(row["tenant_id"], row["definition_id"], row["origin"],
                                 row["owner_user_id"], row["fence"], row["effective_revision"],
                                 row["spec_hash"], row["cursor_at"], row["slots_seen"],
                                 spec.compiled, None)
            trigger = spec.trigger
            assert isinstance(trigger, ConditionTrigger)
            window = spec.window(item.cursor_at, now, item.slots_seen)
            await _advance(tx, item, window, now)
            if window.candidate is None:
                continue
            slot = window.candidate
            budget = await _poll_budget(tx, item, spec, slot)
            denied = budget if isinstance(budget, str) else None
            status = "decided" if denied else "reading"
            claimed = await tx.fetchval(
                "condition_poll_claim", item.tenant_id, item.definition_id, USER_BINDING_ID,
                slot.key, slot.scheduled_for, item.revision, item.fence, trigger.condition_key,
                window.count - 1, now, actor, status, None,
                "denied_poll_budget" if denied else None, denied, now if denied else None)
            if claimed is None:
                continue  # this slot was polled already: it costs no second poll
            if isinstance(budget, tuple):  # the claimed poll is the one that is paid for
                await tx.execute("poll_budget_consume", item.tenant_id, item.definition_id,
                                 USER_BINDING_ID, *budget)
            if denied:
                early.append(PollEvent(item.tenant_id, item.definition_id, slot.key,
                                       slot.scheduled_for, subjects_of(trigger.predicate), None,
                                       "denied_poll_budget", denied, revision=item.revision))
            else:
                claims.append(_Claim(item, trigger, slot, window.count - 1))
    return claims, early


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


async def _advance(tx: Connection, item: DueDefinition, window: DueWindow, now: datetime) -> None:
    cursor = window.last.scheduled_for if window.last is not None else item.cursor_at
    next_due = window.next_slot.scheduled_for if window.next_slot is not None else None
    await tx.execute("definitions_advance", [item.tenant_id], [item.definition_id], [cursor],
                     [item.slots_seen + window.count], [next_due],
                     ["completed" if window.ended else "active"], now)


async def _poll_budget(tx: Connection, item: DueDefinition, spec: Spec,
                       slot: Slot) -> str | tuple[datetime, datetime, int] | None:
    """The polling budget for ``slot``: ``None`` without a limit; the reason when it is
    exhausted; else the (period start, period end, limit) the poll is charged to."""
    limit = spec.limits.max_polls_per_period
    if limit is None:
        return None
    start, end = budget_period(slot.scheduled_for, spec.limits.period, load_zone(spec.zone))
    row = await tx.fetchrow("poll_budget_for", item.tenant_id, item.definition_id,
                            USER_BINDING_ID, start)
    cap, used = (row["poll_limit"], row["used"]) if row else (limit, 0)
    if used >= cap:
        return (f"polling budget exhausted: {used} of {cap} polls this {spec.limits.period.value} "
                f"(until {format_utc(end)}); nothing was read")
    return start, end, cap


# ---------------------------------------------------------------- step 2: read


async def _read(claim: _Claim, sources: SourceRegistry, clock: Clock,
                limit_seconds: float) -> tuple[datetime, dict[str, Observation]]:
    """Read every subject of the predicate; outside any transaction. Whatever a source
    does — raise, hang past ``limit_seconds``, return something that is not a sound
    observation — becomes an observation with status failed or timed_out."""
    wanted = claim.trigger.source
    read_at = clock.now()
    observations: dict[str, Observation] = {}

    async def read_one(subject: str) -> None:
        observations[subject] = await _read_subject(wanted.name, wanted.version, subject,
                                                    sources, read_at, limit_seconds)

    async with anyio.create_task_group() as tg:  # a definition's subjects concurrently
        for subject in subjects_of(claim.trigger.predicate):
            tg.start_soon(read_one, subject)
    return read_at, observations


async def _read_subject(name: str, version: str, subject: str, sources: SourceRegistry,
                        read_at: datetime, limit_seconds: float) -> Observation:
    try:
        source = sources.get(name)
    except UnknownSource as exc:
        return _unusable(name, version, subject, read_at, ObservationStatus.FAILED, str(exc))
    if source.version != version:
        return _unusable(name, source.version, subject, read_at, ObservationStatus.FAILED,
                         f"source {name} is version {source.version}; the definition was "
                         f"confirmed with version {version}")
    try:
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
    required = ("observation_id", "subject", "source", "source_version", "detail")
    for name in ("unit", "currency", *required):
        text = getattr(observation, name)
        if text is None and name not in required:
            continue
        limit = {"detail": 2000, "observation_id": 1024}.get(name, 256)
        if not isinstance(text, str) or len(text) > limit or "\x00" in text:
            return f"{name}: not a string of at most {limit} characters without NUL"
    if not isinstance(observation.status, ObservationStatus):
        return f"status {observation.status!r}"
    return None


def _unusable(name: str, version: str, subject: str, at: datetime, status: ObservationStatus,
              detail: str) -> Observation:
    return Observation(name, version, subject, f"{subject}@unread", None, None, None, None, at,
                       status, detail)


# ---------------------------------------------------------------- step 3: decide


async def _decide_durably(db: Database, clock: Clock,
                          chunk: list[tuple[_Claim, datetime, Mapping[str, Observation]]],
                          actor: str, registry: Registry) -> list[PollEvent]:
    """Decide a chunk of polls in one transaction; after a lost COMMIT
    acknowledgement, settle it and read each poll back by its key, deciding (alone)
    only those that did not commit. Nothing is decided twice."""
    evaluated = [(claim, read_at, evaluate(claim.trigger.predicate, observations, read_at))
                 for claim, read_at, observations in chunk]
    try:
        async with db.transaction() as tx:
            return [await _decide(tx, clock, claim, read_at, evaluation, actor, registry)
                    for claim, read_at, evaluation in evaluated]
    except CommitOutcomeUnknown as lost:
        await db.settle(lost)
    except StoreError as exc:  # one poll the store refused: decide the others alone
        if len(evaluated) == 1:
            return [await _refused(db, clock, *evaluated[0], exc)]
        log.warning("a chunk of %d polls was refused (%s); deciding them one by one",
                    len(evaluated), exc)
        return [event for one in evaluated
                for event in await _decide_durably_one(db, clock, one, actor, registry)]
    events = []
    for claim, read_at, evaluation in evaluated:
        row = await db.fetchrow("condition_poll_get", claim.item.tenant_id,
                                claim.item.definition_id, USER_BINDING_ID, claim.slot.key)
        if row is not None and row["status"] == "decided":
            log.warning("lost COMMIT acknowledgement: poll %s of %s was decided (%s)",
                        claim.slot.key, claim.item.definition_id, row["action"])
            events.append(_event(claim, evaluation, row["action"], row["reason"], row["task_id"],
                                 recovered=True))
            continue
        events.extend(await _decide_durably_one(db, clock, (claim, read_at, evaluation), actor,
                                                registry))
    return events


async def _decide(tx: Connection, clock: Clock, claim: _Claim, read_at: datetime,
                  evaluation: Evaluation, actor: str, registry: Registry) -> PollEvent:
    """Decide one poll inside ``tx`` (see the module docstring, step 3); the caller's
    transaction may hold several polls."""
    item, trigger, slot = claim.item, claim.trigger, claim.slot
    binding_id = USER_BINDING_ID
    now = clock.now()
    poll = await tx.fetchrow("condition_poll_lock", item.tenant_id, item.definition_id,
                             binding_id, slot.key)
    if poll is None or poll["status"] != "reading":
        # decided already (an abandoned sweep, or our own commit read back)
        action = poll["action"] if poll else "abandoned"
        return _event(claim, evaluation, action, "already decided", poll and poll["task_id"])
    row = await tx.fetchrow("definition_lock", item.tenant_id, item.definition_id)
    # 'completed' is fine when the fence did not move: the claim itself completes a
    # definition whose ends were reached, and its last poll still counts
    if (row is None or row["status"] not in ("active", "completed") or row["fence"] != item.fence
            or row["effective_revision"] != item.revision):
        reason = ("the definition changed while its source was read (" + (
            "it no longer exists" if row is None else
            f"status {row['status']}, fence {item.fence} -> {row['fence']}, revision "
            f"{item.revision} -> {row['effective_revision']}") + "); nothing admitted")
        await _record(tx, claim, read_at, evaluation, "fenced_out", reason, None, now)
        return _event(claim, evaluation, "fenced_out", reason, None)
    state_row = await tx.fetchrow("condition_state_lock", item.tenant_id, item.definition_id,
                                  binding_id)
    state = _state(state_row, trigger.condition_key)
    if (state_row is not None and state_row["condition_key"] == trigger.condition_key
            and state_row["decided_through"] > slot.scheduled_for):
        reason = (f"overtaken: the poll of {format_utc(state_row['decided_through'])} was "
                  f"decided first; this older reading changes nothing ({evaluation.reason})")
        await _record(tx, claim, read_at, evaluation, "superseded", reason, None, now)
        return _event(claim, evaluation, "superseded", reason, None)
    edge = step(state, evaluation.verdict, read_at, trigger.mode, trigger.cooldown)
    if state.latched and trigger.mode.value == "first_match":
        # a revision that kept the predicate re-activated a latched first_match: it has
        # fired once already, so it completes again instead of polling forever
        await tx.execute("definition_complete", item.tenant_id, item.definition_id, now)
    action, reason, task_id, new_state = edge.action.value, edge.reason, None, edge.state
    if edge.action is EdgeAction.FIRE:
        decision, why, task_id = await _admit(tx, claim, evaluation, read_at, now, actor,
                                              registry, edge.reason)
        if decision is Decision.ADMITTED:
            reason = f"{edge.reason}; {evaluation.reason}"
            if trigger.mode.value == "first_match":
                await tx.execute("definition_complete", item.tenant_id, item.definition_id, now)
        else:
            action, reason, new_state = decision.value, f"{edge.reason}, but {why}", \
                not_admitted(state)
    elif edge.action is EdgeAction.SUPPRESSED_COOLDOWN:
        reason = edge.reason
    else:
        reason = f"{evaluation.reason} ({edge.reason})" if evaluation.reason != edge.reason \
            else edge.reason
    await tx.execute("condition_state_upsert", item.tenant_id, item.definition_id, binding_id,
                     trigger.condition_key, item.revision, new_state.last_definite,
                     new_state.latched, new_state.last_fired_at, now, slot.scheduled_for)
    await _record(tx, claim, read_at, evaluation, action, reason, task_id, now)
    return _event(claim, evaluation, action, reason, task_id)


async def _decide_durably_one(db: Database, clock: Clock,
                              one: tuple[_Claim, datetime, Evaluation], actor: str,
                              registry: Registry) -> list[PollEvent]:
    claim, read_at, evaluation = one
    try:
        async with db.transaction() as tx:
            return [await _decide(tx, clock, claim, read_at, evaluation, actor, registry)]
    except StoreError as exc:
        return [await _refused(db, clock, claim, read_at, evaluation, exc)]


async def _refused(db: Database, clock: Clock, claim: _Claim, read_at: datetime,
                   evaluation: Evaluation, exc: Exception) -> PollEvent:
    """Record a poll whose decision the store refused as ``failed`` (no receipt, nothing
    admitted, the state untouched), so the poller goes on and the timeline says why."""
    log.error("poll %s of %s could not be decided: %s", claim.slot.key,
              claim.item.definition_id, exc)
    reason = f"the store refused this poll's decision ({exc}); nothing admitted"[:2000]
    await db.execute("condition_poll_decide", claim.item.tenant_id, claim.item.definition_id,
                     USER_BINDING_ID, claim.slot.key, read_at, evaluation.verdict.value,
                     "failed", reason, None, clock.now())
    return _event(claim, evaluation, "failed", reason, None)


def _state(row: Any, key: str) -> ConditionState:
    """The stored state, or a fresh one when the source, predicate or mode changed."""
    if row is None or row["condition_key"] != key:
        return ConditionState()
    return ConditionState(row["last_definite"], row["latched"], row["last_fired_at"])


async def _admit(tx: Connection, claim: _Claim, evaluation: Evaluation, read_at: datetime,
                 now: datetime, actor: str, registry: Registry,
                 edge_reason: str) -> tuple[Decision, str, int | None]:
    """The fire's admission: overrun and task budget as for any occurrence; the
    occurrence (kind ``condition``) and its task, with the observations that fired it."""
    item, slot = claim.item, claim.slot
    spec = item.compiled
    units = await units_of(item, registry)
    assert isinstance(units, list) and units, "a user definition has its owner binding"
    tenant_id, binding_id, binding = units[0]
    timing = occurrence_timing(slot, jitter=timedelta(0), late_grace=spec.late_grace,
                               key_parts=())
    lateness = LatenessVerdict(Decision.ADMITTED, False, timedelta(0),
                               f"condition true at {format_utc(read_at)}")
    cand = Candidate(binding, tenant_id, binding_id, slot, timing, lateness, kind="condition")
    plan = Plan(item, DueWindow(1, slot, slot, None, None, None), (cand,),
                ((tenant_id, binding_id),), manual=False)
    key = (tenant_id, item.definition_id, binding_id)
    active = (await active_tasks(tx, [(plan, cand)])).get(key, [])
    budgets, periods = await budget_states(tx, [(plan, cand)])
    verdict = decide_admission(lateness, spec.overrun, active, budgets.get(key))
    claimed = await tx.fetchval(
        "occurrence_insert", tenant_id, item.definition_id, binding_id, slot.key, "condition",
        item.tenant_id, item.revision, slot.scheduled_for, timing.not_before, timing.expires_at,
        slot.wall, verdict.decision.value,
        f"{edge_reason}; {evaluation.reason}" if verdict.decision is Decision.ADMITTED
        else verdict.reason, tzdata_version(), now, actor)
    if claimed is None:
        return Decision.SKIPPED_OVERRUN, "this poll slot already has an occurrence", None
    if verdict.decision is not Decision.ADMITTED:
        return verdict.decision, verdict.reason, None
    row = task_row(plan, cand, verdict)
    params = dict(row[10])
    params["trigger"] = {"verdict": evaluation.verdict.value, "reason": evaluation.reason,
                         "polled_at": format_utc(read_at),
                         "observations": [leaf.observation.to_json() | {
                             "verdict": leaf.verdict.value, "op": leaf.comparison.op,
                             "threshold": leaf.comparison.threshold}
                             for leaf in evaluation.leaves if leaf.observation is not None]}
    await insert_tasks(tx, [(*row[:10], params, *row[11:])], now)
    await tx.execute("stage_tasks_clear")  # the next poll of this transaction stages anew
    if verdict.consumes_budget and key in periods:
        start, end, limit = periods[key]
        await tx.execute("budget_consume", [key[0]], [key[1]], [key[2]], [start], [end], [limit])
    if verdict.cancel:
        await tx.execute("tasks_cancel_previous", [tenant_id] * len(verdict.cancel),
                         list(verdict.cancel),
                         "cancelled: a newer occurrence was admitted (cancel_previous)", now)
    task_id = await tx.fetchval("task_id_for", tenant_id, item.definition_id, binding_id,
                                slot.key, "condition")
    return Decision.ADMITTED, verdict.reason, task_id


async def _record(tx: Connection, claim: _Claim, read_at: datetime, evaluation: Evaluation,
                  action: str, reason: str, task_id: int | None, now: datetime) -> None:
    item, slot = claim.item, claim.slot
    leaves = [leaf for leaf in evaluation.leaves if leaf.observation is not None]
    seen: dict[str, Any] = {}
    for leaf in leaves:  # one receipt per subject (a subject compared twice: first verdict)
        seen.setdefault(leaf.comparison.subject, leaf)
    if seen:
        obs = [leaf.observation for leaf in seen.values()]
        await tx.execute(
            "observation_receipts_insert", item.tenant_id, item.definition_id, USER_BINDING_ID,
            slot.key, [o.subject for o in obs], [o.source for o in obs],
            [o.source_version for o in obs], [o.observation_id for o in obs],
            [o.value for o in obs], [o.unit for o in obs], [o.currency for o in obs],
            [o.as_of for o in obs], [o.fetched_at for o in obs], [o.status.value for o in obs],
            [o.detail for o in obs], [leaf.verdict.value for leaf in seen.values()])
    await tx.execute("condition_poll_decide", item.tenant_id, item.definition_id, USER_BINDING_ID,
                     slot.key, read_at, evaluation.verdict.value, action, reason[:2000], task_id,
                     now)


def _event(claim: _Claim, evaluation: Evaluation, action: str, reason: str,
           task_id: int | None, *, recovered: bool = False) -> PollEvent:
    return PollEvent(claim.item.tenant_id, claim.item.definition_id, claim.slot.key,
                     claim.slot.scheduled_for, subjects_of(claim.trigger.predicate),
                     evaluation.verdict.value, action, reason, task_id, claim.item.revision,
                     tuple(leaf.observation for leaf in evaluation.leaves
                           if leaf.observation is not None), recovered)
