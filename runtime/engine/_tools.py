"""The tools a run may use: read-only reads of the sources in its definition's scope.

``ctx.sources`` (:class:`ScopedSources`) is what an agent reads observations through:
the same :meth:`~watchkeeper.sources.Source.read` that conditions use, returning the
:class:`~watchkeeper.triggers.Observation` with its unit, currency, ``as_of`` and
status. Each call is charged to the task's budget (one tool attempt, written to the
run's row) *before* it happens, then checked against the definition's ``sources``
scope; a call outside it is refused and recorded (seed 004: bounded tool attempts;
DESIGN "Agents": an agent reaches nothing it was not given). Nothing here writes
anywhere but the run's own row: an external effect only ever goes through
``ctx.effects``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from watchkeeper.sources import SourceRegistry, UnknownSource
from watchkeeper.triggers import Observation, ObservationStatus, format_utc

from .._errors import BudgetExceeded, StaleLease
from ._agents import BudgetGuard, RunJournal
from ._answer import storable_problem
from ._clock import Clock

__all__ = ["READ_TOOL", "ScopedSources", "ToolRefused"]

READ_TOOL = "read_observation"
"""The name tool calls of a source read are recorded (and offered to a model) under."""


def _escaped(text: str) -> str:
    """``text`` as the journal can store it: NUL and lone surrogates as escapes."""
    return text.replace("\x00", "\\x00").encode("utf-8", "backslashreplace").decode("utf-8")


class ToolRefused(PermissionError):
    """A tool call was refused (outside the definition's scope); it is recorded on the
    run. The message says what was asked and what the scope allows."""


class ScopedSources:
    """Reads of the sources named in a definition's ``sources``, charged and recorded.

    Args:
        registry: the supervisor's sources.
        scope: the definition's ``sources`` (names).
        budget: the task's budget guard (a tool attempt is charged before each read).
        journal: the run's journal (each call is appended to ``tool_calls``).
        clock: the read's ``at`` (the anchored clock of the worker).
    """

    def __init__(self, registry: SourceRegistry, scope: Sequence[str], budget: BudgetGuard,
                 journal: RunJournal, clock: Clock) -> None:
        self.registry, self.scope = registry, tuple(scope)
        self.budget, self.journal, self.clock = budget, journal, clock

    def offered(self) -> list[dict[str, str | None]]:
        """The sources in scope, with the version this supervisor has (``None``: not
        registered here; a read of it returns a ``failed`` observation)."""
        versions = self.registry.names()
        return [{"source": name, "version": versions.get(name)} for name in self.scope]

    async def read(self, source: str, subject: str) -> Observation:
        """The latest observation of ``subject`` from ``source``, now.

        Raises:
            BudgetExceeded: the tool attempt would pass ``limits.max_tool_attempts``
                (recorded as refused; nothing was read).
            ToolRefused: ``source`` is outside the definition's scope (charged and
                recorded as refused; nothing was read).
            StaleLease: the run's token is no longer current (nothing was read).
        """
        unstorable = [p for p in (storable_problem("source", source),
                                  storable_problem("subject", subject)) if p is not None]
        call: dict[str, Any] = {"tool": READ_TOOL, "source": _escaped(source),
                                "subject": _escaped(subject), "at": format_utc(self.clock.now())}
        try:
            self.budget.charge(tool_attempts=1)
        except BudgetExceeded as exc:
            self.journal.tool_calls.append({**call, "status": "refused", "reason": str(exc)})
            await self.budget.save()
            raise
        self.journal.tool_calls.append(call)
        if unstorable:
            call.update(status="refused", reason="; ".join(unstorable))
            await self.budget.save()
            raise ToolRefused(f"refused: {'; '.join(unstorable)}; call again without it")
        if source not in self.scope:
            reason = (f"source {source!r} is outside this definition's scope "
                      f"(sources = {list(self.scope)})")
            call.update(status="refused", reason=reason)
            await self.budget.save()
            raise ToolRefused(f"refused: {reason}; read only those")
        call["status"] = "started"
        try:
            await self.budget.save()  # charged and recorded before the read
        except StaleLease:
            call.update(status="refused", reason="the run's lease token is no longer current")
            raise
        try:
            observation = await self.registry.get(source).read(subject, self.clock.now())
        except UnknownSource as exc:
            observation = Observation(source, "", subject, "", None, None, None, None,
                                      self.clock.now(), ObservationStatus.FAILED, str(exc))
        call.update(status=observation.status.value, source_version=observation.source_version,
                    observation_id=observation.observation_id,
                    value=None if observation.value is None else str(observation.value),
                    unit=observation.unit, currency=observation.currency,
                    as_of=None if observation.as_of is None else format_utc(observation.as_of))
        if observation.detail:
            call["detail"] = observation.detail[:500]
        return observation
