"""The firstMatch / everyEdge state machine (DESIGN "Conditions (three-valued)").

``step(state, verdict, now, mode, cooldown)`` -> what to do and the state to keep if
that is done. Pure: ``now`` is an argument, the state is a value.

* ``first_match``: fires on the first ``true``. The latch is part of the state this
  returns with ``FIRE``; the runtime stores that state only in the transaction that
  admits the task. A fire that is not admitted (budget, overrun, fence) keeps the
  state from before (:func:`not_admitted`), so nothing latches.
* ``every_edge``: fires on the first ``true``, then only when the verdict is ``true``
  and the last *definite* verdict before it was ``false``. ``unknown`` neither fires,
  arms nor disarms: ``true, unknown, true`` is not an edge, ``false, unknown, true``
  is. Staying true does not fire. An edge strictly before ``last fire + cooldown``
  (measured from the last fire, not from a suppressed edge) is
  ``suppressed_cooldown``, not queued.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime, timedelta

from ._conditions import Verdict
from ._slots import format_utc

__all__ = ["ConditionMode", "ConditionState", "EdgeAction", "EdgeStep", "not_admitted", "step"]


class ConditionMode(enum.StrEnum):
    """How a condition fires."""

    FIRST_MATCH = "first_match"
    EVERY_EDGE = "every_edge"


class EdgeAction(enum.StrEnum):
    """What a poll's verdict asks for."""

    FIRE = "fired"
    SUPPRESSED_COOLDOWN = "suppressed_cooldown"
    NONE = "none"


@dataclass(frozen=True, slots=True)
class ConditionState:
    """What a condition remembers between polls (per definition and binding).

    Attributes:
        last_definite: the last ``true``/``false`` verdict (``None`` before any).
        latched: a ``first_match`` condition has fired (and its task was admitted).
        last_fired_at: the poll instant of the last admitted fire (UTC).
    """

    last_definite: bool | None = None
    latched: bool = False
    last_fired_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class EdgeStep:
    """The action, its reason, and the state to store if the action is carried out
    (for ``FIRE``: if the task is admitted; see :func:`not_admitted` otherwise)."""

    action: EdgeAction
    reason: str
    state: ConditionState


def step(state: ConditionState, verdict: Verdict, now: datetime, mode: ConditionMode,
         cooldown: timedelta = timedelta(0)) -> EdgeStep:
    """Advance the state machine by one poll's verdict at ``now`` (aware)."""
    if mode is ConditionMode.FIRST_MATCH:
        if state.latched:
            return EdgeStep(EdgeAction.NONE, "already fired once (first_match latched)", state)
        if verdict is Verdict.TRUE:
            return EdgeStep(EdgeAction.FIRE, "first true: first_match fires",
                            ConditionState(True, True, now))
        return EdgeStep(EdgeAction.NONE, _quiet(verdict),
                        _remember(state, verdict))
    if verdict is not Verdict.TRUE:
        return EdgeStep(EdgeAction.NONE, _quiet(verdict), _remember(state, verdict))
    if state.last_definite is True:
        return EdgeStep(EdgeAction.NONE, "still true: no edge", state)
    edge = "first true" if state.last_definite is None else "false -> true edge"
    if state.last_fired_at is not None and now < state.last_fired_at + cooldown:
        return EdgeStep(
            EdgeAction.SUPPRESSED_COOLDOWN,
            f"{edge} inside the cooldown (last fire {format_utc(state.last_fired_at)}, "
            f"cooldown until {format_utc(state.last_fired_at + cooldown)})",
            ConditionState(True, state.latched, state.last_fired_at))
    return EdgeStep(EdgeAction.FIRE, f"{edge}: every_edge fires",
                    ConditionState(True, state.latched, now))


def not_admitted(before: ConditionState) -> ConditionState:
    """The state to keep when a ``FIRE`` was not admitted: the one from before the poll,
    so a first_match stays unlatched and an every_edge edge stays armed."""
    return before


def _remember(state: ConditionState, verdict: Verdict) -> ConditionState:
    if verdict is Verdict.UNKNOWN:
        return state
    definite = verdict is Verdict.TRUE
    if state.last_definite is definite:
        return state  # unchanged: the same (immutable) state, not a copy
    # the constructor, not dataclasses.replace: this runs once per poll (the replay's
    # quiet runs step through thousands)
    return ConditionState(definite, state.latched, state.last_fired_at)


def _quiet(verdict: Verdict) -> str:
    if verdict is Verdict.UNKNOWN:
        return "unknown: neither fires nor re-arms"
    return "false: re-armed" if verdict is Verdict.FALSE else "true"
