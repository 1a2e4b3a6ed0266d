"""Deciding a condition's poll (DESIGN "Conditions (three-valued)", "Admission").

The runtime locks a poll, its definition and the condition's stored state, evaluates
the predicate (:func:`triggers._conditions.evaluate`) and asks :func:`judge_poll` what
the poll is: ``fenced_out`` (the definition changed while its source was read),
``superseded`` (a later poll was decided first), or the step of the firstMatch /
everyEdge machine (:func:`triggers._edges.step`) with the reason the timeline shows and
the state to store. A ``fired`` judgement still needs its admission (overrun, task
budget): :func:`admitted` and :func:`refused` give the final record either way (a fire
that is not admitted keeps the state from before: nothing latches, the edge stays
armed).

:func:`quiet_run` steps one definition through consecutive polls whose readings are
known already (a historical replay), as long as each is quiet (nothing to admit),
so the runtime can write such a run in one batch and send only the poll that acts
through the admission transaction.

Pure: instants, states and evaluations are arguments.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from ._conditions import Evaluation
from ._decisions import Decision
from ._edges import ConditionMode, ConditionState, EdgeAction, EdgeStep, not_admitted, step
from ._slots import format_utc

__all__ = ["DefinitionFacts", "PollJudgement", "StoredCondition", "admitted", "judge_poll",
           "quiet_run", "refused"]

FENCED_OUT = "fenced_out"
SUPERSEDED = "superseded"


@dataclass(frozen=True, slots=True)
class DefinitionFacts:
    """A definition as locked when its poll is decided: status, fence, effective revision."""

    status: str
    fence: int
    revision: int


@dataclass(frozen=True, slots=True)
class StoredCondition:
    """The stored condition state of a definition's binding.

    Attributes:
        condition_key: the hash of source, predicate and mode it was kept under.
        state: last definite verdict, latch, last fire.
        decided_through: the latest poll instant (UTC) this state has seen.
    """

    condition_key: str
    state: ConditionState
    decided_through: datetime


@dataclass(frozen=True, slots=True)
class PollJudgement:
    """What a poll is, before (for ``fired``) its admission.

    Attributes:
        action: ``fired``, ``suppressed_cooldown``, ``none``, ``fenced_out`` or
            ``superseded``; after a refused admission, the admission's decision.
        reason: the timeline's reason.
        state: the condition state to store with the poll; ``None`` for ``fenced_out``
            and ``superseded`` (the stored state is left as it is).
        prior: the state before this poll (what a refused fire keeps).
        edge: the machine's step, when it was taken.
        complete: the definition completes with this poll (a latched first_match that a
            revision re-activated; a first_match fire once admitted).
    """

    action: str
    reason: str
    state: ConditionState | None
    prior: ConditionState
    edge: EdgeStep | None = None
    complete: bool = False

    @property
    def fires(self) -> bool:
        """The poll asks for an admission."""
        return self.edge is not None and self.edge.action is EdgeAction.FIRE and \
            self.action == EdgeAction.FIRE.value

    @property
    def quiet(self) -> bool:
        """Nothing to admit and nothing to complete: a ``none`` or ``suppressed_cooldown``
        poll whose state alone is stored."""
        return self.action in _QUIET and not self.complete


_QUIET = frozenset({EdgeAction.NONE.value, EdgeAction.SUPPRESSED_COOLDOWN.value})


def judge_poll(*, current: DefinitionFacts | None, claimed_fence: int, claimed_revision: int,
               stored: StoredCondition | None, condition_key: str, mode: ConditionMode,
               cooldown: timedelta, slot_at: datetime, read_at: datetime,
               evaluation: Evaluation) -> PollJudgement:
    """Judge one claimed poll.

    Args:
        current: the definition as locked now (``None``: it no longer exists).
        claimed_fence, claimed_revision: what the poll was claimed under.
        stored: the stored condition state (``None``: none yet).
        condition_key: the effective trigger's key (:attr:`ConditionTrigger.condition_key`):
            a stored state kept under another key is not this condition's (a fresh one
            is used).
        slot_at: the poll slot's instant; read_at: when the source was read (both aware).
        evaluation: the predicate's verdict on what was read.

    ``current`` must be ``active`` or ``completed`` (the claim itself completes a
    definition whose ends were reached) with the claimed fence and revision, else the
    poll is ``fenced_out``. A stored state that has seen a later poll makes this one
    ``superseded``. Otherwise the machine steps (:func:`step`).
    """
    prior = _state(stored, condition_key)
    if (current is None or current.status not in ("active", "completed")
            or current.fence != claimed_fence or current.revision != claimed_revision):
        changed = ("it no longer exists" if current is None else
                   f"status {current.status}, fence {claimed_fence} -> {current.fence}, "
                   f"revision {claimed_revision} -> {current.revision}")
        return PollJudgement(FENCED_OUT, f"the definition changed while its source was read "
                             f"({changed}); nothing admitted", None, prior)
    if stored is not None and stored.condition_key == condition_key \
            and stored.decided_through > slot_at:
        return PollJudgement(
            SUPERSEDED, f"overtaken: the poll of {format_utc(stored.decided_through)} was "
            f"decided first; this older reading changes nothing ({evaluation.reason})",
            None, prior)
    edge = step(prior, evaluation.verdict, read_at, mode, cooldown)
    complete = prior.latched and mode is ConditionMode.FIRST_MATCH
    if edge.action is not EdgeAction.NONE:  # fired (until admitted), suppressed_cooldown
        reason = edge.reason
    else:
        reason = f"{evaluation.reason} ({edge.reason})" if evaluation.reason != edge.reason \
            else edge.reason
    return PollJudgement(edge.action.value, reason, edge.state, prior, edge, complete)


def admitted(judgement: PollJudgement, evaluation: Evaluation,
             mode: ConditionMode) -> PollJudgement:
    """A ``fired`` judgement whose task was admitted: the edge's state is stored (a
    first_match latches and completes)."""
    assert judgement.edge is not None
    return PollJudgement(judgement.action, f"{judgement.edge.reason}; {evaluation.reason}",
                         judgement.edge.state, judgement.prior, judgement.edge,
                         judgement.complete or mode is ConditionMode.FIRST_MATCH)


def refused(judgement: PollJudgement, decision: Decision, why: str) -> PollJudgement:
    """A ``fired`` judgement whose admission was refused (``decision``, e.g.
    ``skipped_overrun``, ``denied_budget``): the state from before is kept."""
    assert judgement.edge is not None
    return PollJudgement(decision.value, f"{judgement.edge.reason}, but {why}",
                         not_admitted(judgement.prior), judgement.prior, judgement.edge,
                         judgement.complete)


def quiet_run(stored: StoredCondition | None, *, condition_key: str, mode: ConditionMode,
              cooldown: timedelta, definition: DefinitionFacts,
              polls: Iterable[tuple[datetime, datetime, Evaluation]]
              ) -> tuple[list[PollJudgement], StoredCondition | None]:
    """Judge consecutive polls of one definition (each ``(slot_at, read_at,
    evaluation)``, in order, claimed under ``definition``'s fence and revision) while
    they are quiet; stop before the first that is not (a fire, a completion).

    Returns the quiet judgements and the stored state after them (``stored`` itself
    when there were none). Each poll is judged exactly as :func:`judge_poll` would judge
    it with the state the one before it left.
    """
    out: list[PollJudgement] = []
    for slot_at, read_at, evaluation in polls:
        judgement = judge_poll(current=definition, claimed_fence=definition.fence,
                               claimed_revision=definition.revision, stored=stored,
                               condition_key=condition_key, mode=mode, cooldown=cooldown,
                               slot_at=slot_at, read_at=read_at, evaluation=evaluation)
        if not judgement.quiet or judgement.state is None:
            break
        out.append(judgement)
        stored = StoredCondition(condition_key, judgement.state, slot_at)
    return out, stored


def _state(stored: StoredCondition | None, key: str) -> ConditionState:
    """The stored state, or a fresh one when the source, predicate or mode changed."""
    if stored is None or stored.condition_key != key:
        return ConditionState()
    return stored.state
