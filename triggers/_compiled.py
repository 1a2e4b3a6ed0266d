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

Shapes: durations are whole microseconds (``int``) in the JSON, instants ISO 8601 UTC
strings; ``version`` is :data:`COMPILED_VERSION`, and data of another version is not
read (the caller compiles the spec again).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from ._calendar import AtSchedule, Calendar, DueWindow, IntervalSchedule, due_window
from ._cron import CronExpression, CronSchedule
from ._decisions import LatePolicy, OverrunPolicy, Period

if TYPE_CHECKING:
    from ._spec import SpecV1

__all__ = ["COMPILED_VERSION", "CompiledSpec", "compile_spec", "user_payload"]

COMPILED_VERSION = 1
"""The layout of :meth:`CompiledSpec.to_json`; bump it when the layout changes."""

_US = timedelta(microseconds=1)


@dataclass(frozen=True, slots=True, eq=False)
class CompiledSpec:
    """The schedule and admission policy of a spec.

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
        return due_window(self.calendar, cursor, now, until=self.until, remaining=remaining)

    def to_json(self) -> dict[str, Any]:
        """Plain JSON data, read back by :meth:`from_json`."""
        return {"version": COMPILED_VERSION, "trigger": _calendar_json(self.trigger, self.calendar),
                "until": _instant(self.until), "after": self.after,
                "jitter_us": self.jitter // _US, "late_policy": self.late_policy.value,
                "late_grace_us": self.late_grace // _US, "overrun": self.overrun.value,
                "deadline_us": self.deadline // _US, "max_attempts": self.max_attempts,
                "task_limit": self.task_limit, "period": self.period.value, "zone": self.zone}

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | str) -> CompiledSpec | None:
        """Read what :meth:`to_json` wrote; ``None`` when ``data`` is of another
        :data:`COMPILED_VERSION` (compile the spec again). Nothing is validated.

        Raises:
            KeyError, TypeError, ValueError: ``data`` was not written by :meth:`to_json`.
        """
        if isinstance(data, str):
            data = json.loads(data)
        if data.get("version") != COMPILED_VERSION:
            return None
        trigger = data["trigger"]
        until = data["until"]
        return cls(
            _calendar_of(trigger), trigger["type"],
            None if until is None else datetime.fromisoformat(until), data["after"],
            timedelta(microseconds=data["jitter_us"]), LatePolicy(data["late_policy"]),
            timedelta(microseconds=data["late_grace_us"]), OverrunPolicy(data["overrun"]),
            timedelta(microseconds=data["deadline_us"]), data["max_attempts"],
            data["task_limit"], Period(data["period"]), data["zone"])


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


def _calendar_json(kind: str, calendar: Calendar) -> dict[str, Any]:
    if isinstance(calendar, CronSchedule):
        expr = calendar.expr
        return {"type": kind, "expr": expr.text, "zone": calendar.zone_name,
                "dst_gap": calendar.dst_gap, "fixed_time": expr.fixed_time,
                "day_or": expr.day_or, "masks": list(expr.masks)}
    if isinstance(calendar, IntervalSchedule):
        return {"type": kind, "every_us": calendar.every // _US,
                "anchor": _instant(calendar.anchor)}
    assert isinstance(calendar, AtSchedule)
    return {"type": kind, "instant": _instant(calendar.instant), "zone": calendar.zone,
            "note": calendar.note}


def _calendar_of(data: Mapping[str, Any]) -> Calendar:
    kind = data["type"]
    if kind == "cron":
        masks = data["masks"]
        expr = CronExpression(data["expr"], data["fixed_time"], data["day_or"],
                              (masks[0], masks[1], masks[2], masks[3], masks[4]))
        return CronSchedule(expr, data["zone"], data["dst_gap"])
    if kind in ("interval", "condition"):
        return IntervalSchedule(timedelta(microseconds=data["every_us"]),
                                datetime.fromisoformat(data["anchor"]))
    return AtSchedule(datetime.fromisoformat(data["instant"]), data["zone"], data["note"])
