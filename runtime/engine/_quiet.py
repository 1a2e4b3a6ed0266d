"""Quiet runs: a replay's polls decided in memory and written as one batch (issue 17).

A replay moves its virtual clock from poll instant to poll instant over a series held
in memory. Most polls are quiet: nothing is admitted, only the poll, its receipts, the
condition state and the definition's cursor are recorded. :class:`QuietRuns` reads
each definition's coming polls ahead (the same source reads the poller makes, at the
same instants), judges them with the same pure functions
(:func:`triggers.quiet_run`, which judges each poll as :func:`triggers.judge_poll`
does) and stops each
definition before its first poll that acts (a fire, a completion) or that the batch
does not cover (a polling budget, the schedule's end, a missed slot). Every poll
before the earliest such instant, of every definition, is then written in one short
transaction — the same rows, column for column, that the poller would have written
one instant at a time (claimed, read and decided at its own instant, by the replay's
poller) — after checking under the definitions' row locks that none changed since
they were read. The instant that acts goes through the full path
(:func:`._poller.poll_once`, admission, worker, outbox).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from watchkeeper.sources import SourceRegistry
from watchkeeper.triggers import (
    USER_BINDING_ID,
    ConditionState,
    ConditionTrigger,
    DefinitionFacts,
    Evaluation,
    PollJudgement,
    Spec,
    StoredCondition,
    evaluate,
    quiet_run,
)

from ..store._db import Database, StoreError
from ..store._specs import spec_from_row
from ._poll_decide import Claim, PollEvent, poll_event
from ._poller import READ_TIMEOUT, read_subject
from ._tick import DueDefinition, gc_paused

__all__ = ["QuietBatch", "QuietRuns"]

LOOKAHEAD = 4096
"""Polls of one definition judged ahead per batch, at most."""
BLOCK = 256
"""Polls of one definition read and judged together."""


@dataclass(frozen=True, slots=True)
class QuietBatch:
    """A written batch: its events (by instant, then definition), its last instant, and
    the instant of the first poll after it that acts (``None``: none before the end)."""

    events: list[PollEvent]
    last: datetime
    acts_at: datetime | None


@dataclass
class _Definition:
    """A definition as loaded for a batch, and what was judged of it."""

    row: Any
    spec: Spec
    item: DueDefinition
    trigger: ConditionTrigger
    polls: list[tuple[Claim, datetime, Evaluation, PollJudgement]] = field(default_factory=list)
    next_due: dict[datetime, datetime] = field(default_factory=dict)  # poll -> the next
    stop: datetime | None = None  # the instant of its first poll not in the batch


class QuietRuns:
    """The quiet runs of one replay tenant's conditions (see the module docstring).

    Args:
        db: the store; sources: the replay's sources; tenant_id: the replay's tenant;
        actor: the replay's poller (claimed_by).
    """

    def __init__(self, db: Database, sources: SourceRegistry, tenant_id: str, actor: str,
                 *, read_timeout: float = READ_TIMEOUT) -> None:
        self.db, self.sources, self.tenant_id, self.actor = db, sources, tenant_id, actor
        self.read_timeout = read_timeout
        self._ahead: dict[tuple[str, int, int], dict[datetime, Evaluation]] = {}

    async def run(self, end: datetime) -> QuietBatch | None:
        """Judge every active definition's polls due at or before ``end`` up to its first
        poll that acts; write every poll before the earliest such instant; return them
        (``None`` when the next poll instant acts, or the definitions changed meanwhile:
        the full path decides it)."""
        rows = await self.db.fetch("replay_conditions", self.tenant_id, USER_BINDING_ID)
        definitions = [self._definition(row) for row in rows]
        # the earliest instant that must go through the poller bounds every definition's
        # run: a polling budget's next poll, then each run's own first poll that acts
        horizon: datetime | None = None
        for d in definitions:
            at = d.row["next_due_at"]
            if at is not None and at <= end and d.spec.limits.max_polls_per_period is not None:
                d.stop = at
                horizon = at if horizon is None else min(horizon, at)
        for d in sorted(definitions, key=lambda d: d.row["next_due_at"] or end):
            if d.spec.limits.max_polls_per_period is None:
                await self._judge(d, end, horizon)
                if d.stop is not None:
                    horizon = d.stop if horizon is None else min(horizon, d.stop)
        kept = [(d, [p for p in d.polls if horizon is None or p[1] < horizon])
                for d in definitions]
        kept = [(d, polls) for d, polls in kept if polls]
        if not kept:
            return None
        try:
            if not await self._write(kept):
                return None
        except _Conflict:
            return None
        with gc_paused():
            events = sorted(((claim.slot.scheduled_for, claim.item.definition_id,
                              poll_event(claim, evaluation, judgement.action, judgement.reason,
                                         None)) for _, polls in kept
                             for claim, _, evaluation, judgement in polls),
                            key=lambda e: (e[0], e[1]))
        acts = [d.stop for d in definitions if d.stop is not None and d.stop == horizon
                and not (len(d.polls) >= LOOKAHEAD and d.polls[-1][1] < horizon)]
        return QuietBatch([e for _, _, e in events], events[-1][0], acts[0] if acts else None)

    def _definition(self, row: Any) -> _Definition:
        spec: Spec = spec_from_row(row)
        trigger = spec.trigger
        assert isinstance(trigger, ConditionTrigger)
        item = DueDefinition(row["tenant_id"], row["definition_id"], row["origin"],
                             row["owner_user_id"], row["fence"], row["effective_revision"],
                             row["spec_hash"], row["cursor_at"], row["slots_seen"], spec.compiled,
                             None)
        return _Definition(row, spec, item, trigger)

    async def _judge(self, d: _Definition, end: datetime, horizon: datetime | None) -> None:
        """Judge ``d``'s coming polls before ``horizon`` (and at or before ``end``) while
        they are quiet, a block of :data:`BLOCK` polls at a time: read (or take from the
        readings kept since an earlier batch) and evaluate each, then
        :func:`triggers.quiet_run`. Set ``d.stop`` to the first poll not judged quiet, if
        it comes before both."""
        row, item, trigger, spec = d.row, d.item, d.trigger, d.spec
        at: datetime | None = row["next_due_at"]
        if at is None or at > end:
            return
        stored = None if row["condition_key"] is None else StoredCondition(
            row["condition_key"], ConditionState(row["last_definite"], row["latched"],
                                                 row["last_fired_at"]),
            row["decided_through"])
        facts = DefinitionFacts(row["status"], item.fence, item.revision)
        cursor, seen = item.cursor_at, item.slots_seen
        ahead = self._ahead.setdefault((item.definition_id, item.revision, item.fence), {})
        for stale in [t for t in ahead if t < at]:
            del ahead[stale]
        while at is not None and at <= end and len(d.polls) < LOOKAHEAD and (
                horizon is None or at < horizon):
            block: list[tuple[datetime, datetime, Evaluation]] = []
            slots, nexts = [], []
            blocked = False  # a poll the batch does not cover (a missed slot, the end)
            while at is not None and at <= end and len(block) < BLOCK and (
                    len(d.polls) + len(block) < LOOKAHEAD) and (horizon is None or at < horizon):
                window = spec.window(cursor, at, seen)
                slot = window.candidate
                if window.count != 1 or slot is None or slot.scheduled_for != at \
                        or window.next_slot is None:
                    blocked = True
                    break
                evaluation = ahead.get(at)
                if evaluation is None:
                    evaluation = ahead[at] = await self._evaluate(trigger, at)
                block.append((at, at, evaluation))
                slots.append(slot)
                cursor, seen = at, seen + 1
                at = window.next_slot.scheduled_for
                nexts.append(at)
            judged, stored = quiet_run(stored, condition_key=trigger.condition_key,
                                       mode=trigger.mode, cooldown=trigger.cooldown,
                                       definition=facts, polls=block)
            for (poll_at, _, evaluation), slot, following, judgement in zip(
                    block, slots, nexts, judged, strict=False):
                d.polls.append((Claim(item, trigger, slot, 0), poll_at, evaluation, judgement))
                d.next_due[poll_at] = following
            if len(judged) < len(block):  # this one acts
                d.stop = block[len(judged)][0]
                return
            if blocked:
                d.stop = at
                return
        d.stop = at if at is not None and at <= end and (horizon is None or at < horizon) \
            else None

    async def _evaluate(self, trigger: ConditionTrigger, at: datetime) -> Evaluation:
        """Read the trigger's subjects at ``at`` as the poller would and evaluate."""
        ref = trigger.source
        seen = {subject: await read_subject(ref.name, ref.version, subject, self.sources, at,
                                            self.read_timeout)
                for subject in trigger.subjects}
        return evaluate(trigger.predicate, seen, at)

    async def _write(self, kept: Sequence[tuple[_Definition, Sequence[Any]]]) -> bool:
        """Write the batch in one transaction (the polls and receipts COPYed into the
        session's staging tables, then ``quiet_polls_write``), if no definition changed
        since it was read (else nothing is written and ``False`` returned)."""
        with gc_paused():
            polls, receipts, definitions = self._rows(kept)
        async with self.db.transaction() as tx:
            locked = await tx.fetch("definitions_lock_batch_wait",
                                    [d.item.tenant_id for d, _ in kept],
                                    [d.item.definition_id for d, _ in kept])
            now = {r["definition_id"]: r for r in locked}
            for d, _ in kept:
                row = now.get(d.item.definition_id)
                if row is None or (row["fence"], row["effective_revision"], row["cursor_at"],
                                   row["status"]) != (d.item.fence, d.item.revision,
                                                      d.item.cursor_at, "active"):
                    return False  # changed meanwhile: the full path decides
            await tx.stage("wk_stage_polls", POLL_COLUMNS, polls)
            await tx.stage("wk_stage_receipts", RECEIPT_COLUMNS, receipts)
            try:
                await tx.fetchval("quiet_polls_write", self.tenant_id, USER_BINDING_ID,
                                  self.actor, *_columns(definitions, 10))
            except StoreError as exc:  # a slot polled already: the full path decides it
                raise _Conflict from exc
        return True

    def _rows(self, kept: Sequence[tuple[_Definition, Sequence[Any]]]
              ) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]], list[tuple[Any, ...]]]:
        """The batch's decided polls (:data:`POLL_COLUMNS`), their receipts
        (:data:`RECEIPT_COLUMNS`) and each definition's advance and final state
        (``quiet_polls_write``'s arrays)."""
        polls: list[tuple[Any, ...]] = []
        receipts: list[tuple[Any, ...]] = []
        definitions: list[tuple[Any, ...]] = []
        for d, judged in kept:
            item = d.item
            ident = item.definition_id
            for claim, at, evaluation, judgement in judged:
                slot = claim.slot  # claimed, read and decided at its own instant
                polls.append((ident, slot.key, at, evaluation.verdict.value, judgement.action,
                              judgement.reason[:2000]))
                seen: dict[str, Any] = {}
                for leaf in evaluation.leaves:  # one receipt per subject: its first verdict
                    if leaf.observation is not None:
                        seen.setdefault(leaf.comparison.subject, leaf)
                for leaf in seen.values():
                    o = leaf.observation
                    receipts.append((ident, slot.key, o.subject, o.source, o.source_version,
                                     o.observation_id, o.value, o.unit, o.currency, o.as_of,
                                     o.fetched_at, o.status.value, o.detail,
                                     leaf.verdict.value))
            _, last_at, _, last = judged[-1]
            assert last.state is not None
            state = last.state
            definitions.append((ident, last_at, item.slots_seen + len(judged),
                                d.next_due[last_at], d.trigger.condition_key, item.revision,
                                item.fence, state.last_definite, state.latched,
                                state.last_fired_at))
        return polls, receipts, definitions


POLL_COLUMNS = ("definition_id", "slot", "scheduled_for", "verdict", "action", "reason")
"""The columns of ``wk_stage_polls``: a quiet poll, claimed, read and decided at its
``scheduled_for`` (``quiet_polls_write`` adds the rest)."""
RECEIPT_COLUMNS = (
    "definition_id", "slot", "subject", "source", "source_version", "observation_id", "value",
    "unit", "currency", "as_of", "fetched_at", "status", "detail", "verdict",
)
"""The columns of ``wk_stage_receipts`` (an ``observation_receipts`` row of the batch's
tenant and binding)."""


def _columns(rows: Sequence[Sequence[Any]], width: int) -> list[list[Any]]:
    if not rows:
        return [[] for _ in range(width)]
    return [list(column) for column in zip(*rows, strict=True)]


class _Conflict(Exception):
    """A batch's poll slot exists already (rolled back)."""
