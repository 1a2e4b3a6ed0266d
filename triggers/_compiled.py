"""What a tick needs of a spec, compiled once and read back without validation.

A stored spec was validated when it was proposed. Validating it again on every tick
(pydantic, croniter's parser, the storable checks: about 0.4 ms per distinct spec) is
work a column can hold (DESIGN "Scale"). :func:`compile_spec` takes from a validated
:class:`~triggers.Spec` exactly what planning and admission read — the calendar (a
cron expression already expanded into bit masks), the ends, jitter, lateness, overrun,
the task budget and the task limits — and :meth:`CompiledSpec.to_json` is what the store
keeps beside the spec (``definition_revisions.compiled``). :meth:`CompiledSpec.from_json`
reads it back with no validation and no parsing: it trusts what :func:`compile_spec`
wrote. ``tests/test_compiled.py`` checks (hypothesis) that the fast road and the full
parser agree, field by field and slot by slot.

:func:`user_payload` is the other half: what a task of a user-confirmed definition
carries (agent, instructions, params, delivery, audiences), stored beside the spec so
admission copies it in SQL instead of decoding the spec in Python.

Shapes: one positional JSON array (:meth:`CompiledSpec.to_json` gives the layout);
durations are whole microseconds (``int``), instants ISO 8601 UTC strings; its first
value is :data:`COMPILED_VERSION`, and data of another version is not read (the caller
compiles the spec again).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, NamedTuple

from ._calendar import AtSchedule, Calendar, DueWindow, IntervalSchedule, due_window
from ._cron import CronExpression, CronSchedule, stored_zone
from ._decisions import LatePolicy, OverrunPolicy, Period

if TYPE_CHECKING:
    from ._spec import SpecV1

__all__ = ["COMPILED_VERSION", "CompiledSpec", "compile_spec", "user_payload"]

COMPILED_VERSION = 1
"""The layout of :meth:`CompiledSpec.to_json`; bump it when the layout changes."""

_US = timedelta(microseconds=1)


class CompiledSpec(NamedTuple):
    """The schedule and admission policy of a spec (an immutable record: a named tuple,
    the cheapest to build, since every due row of a distinct spec builds one).

    Attributes:
        calendar: the trigger's calendar (a condition's poll grid for conditions).
        trigger: ``cron``, ``interval``, ``at`` or ``condition``.
        until, after: the ends (an aware instant, inclusive; a count of occurrences).
        jitter: the maximum deterministic offset of ``not_before`` (0 to 1 hour).
        late_policy, late_grace: the lateness rule (DESIGN "Lateness").
        overrun: what a new occurrence does while the previous task is going.
        deadline, max_attempts: a task's run deadline and attempts.
        task_limit, period: the task budget per accounting period (``None``: no budget).
        zone: the zone budget periods are counted in (``UTC`` for intervals).
    """

    calendar: Calendar
    trigger: str
    until: datetime | None
    after: int | None
    jitter: timedelta
    late_policy: LatePolicy
    late_grace: timedelta
    overrun: OverrunPolicy
    deadline: timedelta
    max_attempts: int
    task_limit: int | None
    period: Period
    zone: str

    def window(self, cursor: datetime, now: datetime, slots_seen: int = 0) -> DueWindow:
        """The slots due in ``(cursor, now]`` and the next one, within the ends; the same
        as :meth:`Spec.window` of the spec this was compiled from.

        Args:
            cursor, now: aware instants; ``now`` is the tick's (injected).
            slots_seen: occurrences already enumerated under this revision (for ``after``).
        """
        remaining = None if self.after is None else max(self.after - slots_seen, 0)
        calendar = self.calendar
        if isinstance(calendar, CronSchedule):
            quick = calendar.quick_window(cursor, now, until=self.until, remaining=remaining)
            if quick is not None:
                return quick
        return due_window(calendar, cursor, now, until=self.until, remaining=remaining)

    def to_json(self) -> list[Any]:
        """Plain JSON data, read back by :meth:`from_json`: one positional array (it is
        decoded on every tick of every distinct spec, and an array of plain values is the
        cheapest JSON to read)::

            [version, trigger, calendar, until, after, jitter_us, late_policy,
             late_grace_us, overrun, deadline_us, max_attempts, task_limit, period, zone]

        ``calendar`` is ``[expr, zone, dst_gap, fixed_time, day_or, [5 masks]]`` for
        cron, ``[every_us, anchor]`` for interval and condition (the poll grid),
        ``[instant, zone, note]`` for at.
        """
        return [COMPILED_VERSION, self.trigger, _calendar_json(self.calendar),
                _instant(self.until), self.after, self.jitter // _US, self.late_policy.value,
                self.late_grace // _US, self.overrun.value, self.deadline // _US,
                self.max_attempts, self.task_limit, self.period.value, self.zone]

    @classmethod
    def from_json(cls, data: Sequence[Any] | str) -> CompiledSpec | None:
        """Read what :meth:`to_json` wrote; ``None`` when ``data`` is of another
        :data:`COMPILED_VERSION` (or layout: compile the spec again). Nothing is validated.

        Raises:
            IndexError, TypeError, ValueError: ``data`` was not written by :meth:`to_json`.
        """
        if isinstance(data, str):
            data = json.loads(data)
        if not isinstance(data, list) or data[0] != COMPILED_VERSION:
            return None
        (_, trigger, calendar, until, after, jitter, policy, grace, overrun, deadline,
         attempts, limit, period, zone) = data
        return _new(cls, (
            _calendar_of(trigger, calendar), trigger,
            None if until is None else datetime.fromisoformat(until), after,
            _duration(jitter), _POLICIES[policy], _duration(grace), _OVERRUNS[overrun],
            _duration(deadline), attempts, limit, _PERIODS[period], zone))


_new = tuple.__new__
"""A named tuple made from a tuple of all its fields (what ``_make`` does), without the
keyword binding of its generated ``__new__``: every due row of a distinct spec makes
two."""


def _duration(microseconds: int) -> timedelta:
    """``timedelta(microseconds=...)``, shared: graces and deadlines repeat across specs."""
    value = _DURATIONS.get(microseconds)
    if value is None:
        if len(_DURATIONS) > 4096:
            _DURATIONS.clear()
        value = _DURATIONS[microseconds] = timedelta(microseconds=microseconds)
    return value


_DURATIONS: dict[int, timedelta] = {}
_POLICIES = {p.value: p for p in LatePolicy}
_OVERRUNS = {p.value: p for p in OverrunPolicy}
_PERIODS = {p.value: p for p in Period}


def compile_spec(spec: SpecV1) -> CompiledSpec:
    """The :class:`CompiledSpec` of a validated spec."""
    limits = spec.limits
    return CompiledSpec(
        spec.calendar(), spec.trigger.type, spec.ends.until, spec.ends.after, spec.jitter,
        spec.lateness.policy, spec.lateness.late_grace, spec.overrun, limits.deadline,
        limits.max_attempts, limits.max_tasks_per_period, limits.period, spec.zone)


def user_payload(spec: SpecV1) -> dict[str, Any]:
    """What each task of a user-confirmed definition carries, as JSON data:
    ``{"agent": str, "message": str, "params": {...}, "delivery": [...],
    "audiences": [...] | None}`` (the spec's agent name, instructions, agent params,
    deliveries and audiences; no audiences means any agent)."""
    return {"agent": spec.agent.name, "message": spec.instructions,
            "params": dict(spec.agent.params),
            "delivery": [d.model_dump(mode="json") for d in spec.delivery],
            "audiences": list(spec.audiences) or None}


def _instant(value: datetime | None) -> str | None:
    return None if value is None else value.astimezone(UTC).isoformat()


def _calendar_json(calendar: Calendar) -> list[Any]:
    if isinstance(calendar, CronSchedule):
        expr = calendar.expr
        return [expr.text, calendar.zone_name, calendar.dst_gap, expr.fixed_time, expr.day_or,
                list(expr.masks)]
    if isinstance(calendar, IntervalSchedule):
        return [calendar.every // _US, _instant(calendar.anchor)]
    assert isinstance(calendar, AtSchedule)
    return [_instant(calendar.instant), calendar.zone, calendar.note]


def _calendar_of(kind: str, data: Sequence[Any]) -> Calendar:
    if kind == "cron":
        text, zone, gap, fixed, day_or, masks = data
        stored_zone(zone)
        return CronSchedule(_new(CronExpression, (text, fixed, day_or, tuple(masks))), zone, gap)
    if kind in ("interval", "condition"):
        return IntervalSchedule(timedelta(microseconds=data[0]), datetime.fromisoformat(data[1]))
    return AtSchedule(datetime.fromisoformat(data[0]), data[1], data[2])
