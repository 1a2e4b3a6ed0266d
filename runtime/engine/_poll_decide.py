"""The poller, step 3: deciding a chunk of read polls in one short transaction,
set-based (DESIGN "Conditions (three-valued)", "Admission", "Scale").

One transaction per chunk, whatever its size: one statement locks the chunk's poll
rows and definitions (in key order, so two pollers never deadlock), another reads the
condition states (only the holder of a definition's lock writes its state); the pure
:func:`triggers.judge_poll` decides each poll on its own (its own fence and revision
recheck, its own state); the fires go through the admission rules
of any occurrence (overrun, task budget: :func:`triggers.decide_admission`) with one
statement per kind of row (occurrences, tasks, budgets, cancellations); and one
statement (``condition_polls_decide``) writes every receipt, condition state,
completion and poll decision. A fire that is not admitted keeps the state from before
(nothing latches); a first_match latches in the transaction that admits its task.

A lost COMMIT acknowledgement is settled and each poll read back by its key; only the
polls that did not commit are decided (alone). A chunk the store refuses is decided
poll by poll, and a poll it still refuses is recorded ``failed``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from watchkeeper.triggers import (
    USER_BINDING_ID,
    ConditionState,
    ConditionTrigger,
    Decision,
    DefinitionFacts,
    DueWindow,
    Evaluation,
    LatenessVerdict,
    Observation,
    PollJudgement,
    Slot,
    StoredCondition,
    admitted,
    decide_admission,
    format_utc,
    judge_poll,
    occurrence_timing,
    refused,
    tzdata_version,
)

from .._errors import CommitOutcomeUnknown
from ..store._db import Connection, Database, StoreError
from ._admission import active_tasks, budget_states, insert_tasks, task_row
from ._clock import Clock
from ._registry import Registry
from ._tick import Candidate, DueDefinition, Plan, epoch_us, units_of

__all__ = ["Claim", "PollEvent", "Polled", "decide_polls", "poll_event", "stage_receipts",
           "stored_condition", "write_polls"]

log = logging.getLogger("watchkeeper.conditions")

PLAN_PER_BATCH = 50
"""From this many polls a transaction plans its statements for its own keys
(``admission_planner``); a smaller one keeps the cached plans (planning would cost more
than it saves)."""


@dataclass(frozen=True, slots=True)
class Claim:
    """A claimed poll: the definition as locked at the claim, its trigger, the slot, and
    how many older due slots it superseded."""

    item: DueDefinition
    trigger: ConditionTrigger
    slot: Slot
    superseded: int


Polled = tuple[Claim, datetime, Evaluation]
"""A claim, when its source was read (aware), and the predicate's evaluation."""


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


def poll_event(claim: Claim, evaluation: Evaluation, action: str, reason: str,
               task_id: int | None, *, recovered: bool = False) -> PollEvent:
    """The event of a decided poll."""
    return PollEvent(claim.item.tenant_id, claim.item.definition_id, claim.slot.key,
                     claim.slot.scheduled_for, claim.trigger.subjects,
                     evaluation.verdict.value, action, reason, task_id, claim.item.revision,
                     tuple(leaf.observation for leaf in evaluation.leaves
                           if leaf.observation is not None), recovered)


async def decide_polls(db: Database, clock: Clock, chunk: Sequence[Polled], actor: str,
                       registry: Registry) -> list[PollEvent]:
    """Decide ``chunk`` (sorted by tenant and definition, one poll per definition) in one
    transaction; return its events in chunk order (see the module docstring for a lost
    COMMIT and a refusal).

    Raises:
        DatabaseUnavailable: the store could not be reached (the polls stay ``reading``
            and are decided ``abandoned`` later; nothing is admitted twice).
    """
    try:
        async with db.transaction() as tx:
            return await _decide(tx, clock.now(), chunk, actor, registry)
    except CommitOutcomeUnknown as lost:
        await db.settle(lost)
    except StoreError as exc:  # one poll the store refused: decide the others alone
        if len(chunk) == 1:
            return [await _refused(db, clock, *chunk[0], exc)]
        log.warning("a chunk of %d polls was refused (%s); deciding them one by one",
                    len(chunk), exc)
        return [event for one in chunk for event in await _decide_alone(db, clock, one, actor,
                                                                        registry)]
    rows = await db.fetch("condition_polls_get", *_key_arrays(chunk))
    found = {(r["tenant_id"], r["definition_id"], r["slot"]): r for r in rows}
    events = []
    for polled in chunk:
        claim, _, evaluation = polled
        row = found.get((claim.item.tenant_id, claim.item.definition_id, claim.slot.key))
        if row is not None and row["status"] == "decided":
            log.warning("lost COMMIT acknowledgement: poll %s of %s was decided (%s)",
                        claim.slot.key, claim.item.definition_id, row["action"])
            events.append(poll_event(claim, evaluation, row["action"], row["reason"],
                                     row["task_id"], recovered=True))
            continue
        events.extend(await _decide_alone(db, clock, polled, actor, registry))
    return events


async def _decide_alone(db: Database, clock: Clock, polled: Polled, actor: str,
                        registry: Registry) -> list[PollEvent]:
    try:
        async with db.transaction() as tx:
            return await _decide(tx, clock.now(), [polled], actor, registry)
    except StoreError as exc:
        return [await _refused(db, clock, *polled, exc)]


async def _refused(db: Database, clock: Clock, claim: Claim, read_at: datetime,
                   evaluation: Evaluation, exc: Exception) -> PollEvent:
    """Record a poll whose decision the store refused as ``failed`` (no receipt, nothing
    admitted, the state untouched), so the poller goes on and the timeline says why."""
    log.error("poll %s of %s could not be decided: %s", claim.slot.key,
              claim.item.definition_id, exc)
    reason = f"the store refused this poll's decision ({exc}); nothing admitted"[:2000]
    async with db.transaction() as tx:
        await write_polls(tx, clock.now(), [(claim, read_at, evaluation, "failed", reason, None)],
                          [], [], [])
    return poll_event(claim, evaluation, "failed", reason, None)


def _key_arrays(chunk: Sequence[Polled]) -> tuple[list[str], list[str], list[str], list[str]]:
    return ([c.item.tenant_id for c, _, _ in chunk], [c.item.definition_id for c, _, _ in chunk],
            [USER_BINDING_ID] * len(chunk), [c.slot.key for c, _, _ in chunk])


async def _decide(tx: Connection, now: datetime, chunk: Sequence[Polled], actor: str,
                  registry: Registry) -> list[PollEvent]:
    """Lock, judge, admit the fires and write, inside ``tx``."""
    tenants, definitions, bindings, slots = _key_arrays(chunk)
    if len(chunk) >= PLAN_PER_BATCH:
        await tx.execute("admission_planner")  # plans for this batch's own keys
    polls = {(r["tenant_id"], r["definition_id"], r["slot"]): r
             for r in await tx.fetch("condition_polls_lock", tenants, definitions, bindings,
                                     slots)}
    defs = {key[:2]: DefinitionFacts(r["definition_status"], r["fence"],
                                     r["effective_revision"]) for key, r in polls.items()}
    if len(polls) < len(chunk):  # a definition (or a poll) that is gone
        missing = [(t, d, b, s) for t, d, b, s in zip(tenants, definitions, bindings, slots,
                                                      strict=True) if (t, d, s) not in polls]
        for r in await tx.fetch("condition_polls_lock_alone", *_columns(missing, 4)):
            polls[(r["tenant_id"], r["definition_id"], r["slot"])] = r
    states = {(r["tenant_id"], r["definition_id"]): r
              for r in await tx.fetch("condition_states_get", tenants, definitions, bindings)}
    judged: list[tuple[Polled, PollJudgement]] = []
    events: dict[int, PollEvent] = {}
    for index, polled in enumerate(chunk):
        claim, read_at, evaluation = polled
        item = claim.item
        poll = polls.get((item.tenant_id, item.definition_id, claim.slot.key))
        if poll is None or poll["status"] != "reading":
            # decided already (an abandoned sweep, or our own commit read back)
            events[index] = poll_event(claim, evaluation, poll["action"] if poll else "abandoned",
                                       "already decided", poll and poll["task_id"])
            continue
        judged.append((polled, judge_poll(
            current=defs.get((item.tenant_id, item.definition_id)),
            claimed_fence=item.fence, claimed_revision=item.revision,
            stored=stored_condition(states.get((item.tenant_id, item.definition_id))),
            condition_key=claim.trigger.condition_key, mode=claim.trigger.mode,
            cooldown=claim.trigger.cooldown, slot_at=claim.slot.scheduled_for, read_at=read_at,
            evaluation=evaluation)))
    fires = [(polled, judgement) for polled, judgement in judged if judgement.fires]
    outcomes = await _admit(tx, fires, now, actor, registry) if fires else {}
    records: list[tuple[Claim, datetime, Evaluation, str, str, int | None]] = []
    states_out, completed = [], []
    decided = iter(judged)
    for index in range(len(chunk)):
        if index in events:
            continue
        (claim, read_at, evaluation), judgement = next(decided)
        task_id = None
        if judgement.fires:
            decision, why, task_id = outcomes[(claim.item.tenant_id, claim.item.definition_id)]
            judgement = (admitted(judgement, evaluation, claim.trigger.mode)
                         if decision is Decision.ADMITTED else refused(judgement, decision, why))
        if judgement.state is not None:
            states_out.append((claim, judgement.state, claim.slot.scheduled_for))
        if judgement.complete:
            completed.append((claim.item.tenant_id, claim.item.definition_id))
        records.append((claim, read_at, evaluation, judgement.action, judgement.reason, task_id))
        events[index] = poll_event(claim, evaluation, judgement.action, judgement.reason, task_id)
    await write_polls(tx, now, records, records, states_out, completed)
    return [events[index] for index in range(len(chunk))]


def stored_condition(row: Any) -> StoredCondition | None:
    """A ``condition_states_get`` row as the judge reads it (``None``: no state yet)."""
    if row is None:
        return None
    return StoredCondition(row["condition_key"], ConditionState(
        row["last_definite"], row["latched"], row["last_fired_at"]), row["decided_through"])


Record = tuple[Claim, datetime, Evaluation, str, str, "int | None"]
"""A poll to record: claim, read_at, evaluation, action, reason, task id."""


async def write_polls(tx: Connection, now: datetime, decisions: Sequence[Record],
                      receipts: Sequence[Record],
                      states: Sequence[tuple[Claim, ConditionState, datetime]],
                      completed: Sequence[tuple[str, str]]) -> None:
    """Write, inside ``tx``, with ``condition_polls_decide`` at ``now``: the receipts of
    ``receipts`` (one per subject; a subject compared twice: its first verdict; an
    observation object shared by several polls is staged once), the condition states
    ``(claim, state, decided_through)``, the definitions to complete, and the decisions
    of ``decisions`` (polls still ``reading``). The rows are COPYed into the session's
    staging tables (instants as :func:`._tick.epoch_us`): binary COPY encodes a row in
    a fraction of the work of the same values as arrays of parameters."""
    await stage_receipts(tx, [(c, r, e) for c, r, e, _, _, _ in receipts], states)
    poll_rows = [(c.item.tenant_id, c.item.definition_id, USER_BINDING_ID, c.slot.key,
                  epoch_us(read_at), e.verdict.value, action, reason[:2000], task_id)
                 for c, read_at, e, action, reason, task_id in decisions]
    await tx.stage("wk_stage_decisions", DECISION_COLUMNS, poll_rows)
    await tx.execute("condition_polls_decide", now, *_columns(completed, 2))


async def stage_receipts(tx: Connection, receipts: Sequence[Polled],
                         states: Sequence[tuple[Claim, ConditionState, datetime]]) -> None:
    """COPY into the transaction's staging tables the observation receipts of ``receipts``
    (one per subject; a subject compared twice: its first verdict; an observation object
    shared by several polls is staged once) and the condition states ``(claim, state,
    decided_through)``, for the statement that writes them (``condition_polls_decide``,
    or ``condition_polls_claim`` for the polls decided at their claim)."""
    receipt_rows: list[tuple[Any, ...]] = []
    observed: dict[int, int] = {}  # id(observation) -> its ordinal (1-based)
    observation_rows: list[tuple[Any, ...]] = []
    for claim, _, evaluation in receipts:
        seen: dict[str, Any] = {}
        for leaf in evaluation.leaves:
            if leaf.observation is not None:
                seen.setdefault(leaf.comparison.subject, leaf)
        item = claim.item
        for leaf in seen.values():
            o = leaf.observation
            ordinal = observed.get(id(o))
            if ordinal is None:
                ordinal = observed[id(o)] = len(observation_rows) + 1
                observation_rows.append((ordinal, o.subject, o.source, o.source_version,
                                         o.observation_id, o.value, o.unit, o.currency,
                                         epoch_us(o.as_of), epoch_us(o.fetched_at),
                                         o.status.value, o.detail))
            receipt_rows.append((item.tenant_id, item.definition_id, USER_BINDING_ID,
                                 claim.slot.key, ordinal, leaf.verdict.value))
    state_rows = [(c.item.tenant_id, c.item.definition_id, USER_BINDING_ID,
                   c.trigger.condition_key, c.item.revision, s.last_definite, s.latched,
                   epoch_us(s.last_fired_at), epoch_us(through)) for c, s, through in states]
    # staged empty too: the statement reads them, and each exists only in the transaction
    # that stages it
    await tx.stage("wk_stage_observations", OBSERVATION_COLUMNS, observation_rows)
    await tx.stage("wk_stage_poll_receipts", RECEIPT_COLUMNS, receipt_rows)
    await tx.stage("wk_stage_states", STATE_COLUMNS, state_rows)


OBSERVATION_COLUMNS = ("n", "subject", "source", "source_version", "observation_id", "value",
                       "unit", "currency", "as_of_us", "fetched_at_us", "status", "detail")
"""The columns of ``wk_stage_observations``."""
RECEIPT_COLUMNS = ("tenant_id", "definition_id", "binding_id", "slot", "observation", "verdict")
"""The columns of ``wk_stage_poll_receipts``."""
STATE_COLUMNS = ("tenant_id", "definition_id", "binding_id", "condition_key", "revision",
                 "last_definite", "latched", "last_fired_at_us", "decided_through_us")
"""The columns of ``wk_stage_states``."""
DECISION_COLUMNS = ("tenant_id", "definition_id", "binding_id", "slot", "read_at_us",
                    "verdict", "action", "reason", "task_id")
"""The columns of ``wk_stage_decisions``."""


def _columns(rows: Sequence[Sequence[Any]], width: int) -> list[list[Any]]:
    """Rows as ``width`` column lists (the unnest arrays of a statement)."""
    if not rows:
        return [[] for _ in range(width)]
    return [list(column) for column in zip(*rows, strict=True)]


async def _admit(tx: Connection, fires: Sequence[tuple[Polled, PollJudgement]], now: datetime,
                 actor: str, registry: Registry
                 ) -> dict[tuple[str, str], tuple[Decision, str, int | None]]:
    """The fires' admissions, as for any occurrence: overrun and task budget decided by
    :func:`triggers.decide_admission`; the occurrences (kind ``condition``), and for the
    admitted ones the tasks (with the observations that fired them), budgets and
    cancellations, one statement each. Returns (decision, why, task id) per
    (tenant, definition)."""
    pairs: list[tuple[Plan, Candidate]] = []
    for (claim, read_at, _), _ in fires:
        item, slot = claim.item, claim.slot
        units = await units_of(item, registry)
        assert isinstance(units, list) and units, "a user definition has its owner binding"
        tenant_id, binding_id, binding = units[0]
        timing = occurrence_timing(slot, jitter=timedelta(0), late_grace=item.compiled.late_grace,
                                   key_parts=())
        lateness = LatenessVerdict(Decision.ADMITTED, False, timedelta(0),
                                   f"condition true at {format_utc(read_at)}")
        cand = Candidate(binding, tenant_id, binding_id, slot, timing, lateness, kind="condition")
        pairs.append((Plan(item, DueWindow(1, slot, slot, None, None, None), (cand,),
                           ((tenant_id, binding_id),), manual=False), cand))
    active = await active_tasks(tx, pairs)
    budgets, periods = await budget_states(tx, pairs)
    verdicts = []
    occurrence_rows = []
    for ((_, _, evaluation), judgement), (plan, cand) in zip(fires, pairs, strict=True):
        key = (cand.tenant_id, plan.due.definition_id, cand.binding_id)
        verdict = decide_admission(cand.lateness, plan.due.compiled.overrun, active.get(key, []),
                                   budgets.get(key))
        verdicts.append(verdict)
        assert judgement.edge is not None
        item, slot = plan.due, cand.slot
        occurrence_rows.append((
            cand.tenant_id, item.definition_id, cand.binding_id, slot.key, item.tenant_id,
            item.revision, slot.scheduled_for, cand.timing.not_before, cand.timing.expires_at,
            slot.wall, verdict.decision.value,
            f"{judgement.edge.reason}; {evaluation.reason}"
            if verdict.decision is Decision.ADMITTED else verdict.reason))
    columns = _columns(occurrence_rows, 12)
    inserted = {(r["tenant_id"], r["definition_id"], r["binding_id"], r["slot"]) for r in
                await tx.fetch("occurrences_insert_conditions", *columns[:11], tzdata_version(),
                               now, actor, columns[11])}
    outcomes: dict[tuple[str, str], tuple[Decision, str, int | None]] = {}
    tasks, consumed, cancels, wanted = [], [], [], []
    for ((claim, read_at, evaluation), _), (plan, cand), verdict in zip(fires, pairs, verdicts,
                                                                        strict=True):
        key = (cand.tenant_id, plan.due.definition_id, cand.binding_id)
        definition = (claim.item.tenant_id, claim.item.definition_id)
        if (*key, cand.slot.key) not in inserted:
            outcomes[definition] = (Decision.SKIPPED_OVERRUN,
                                    "this poll slot already has an occurrence", None)
            continue
        if verdict.decision is not Decision.ADMITTED:
            outcomes[definition] = (verdict.decision, verdict.reason, None)
            continue
        row = task_row(plan, cand, verdict)
        params = dict(row[10])
        params["trigger"] = _trigger_params(evaluation, read_at)
        tasks.append((*row[:10], params, *row[11:]))
        if verdict.consumes_budget and key in periods:
            start, end, limit = periods[key]
            consumed.append((*key, start, end, limit))
        cancels.extend((cand.tenant_id, task_id) for task_id in verdict.cancel)
        wanted.append((*key, cand.slot.key, definition, verdict.reason))
    if tasks:
        await insert_tasks(tx, tasks, now)
    if consumed:
        await tx.execute("budget_consume", *_columns(consumed, 6))
    if cancels:
        await tx.execute("tasks_cancel_previous", [c[0] for c in cancels], [c[1] for c in cancels],
                         "cancelled: a newer occurrence was admitted (cancel_previous)", now)
    if wanted:
        ids = {(r["tenant_id"], r["definition_id"], r["binding_id"], r["slot"]): r["task_id"]
               for r in await tx.fetch("task_ids_for", *_columns([w[:4] for w in wanted], 4),
                                       "condition")}
        for *key4, definition, reason in wanted:
            outcomes[definition] = (Decision.ADMITTED, reason, ids.get(tuple(key4)))
    return outcomes


def _trigger_params(evaluation: Evaluation, read_at: datetime) -> dict[str, Any]:
    """What a fired task's params say about why it ran (``params.trigger``)."""
    return {"verdict": evaluation.verdict.value, "reason": evaluation.reason,
            "polled_at": format_utc(read_at),
            "observations": [leaf.observation.to_json() | {
                "verdict": leaf.verdict.value, "op": leaf.comparison.op,
                "threshold": leaf.comparison.threshold}
                for leaf in evaluation.leaves if leaf.observation is not None]}
