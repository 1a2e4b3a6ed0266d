"""The definition spec: a versioned pydantic model with a discriminated trigger.

A spec has an *effective* part (trigger, lateness and overrun policy, jitter, ends,
agent, instructions, source scope, delivery, limits, audiences, output promise) and
a *descriptive* part (title, notes). ``spec_hash`` is the SHA-256 of the canonical
JSON of the effective part: editing only descriptive fields keeps the hash, so it
needs no new confirmation (DESIGN "Definitions, revisions, confirmation"; seed 004
"what you saw is what you confirmed").

Unknown trigger types, unknown versions and unknown fields are rejected with a
:class:`~triggers.SpecError` naming the field, never guessed into the closest mode.
One error lists every problem the checks can find independently (each field is
checked on its own; a model's cross-field checks run once its fields are valid).

A spec read back from the store is parsed with ``stored=True``: a rule added after
it was confirmed (a minimum interval, the zone names :func:`~triggers.check_zone`
refuses) must not make a confirmed definition unreadable.
"""

from __future__ import annotations

import difflib
import enum
import functools
import hashlib
import json
import math
import re
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import PurePosixPath
from typing import Annotated, Any, ClassVar, Literal

import pydantic
from pydantic import BaseModel, ConfigDict, Field, JsonValue, PrivateAttr, ValidationInfo

from ._agent_params import MODEL_AGENT, RESERVED_PARAM_KEYS, ModelAgentParams
from ._calendar import AtSchedule, Calendar, DueWindow, IntervalSchedule
from ._compiled import CompiledSpec, compile_spec
from ._conditions import Predicate, check_bounds, subjects_of
from ._cron import CronExpression, CronSchedule, DstGap
from ._decisions import LatePolicy, OverrunPolicy, Period
from ._edges import ConditionMode
from ._errors import SpecError, SpecProblem, SpecProblems, SpecWarning
from ._fixes import field_info, problem_of_error
from ._slots import Slot
from ._storable import field_part, storable_problems
from ._values import Duration
from ._zones import WallKind, classify_wall, load_zone, require_aware, resolve_zone

__all__ = [
    "ENDPOINT_NAME_PATTERN",
    "AgentSpec",
    "AtTrigger",
    "ConditionTrigger",
    "CronTrigger",
    "Delivery",
    "Ends",
    "IntervalTrigger",
    "Lateness",
    "Limits",
    "OutputPromise",
    "Spec",
    "SourceRef",
    "SpecV1",
    "canonical_json",
    "parse_spec",
    "DEFAULT_MIN_INTERVAL",
    "INSTANT_RANGE",
    "SUPPORTED_VERSIONS",
    "check_instant",
]

DEFAULT_MIN_INTERVAL = timedelta(seconds=60)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
EARLIEST = EPOCH
LATEST = datetime(2200, 1, 1, tzinfo=UTC)
"""Instants in a spec (anchor, at, until) must lie in [EARLIEST, LATEST]."""
INSTANT_RANGE = (EARLIEST, LATEST)
"""The instants watchkeeper accepts anywhere (a spec, a preview's start, a history or
poll range): nothing computed from one leaves the dates Python and PostgreSQL share."""
_CALENDAR_UNITS = re.compile(r"^P(?:[^T]*[YM])", re.IGNORECASE)


def _duration(value: Any, field: str, maximum: timedelta) -> Any:
    """Refuse ISO 8601 durations in months or years (their length varies) before pydantic
    would silently turn them into 30 or 365 days."""
    if isinstance(value, str) and _CALENDAR_UNITS.match(value.strip()):
        raise SpecError(field, f"{value!r} counts months or years, whose length varies.",
                        "write days, hours, minutes or seconds (e.g. 'P30D', 'PT12H').")
    if isinstance(value, bool):
        raise SpecError(field, f"{value!r} is not a duration.", "write seconds or 'PT30M'.")
    if isinstance(value, int | float) and _TIMEDELTA_SECONDS < value < math.inf:
        raise _too_long(value, field, maximum)  # a timedelta of it would overflow
    return value


def _bounded(value: timedelta, field: str, maximum: timedelta) -> timedelta:
    if value > maximum:
        raise _too_long(value.total_seconds(), field, maximum)
    return value


_TIMEDELTA_SECONDS = timedelta.max.total_seconds()
"""The most seconds a :class:`timedelta` holds (about 2.7 million years)."""


def _too_long(seconds: float, field: str, maximum: timedelta) -> SpecError:
    """``field``'s ``seconds`` pass ``maximum``: said in plain seconds (and days)."""
    shown = f"{seconds:,.6f}".rstrip("0").rstrip(".")
    days = f" ({maximum.days:,} days)" if maximum.days >= 2 else ""
    return SpecError(field, f"{shown} s is longer than the maximum of "
                            f"{maximum.total_seconds():,.0f} s{days}.",
                     f"use at most {int(maximum.total_seconds())} seconds.")


def _resolved(value: timedelta, field: str, maximum: timedelta, info: ValidationInfo,
              fix: str) -> timedelta:
    """``value`` within ``maximum`` and at or above the runtime's minimum resolution
    (``min_interval`` in the validation context, default 60 s).

    Raises:
        SpecError: naming ``field``; ``fix`` is formatted with ``minimum`` (seconds).
    """
    _bounded(value, field, maximum)
    minimum = (info.context or {}).get(_MIN_INTERVAL_KEY, DEFAULT_MIN_INTERVAL)
    if value < minimum:
        raise SpecError(field, f"{value.total_seconds():g} s is under the minimum resolution "
                        f"of {minimum.total_seconds():g} s.",
                        fix.format(minimum=minimum.total_seconds()))
    return value


def _instant_in_range(value: datetime, field: str) -> datetime:
    """``value`` if it lies in [EARLIEST, LATEST]: an aware one compared as an instant,
    a naive one as a wall time (before its zone is applied).

    Compared before any conversion: ``9999-12-31T23:59:59-01:00`` is past the last
    datetime in UTC, so ``astimezone`` would raise OverflowError.

    Raises:
        SpecError: naming ``field``, showing ``value`` as written.
    """
    low, high = (EARLIEST, LATEST) if value.tzinfo is not None else (
        EARLIEST.replace(tzinfo=None), LATEST.replace(tzinfo=None))
    if not low <= value <= high:
        raise SpecError(field, f"{value.isoformat()} is outside {EARLIEST:%Y}-{LATEST:%Y}.",
                        "give an instant between 1970 and 2200.")
    return value


_NUMBER = re.compile(r"\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*")


def _instant_text(value: Any, field: str) -> Any:
    """Refuse a number (or a numeric string) where an instant is written: the schema
    says ``format: date-time``, and pydantic would read it as Unix seconds.

    Raises:
        SpecError: naming ``field``.
    """
    if isinstance(value, int | float) or (isinstance(value, str) and _NUMBER.fullmatch(value)):
        raise SpecError(field, f"{value!r} is a number, not a date-time.",
                        "write an ISO 8601 date-time with an offset, e.g. "
                        "'2026-03-29T01:00:00Z'.")
    return value


def _aware_instant(value: datetime, field: str) -> datetime:
    """``value`` in UTC if it is aware and in range.

    Raises:
        SpecError: naming ``field``: naive, or outside 1970-2200.
    """
    if value.utcoffset() is None:
        require_aware(value, field)  # raises: no offset
    return require_aware(_instant_in_range(value, field), field)


def check_instant(value: datetime, field: str) -> datetime:
    """``value`` in UTC if it is aware and within :data:`INSTANT_RANGE`.

    Raises:
        SpecError: naming ``field``: naive, or outside 1970-2200.
    """
    return _aware_instant(value, field)
_MIN_INTERVAL_KEY = "min_interval"
_STORED_KEY = "stored"
_WARNINGS_KEY = "warnings"


def _zone(value: str | None, field: str, info: ValidationInfo) -> str:
    """The zone's name to store: :func:`resolve_zone`'s for a new spec (a link's target:
    ``US/Eastern`` is stored as ``America/New_York``; its warning is kept for the
    answer), :func:`load_zone`'s for a stored one (see the module docstring)."""
    context = info.context or {}
    if context.get(_STORED_KEY, False):
        return load_zone(value, field).key
    choice = resolve_zone(value, field)
    warning = choice.warning(field)
    if warning is not None and _WARNINGS_KEY in context:
        context[_WARNINGS_KEY].append(warning)
    return choice.name


class _Model(BaseModel):
    # durations are stored as seconds: pydantic's ISO form writes 400 days as 'P1Y35D',
    # which a stored spec could then not be read back from (months and years vary)
    model_config = ConfigDict(extra="forbid", frozen=True, ser_json_timedelta="float")


def _zone_required(schema: dict[str, Any]) -> None:
    """The schema says what the parser holds a cron trigger to: ``zone`` is a required
    string (the model keeps ``None`` so a missing zone is one problem among the
    others, with its own words)."""
    schema["required"] = [*schema.get("required", []), "zone"]
    zone = schema["properties"]["zone"]
    zone.pop("anyOf", None)
    zone.pop("default", None)
    zone["type"] = "string"


class CronTrigger(_Model):
    """``type = "cron"``: a 5-field expression in a required IANA zone."""

    model_config = ConfigDict(**_Model.model_config, json_schema_extra=_zone_required)

    type: Literal["cron"] = Field(description='Always "cron": run at the times a cron expression names.')
    expr: str = Field(description=(
        "A 5-field cron expression: minute hour day-of-month month day-of-week, e.g. '0 20 * * 3' "
        "(Wednesdays at 20:00)."))
    zone: str | None = Field(None, description=(
        "The IANA zone the expression's wall times are read in, e.g. 'Europe/Paris' or 'America/New_York'. "
        "Required."))
    dst_gap: DstGap = Field("skip", description=(
        "A wall time the clocks skip on a DST change: 'skip' (no run that day) or 'run_after' (run at the "
        "first instant after the gap)."))

    @pydantic.field_validator("expr")
    @classmethod
    def _expr(cls, value: str) -> str:
        return CronExpression.parse(value).text

    @pydantic.field_validator("zone")
    @classmethod
    def _zone(cls, value: str | None, info: ValidationInfo) -> str:
        return _zone(value, "trigger.zone", info)

    @pydantic.model_validator(mode="after")
    def _zone_required(self) -> CronTrigger:
        if self.zone is None:
            load_zone(None, "trigger.zone")
        return self

    def calendar(self) -> Calendar:
        """The cron schedule (shared by every definition with this trigger)."""
        assert self.zone is not None
        return _cron_schedule(self.expr, self.zone, self.dst_gap)


@functools.lru_cache(maxsize=4096)
def _cron_schedule(expr: str, zone: str, dst_gap: DstGap) -> CronSchedule:
    return CronSchedule(expr, zone, dst_gap)


class IntervalTrigger(_Model):
    """``type = "interval"``: ``anchor + n * every`` for n = 0, 1, 2, ...; DST-free.

    ``every`` is a duration (seconds or ISO 8601, e.g. ``"PT2M"``) at least the
    runtime's minimum resolution (default 60 s); ``anchor`` an aware instant
    (default 1970-01-01T00:00Z, so a 15-minute interval fires at :00, :15, ...).
    """

    type: Literal["interval"] = Field(description='Always "interval": run every fixed duration, DST-free.')
    every: Duration = Field(description=(
        "How often: seconds or an ISO 8601 duration such as 'PT15M', at least the runtime's minimum "
        "interval (60 s by default)."))
    anchor: datetime = Field(EPOCH, description=(
        "An instant with an offset the grid anchor + n * every starts from (default 1970-01-01T00:00:00Z, "
        "so 15 minutes fires at :00, :15, ...)."))

    @pydantic.field_validator("every", mode="before")
    @classmethod
    def _every_text(cls, value: Any) -> Any:
        return _duration(value, "trigger.every", timedelta(days=3660))

    @pydantic.field_validator("every")
    @classmethod
    def _every(cls, value: timedelta, info: ValidationInfo) -> timedelta:
        return _resolved(value, "trigger.every", timedelta(days=3660), info,
                         "use every >= {minimum:g} seconds.")

    @pydantic.field_validator("anchor", mode="before")
    @classmethod
    def _anchor_text(cls, value: Any) -> Any:
        return _instant_text(value, "trigger.anchor")

    @pydantic.field_validator("anchor")
    @classmethod
    def _anchor(cls, value: datetime) -> datetime:
        return _aware_instant(value, "trigger.anchor")

    def calendar(self) -> Calendar:
        """The interval schedule."""
        return IntervalSchedule(self.every, self.anchor)


class AtTrigger(_Model):
    """``type = "at"``: one instant, given as a local wall time in ``zone``
    (or as an aware timestamp). A wall time that does not exist is rejected; a
    repeated one means its first instant."""

    type: Literal["at"] = Field(description='Always "at": run once.')
    at: datetime = Field(description=(
        "When: a local wall time read in zone, e.g. '2026-12-02T20:00:00', or an instant with an offset."))
    zone: str = Field("UTC", description=(
        "The IANA zone a wall time in at is read in, e.g. 'Europe/Paris' (default UTC)."))

    @pydantic.field_validator("at", mode="before")
    @classmethod
    def _at_text(cls, value: Any) -> Any:
        return _instant_text(value, "trigger.at")

    @pydantic.field_validator("zone")
    @classmethod
    def _zone(cls, value: str, info: ValidationInfo) -> str:
        return _zone(value, "trigger.zone", info)

    @pydantic.model_validator(mode="after")
    def _exists(self) -> AtTrigger:
        self.resolve()
        return self

    def resolve(self) -> tuple[datetime, str | None]:
        """The UTC instant and a note when the wall time is repeated.

        Raises:
            SpecError: the wall time falls in a gap of ``zone``, or lies outside 1970-2200.
        """
        _instant_in_range(self.at, "trigger.at")
        if self.at.tzinfo is not None:
            return self.at.astimezone(UTC), None
        zone = load_zone(self.zone)
        wall = classify_wall(self.at, zone)
        if wall.kind is WallKind.GAP:
            assert wall.gap_end is not None
            raise SpecError(
                "trigger.at",
                f"{self.at:%Y-%m-%dT%H:%M} does not exist in {self.zone}: the clocks skip "
                f"it (the first instant after is {wall.gap_end.astimezone(zone).isoformat()}).",
                "pick a local time outside the gap.",
            )
        note = None
        if wall.kind is WallKind.AMBIGUOUS:
            offset = wall.instants[0].astimezone(zone).isoformat()[-6:]
            note = f"{self.at:%H:%M} occurs twice in {self.zone}; this is the first ({offset})."
        return wall.instants[0], note

    def calendar(self) -> Calendar:
        """The one-shot schedule."""
        instant, note = self.resolve()
        return AtSchedule(instant, self.zone, note)


_SOURCE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


class SourceRef(_Model):
    """Which observation source a condition reads, and the version it was confirmed
    with: a source that reports another version yields ``unknown``, never a silently
    different reading."""

    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")] = Field(description=(
        "The observation source's name, as a supervisor registers it (e.g. 'prices')."))
    version: Annotated[str, Field(min_length=1, max_length=64)] = Field(description=(
        "The source's version this condition was written against; a source reporting another version reads "
        "unknown."))


_COOLDOWN_FIRST_MATCH = ("trigger.cooldown",
                         "applies to every_edge only (first_match fires once).",
                         "remove cooldown, or use mode = 'every_edge'.")


class ConditionTrigger(_Model):
    """``type = "condition"``: poll a source every ``poll_every`` (on the grid
    ``anchor + n * poll_every``) and fire on a three-valued predicate.

    ``mode``: ``first_match`` (fires once, on the first true; the definition then
    completes) or ``every_edge`` (fires on each false -> true edge, at most once per
    ``cooldown``). A reading that is unknown (missing, stale, another version) never
    fires.
    """

    type: Literal["condition"] = Field(description=(
        'Always "condition": poll a source and run when the predicate becomes true.'))
    mode: ConditionMode = Field(description=(
        "'first_match' (run once, on the first true reading; the agreement then completes) or 'every_edge' "
        "(run on each change from false to true)."))
    source: SourceRef = Field(description="Which observation source to read, and its version.")
    poll_every: Duration = Field(description=(
        "How often to read the source: seconds or an ISO 8601 duration such as 'PT1H', at least the "
        "runtime's minimum interval."))
    anchor: datetime = Field(EPOCH, description=(
        "An instant with an offset the poll grid anchor + n * poll_every starts from (default "
        "1970-01-01T00:00:00Z)."))
    cooldown: Duration = Field(timedelta(0), description=(
        "every_edge only: the least time between two runs, seconds or ISO 8601 (default 0)."))
    predicate: Predicate = Field(description=(
        "When to run: a comparison {subject, op, threshold}, or all / any / not of predicates. An unknown "
        "reading never runs."))

    @pydantic.field_validator("poll_every", mode="before")
    @classmethod
    def _poll_text(cls, value: Any) -> Any:
        return _duration(value, "trigger.poll_every", timedelta(days=366))

    @pydantic.field_validator("poll_every")
    @classmethod
    def _poll(cls, value: timedelta, info: ValidationInfo) -> timedelta:
        return _resolved(value, "trigger.poll_every", timedelta(days=366), info,
                         "poll every {minimum:g} seconds or less often.")

    @pydantic.field_validator("cooldown", mode="before")
    @classmethod
    def _cooldown_text(cls, value: Any) -> Any:
        return _duration(value, "trigger.cooldown", timedelta(days=3660))

    @pydantic.field_validator("cooldown")
    @classmethod
    def _cooldown(cls, value: timedelta) -> timedelta:
        if value < timedelta(0):
            raise SpecError("trigger.cooldown", "is negative.", "use 0 or more seconds.")
        return _bounded(value, "trigger.cooldown", timedelta(days=3660))

    @pydantic.field_validator("anchor", mode="before")
    @classmethod
    def _anchor_text(cls, value: Any) -> Any:
        return _instant_text(value, "trigger.anchor")

    @pydantic.field_validator("anchor")
    @classmethod
    def _anchor(cls, value: datetime) -> datetime:
        return _aware_instant(value, "trigger.anchor")

    @pydantic.model_validator(mode="after")
    def _shape(self) -> ConditionTrigger:
        found = SpecProblems()
        with found.check():
            check_bounds(self.predicate)
        if self.mode is ConditionMode.FIRST_MATCH and self.cooldown:
            found.add(*_COOLDOWN_FIRST_MATCH)
        found.raise_if_any()
        return self

    def calendar(self) -> Calendar:
        """The poll schedule (like an interval: DST-free)."""
        return IntervalSchedule(self.poll_every, self.anchor)

    @functools.cached_property
    def subjects(self) -> tuple[str, ...]:
        """The subjects the predicate reads, in first-use order, without repeats
        (:func:`subjects_of`, computed once per trigger)."""
        return subjects_of(self.predicate)

    @functools.cached_property
    def condition_key(self) -> str:
        """SHA-256 of the source, predicate and mode: a new revision that keeps them
        keeps the condition's state (latch, last verdict, cooldown); one that changes
        any of them starts fresh (DESIGN "Conditions")."""
        data = _plain(self.model_dump(mode="python", include={"source", "predicate", "mode"},
                                      by_alias=True))
        return hashlib.sha256(canonical_json(data).encode()).hexdigest()


Trigger = Annotated[CronTrigger | IntervalTrigger | AtTrigger | ConditionTrigger,
                    Field(discriminator="type")]


class Lateness(_Model):
    """Lateness policy and ``late_grace`` (``expires_at = not_before + late_grace``)."""

    policy: LatePolicy = Field(LatePolicy.SKIP_EXPIRED, description=(
        "A run that could not start within late_grace: 'skip_expired' (recorded, not run), 'catch_up_once' "
        "(one run for every missed occurrence) or 'review_late' (waits for the owner)."))
    late_grace: Duration = Field(timedelta(minutes=10), description=(
        "How late a run may still start: seconds or ISO 8601, 0 to 7 days (default 10 minutes)."))

    @pydantic.field_validator("late_grace", mode="before")
    @classmethod
    def _grace_text(cls, value: Any) -> Any:
        return _duration(value, "lateness.late_grace", timedelta(days=7))

    @pydantic.field_validator("late_grace")
    @classmethod
    def _grace(cls, value: timedelta) -> timedelta:
        if value < timedelta(0):
            raise SpecError("lateness.late_grace", "is negative.", "use 0 or more seconds.")
        return _bounded(value, "lateness.late_grace", timedelta(days=7))


class Ends(_Model):
    """When the schedule ends: never (default), ``until`` an aware instant
    (inclusive), and/or ``after`` N calendar occurrences (skipped ones count)."""

    until: datetime | None = Field(None, description=(
        "No occurrence after this instant (with an offset, inclusive); null: no end date."))
    after: Annotated[pydantic.StrictInt, Field(gt=0, le=1_000_000_000)] | None = Field(None, description=(
        "End after this many occurrences, skipped ones included; null: no count."))

    @pydantic.field_validator("until", mode="before")
    @classmethod
    def _until_text(cls, value: Any) -> Any:
        return _instant_text(value, "ends.until")

    @pydantic.field_validator("until")
    @classmethod
    def _until(cls, value: datetime | None) -> datetime | None:
        if value is None:
            return None
        return _aware_instant(value, "ends.until")


class AgentSpec(_Model):
    """Which agent runs the task (default: the built-in deterministic digest).

    ``params`` are the agent's own; for the built-in ``model`` agent they are checked
    when proposed, each problem naming ``agent.params.<field>``. No agent's params may
    set a key the runtime writes (``schedule``, ``trigger``).
    """

    name: str = Field("digest", description=(
        "The agent that runs the task: 'digest' (built in, no model), 'model' (the supervisor's model "
        "endpoint), or the name of an agent a supervisor offers."))
    params: dict[str, JsonValue] = Field(default_factory=dict, description=(
        "The agent's own settings; for 'model': model (required), system_prompt, temperature (0-2), "
        "max_output_tokens, input_usd_per_1k, output_usd_per_1k (decimal strings), "
        "request_timeout_seconds, http_retries, output_retries."))

    @pydantic.model_validator(mode="after")
    def _params(self) -> AgentSpec:
        problems = [SpecProblem(f"agent.params.{key}", "is set by the runtime, not by a spec.",
                                f"remove {key}; the agent reads the runtime's own {key} "
                                "facts from its context.")
                    for key in sorted(RESERVED_PARAM_KEYS & set(self.params))]
        if self.name == MODEL_AGENT:
            try:
                ModelAgentParams.model_validate(
                    {k: v for k, v in self.params.items() if k not in RESERVED_PARAM_KEYS})
            except pydantic.ValidationError as exc:
                problems += [SpecProblem(_field_at("agent.params", p.field), p.problem, p.fix)
                             for p in _translate(exc, ModelAgentParams)]
        if problems:
            raise SpecError.of(problems)
        return self


class Limits(_Model):
    """Deadline, attempts, task budget per accounting period, run budget, and (for
    conditions) the polling budget per accounting period: every poll consumes it, one
    that returns unknown included, and it never refunds within its period."""

    deadline: Duration = Field(timedelta(minutes=10), description=(
        "How long one run may take: seconds or ISO 8601, up to 7 days (default 10 minutes)."))
    max_attempts: Annotated[pydantic.StrictInt, Field(ge=1, le=20)] = Field(3, description=(
        "How many times a failed run is tried, 1-20 (default 3)."))
    max_tasks_per_period: Annotated[pydantic.StrictInt, Field(ge=0, le=1_000_000)] | None = Field(
        None, description=(
            "The most tasks admitted per period; null: no cap."))
    period: Period = Field(Period.DAY, description=(
        "The accounting period of the per-period caps, in the agreement's zone: 'day', 'week' or 'month'."))
    max_model_requests: Annotated[pydantic.StrictInt, Field(ge=0, le=1_000_000_000)] | None = Field(
        None, description=(
            "The most model requests one task may make (an integer); null: no cap."))
    max_tool_attempts: Annotated[pydantic.StrictInt, Field(ge=0, le=1_000_000_000)] | None = Field(
        None, description=(
            "The most tool calls one task may make (an integer); null: no cap."))
    max_cost_usd: Annotated[Decimal, Field(ge=0, le=1_000_000_000)] | None = Field(None, description=(
        'The most one task may spend on the model, in USD, as a decimal string such as "0.25"; null: no '
        "cap."))
    max_polls_per_period: Annotated[pydantic.StrictInt, Field(ge=0, le=1_000_000_000)] | None = Field(
        None, description=(
            "Conditions: the most polls per period, unknown readings included; null: no cap."))
    max_roots: Annotated[pydantic.StrictInt, Field(ge=1, le=20)] = Field(1, description=(
        "How many roots one task may run, 1-20 (default 1: no continuation; a run may end asking to "
        "continue as the task's next root)."))

    @pydantic.field_validator("deadline", mode="before")
    @classmethod
    def _deadline_text(cls, value: Any) -> Any:
        return _duration(value, "limits.deadline", timedelta(days=7))

    @pydantic.field_validator("deadline")
    @classmethod
    def _deadline(cls, value: timedelta) -> timedelta:
        if value <= timedelta(0):
            raise SpecError("limits.deadline", "must be positive.", "e.g. deadline = 'PT10M'.")
        return _bounded(value, "limits.deadline", timedelta(days=7))


def inside_path(value: str, field: str) -> str:
    """Return ``value`` if it is a relative path that cannot leave its base directory.

    Specs come from agents: a destination or an output directory names a place under
    WATCHKEEPER_HOME, never an absolute path or one with ``..``.

    Raises:
        SpecError: naming ``field``.
    """
    path = PurePosixPath(value)
    if not value or path.is_absolute() or ".." in path.parts or "\\" in value or "\x00" in value:
        raise SpecError(
            field, f"{value!r} is not a relative path inside WATCHKEEPER_HOME.",
            "write a relative path without '..', e.g. 'reports.jsonl' or 'drafts/daily'.",
        )
    return value


_ENDPOINT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
ENDPOINT_NAME_PATTERN = f"^{_ENDPOINT_NAME.pattern}$"
"""The rule of :func:`check_endpoint_name` as a JSON Schema ``pattern``."""


def check_endpoint_name(value: str, field: str) -> str:
    """Return ``value`` if it can name a webhook endpoint: 1-64 letters, digits, ``.``,
    ``_`` or ``-``, starting with a letter or digit (the same rule for
    ``watchkeeper webhooks add`` and a spec's webhook destination).

    Raises:
        SpecError: naming ``field``.
    """
    if not isinstance(value, str) or not _ENDPOINT_NAME.fullmatch(value):
        raise SpecError(field, f"{value!r} is not a webhook endpoint name.",
                        "use 1-64 letters, digits, '.', '_' or '-', starting with a letter "
                        "or digit, e.g. 'ops-hook'.")
    return value


class Delivery(_Model):
    """One notification destination for the committed report: ``log``; ``file`` with a
    relative path (written under WATCHKEEPER_HOME/notices/<tenant>/); or ``webhook`` with
    the name of one of the tenant's webhook endpoints (``watchkeeper webhooks add``)."""

    channel: Literal["log", "file", "webhook"] = Field("log", description=(
        "Where the notice goes: 'log', 'file' or 'webhook'."))
    destination: str = Field("", description=(
        "For 'file': a relative path such as 'reports.jsonl'; for 'webhook': the name of a webhook "
        "endpoint of the tenant; empty for 'log'."))

    @pydantic.model_validator(mode="after")
    def _destination(self) -> Delivery:
        if self.channel == "webhook":
            if not _ENDPOINT_NAME.fullmatch(self.destination):
                raise SpecError("delivery.destination",
                                f"{self.destination!r} is not a webhook endpoint name.",
                                "name an endpoint added with 'watchkeeper webhooks add', "
                                "e.g. destination = 'ops-hook'.")
            return self
        if self.channel == "file":
            if not self.destination:
                raise SpecError(
                    "delivery.destination", "a file delivery needs a path.",
                    "set destination = 'reports.jsonl' (written under WATCHKEEPER_HOME/notices/<tenant>/).",
                )
            inside_path(self.destination, "delivery.destination")
        return self


class OutputPromise(_Model):
    """What a run must produce: a non-empty markdown report (default), or an
    artifact file of ``type`` (a suffix such as ``".md"``) under ``directory``."""

    kind: Literal["markdown", "artifact"] = Field("markdown", description=(
        "What a run must produce: 'markdown' (a non-empty report) or 'artifact' (a file)."))
    directory: str | None = Field(None, description=(
        "For an artifact: the relative directory it is written in, e.g. 'drafts'."))
    type: str | None = Field(None, description="For an artifact: its file suffix, e.g. '.md'.")

    @pydantic.model_validator(mode="after")
    def _artifact(self) -> OutputPromise:
        found = SpecProblems()
        if self.kind == "artifact" and not (self.directory and self.type):
            found.add("output", "an artifact promise needs a directory and a type.",
                      "set output.directory = 'drafts' and output.type = '.md'.")
        if self.directory is not None:
            with found.check():
                inside_path(self.directory, "output.directory")
        if self.type is not None and not re.fullmatch(r"\.[A-Za-z0-9]{1,16}", self.type):
            found.add("output.type", f"{self.type!r} is not a file suffix.",
                      "write a suffix such as '.md' or '.json'.")
        found.raise_if_any()
        return self


class SpecV1(_Model):
    """A standing agreement, version 1: when the task runs (trigger), what runs (agent,
    instructions), within which limits, and where its notice goes. Everything but title
    and notes is covered by the spec_hash the owner confirms."""

    version: Literal[1] = Field(1, description="The spec format's version: 1.")
    trigger: Trigger = Field(description=(
        "When the task runs: cron, interval, at (once) or condition, chosen by type."))
    lateness: Lateness = Field(Lateness(), description="What happens to a run that could not start on time.")
    overrun: OverrunPolicy = Field(OverrunPolicy.SKIP, description=(
        "A new occurrence while the previous task still runs: 'skip', 'queue_one', 'allow' or "
        "'cancel_previous'."))
    jitter: Duration = Field(timedelta(0), description=(
        "A random delay of up to this much before each run, 0 to 1 hour (seconds or ISO 8601)."))
    ends: Ends = Field(Ends(), description="When the schedule ends (default: never).")
    agent: AgentSpec = Field(AgentSpec(), description="Which agent runs the task, and its settings.")
    instructions: str = Field("", json_schema_extra={"maxLength": 20_000}, description=(
        "What the agent is asked to do, in plain words."))
    sources: tuple[str, ...] = Field((), description=(
        "The observation sources (by name) the agent may read during a run (ctx.sources)."))
    delivery: tuple[Delivery, ...] = Field((Delivery(),), description=(
        "Where the notice of each committed report goes (default: the log)."))
    limits: Limits = Field(Limits(), description="Deadline, attempts and budgets.")
    audiences: tuple[str, ...] = Field((), description=(
        "Audience labels handed to the agent in its context (ctx.audiences)."))
    output: OutputPromise = Field(OutputPromise(), description="What a run must produce.")
    title: str = Field("", json_schema_extra={"maxLength": 200}, description=(
        "A short name for people; editing it needs no new confirmation."))
    notes: str = Field("", json_schema_extra={"maxLength": 4_000}, description=(
        "Free notes for people; editing them needs no new confirmation."))

    TEXT_LIMITS: ClassVar[dict[str, int]] = {"instructions": 20_000, "title": 200,
                                             "notes": 4_000}
    """The longest free text of a new spec, in characters (the schema's ``maxLength``).
    A stored spec is read without them: one confirmed before they existed still loads."""

    @pydantic.field_validator("instructions", "title", "notes")
    @classmethod
    def _text_limit(cls, value: str, info: ValidationInfo) -> str:
        limit = cls.TEXT_LIMITS[str(info.field_name)]
        if len(value) > limit and not (info.context or {}).get(_STORED_KEY, False):
            raise SpecError(str(info.field_name), f"is {len(value)} characters, more than "
                            f"{limit}.", f"shorten it to at most {limit} characters.")
        return value
    _warnings: tuple[SpecWarning, ...] = PrivateAttr(default=())

    @property
    def warnings(self) -> tuple[SpecWarning, ...]:
        """What the author should know about this accepted spec (a zone stored under its
        canonical name, a fixed offset that never follows DST), from :func:`parse_spec`
        of a new spec; empty for a stored one. Not part of the spec or its hash."""
        return self._warnings

    @pydantic.field_validator("jitter", mode="before")
    @classmethod
    def _jitter_text(cls, value: Any) -> Any:
        return _duration(value, "jitter", timedelta(hours=1))

    @pydantic.field_validator("jitter")
    @classmethod
    def _jitter(cls, value: timedelta) -> timedelta:
        if not timedelta(0) <= value <= timedelta(hours=1):
            raise SpecError("jitter", "must be between 0 and 1 hour.", "e.g. jitter = 'PT30S'.")
        return value

    @pydantic.field_validator("sources")
    @classmethod
    def _sources(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        problems = [SpecProblem(f"sources.{i}", f"{name!r} is not a source name.",
                                "use 1-64 letters, digits, '.', '_' or '-', starting with a "
                                "letter or digit: the name a supervisor registers the "
                                "source under (--series, --sources).")
                    for i, name in enumerate(value) if not _SOURCE_NAME.fullmatch(name)]
        problems += [SpecProblem(f"sources.{i}", f"{name!r} is listed twice.", "list it once.")
                     for i, name in enumerate(value) if name in value[:i]]
        if problems:
            raise SpecError.of(problems)
        return value

    DESCRIPTIVE: ClassVar[frozenset[str]] = frozenset({"title", "notes"})

    ADDED_LATER: ClassVar[tuple[tuple[str, str, Any], ...]] = (("limits", "max_roots", 1),)
    """Fields added to version 1 after it shipped, with their defaults: left out of the
    effective part while at the default, so a definition confirmed before they existed
    keeps its ``spec_hash``."""

    def effective(self) -> dict[str, Any]:
        """The effective part as canonical plain data (durations in seconds)."""
        data = self.model_dump(mode="python", exclude=set(self.DESCRIPTIVE), by_alias=True)
        for table, name, default in self.ADDED_LATER:
            if data[table][name] == default:
                del data[table][name]
        return _plain(data)

    @property
    def spec_hash(self) -> str:
        """SHA-256 (hex) of the canonical JSON of the effective part."""
        return hashlib.sha256(canonical_json(self.effective()).encode()).hexdigest()

    def calendar(self) -> Calendar:
        """The schedule of this spec's trigger."""
        return self.trigger.calendar()

    def bounded_calendar(self) -> Calendar:
        """The calendar with this spec's ends applied, counting ``ends.after`` from the
        first slot after the instant asked about (as if confirmed then): for previews."""
        return _Bounded(self.calendar(), self.ends.until, self.ends.after)

    def window(self, cursor: datetime, now: datetime, slots_seen: int = 0) -> DueWindow:
        """The slots due in ``(cursor, now]`` and the next one, within this spec's ends.

        ``slots_seen`` counts the occurrences already enumerated under this revision
        (skipped ones included), for ``ends.after``.
        """
        return self.compiled.window(cursor, now, slots_seen)

    @functools.cached_property
    def compiled(self) -> CompiledSpec:
        """What the tick needs of this spec (:mod:`triggers._compiled`)."""
        return compile_spec(self)

    @property
    def zone(self) -> str:
        """The zone the schedule is read in (``"UTC"`` for intervals)."""
        return getattr(self.trigger, "zone", None) or "UTC"

    def to_json(self) -> dict[str, Any]:
        """The whole spec (both parts) as JSON-compatible data; round-trips."""
        return self.model_dump(mode="json", by_alias=True)


class _Bounded:
    """A calendar cut by an end instant and a count."""

    def __init__(self, inner: Calendar, until: datetime | None, count: int | None) -> None:
        self.inner, self.until, self.count = inner, until, count

    def slots_after(self, after: datetime) -> Iterator[Slot]:
        for index, slot in enumerate(self.inner.slots_after(after)):
            if (self.count is not None and index >= self.count) or (
                self.until is not None and slot.scheduled_for > self.until
            ):
                return
            yield slot


Spec = SpecV1
SUPPORTED_VERSIONS: dict[int, type[SpecV1]] = {1: SpecV1}


def canonical_json(data: Any) -> str:
    """Deterministic JSON: sorted keys, no insignificant white space, UTF-8 text."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, timedelta):
        return _number(Decimal(value // timedelta(microseconds=1)) / Decimal(1_000_000))
    if isinstance(value, datetime):
        return value.isoformat() if value.tzinfo is None else _utc(value)
    if isinstance(value, Decimal):
        return _number(value)
    if isinstance(value, enum.Enum):
        return value.value
    return value


def _number(value: Decimal) -> int | str:
    return int(value) if value == value.to_integral_value() else str(value.normalize())


def _utc(value: datetime) -> str:
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def parse_spec(data: Mapping[str, Any], *, min_interval: timedelta = DEFAULT_MIN_INTERVAL,
               stored: bool = False) -> Spec:
    """Validate plain data (from TOML or JSON) into a spec.

    Args:
        data: the spec as a mapping; must carry ``version``.
        min_interval: the runtime's minimum interval resolution.
        stored: the spec was confirmed earlier and is read back from the store: zones
            are only loaded, not held to :func:`~triggers.check_zone`'s rule (pass
            ``min_interval=timedelta(0)`` too).

    Returns:
        the spec; for a new one, :attr:`SpecV1.warnings` lists what its author should
        know (a zone link stored under its target, a fixed offset).

    Raises:
        SpecError: listing every problem found (:attr:`SpecError.problems`), each
            naming its field and the fix; a missing or unknown ``version`` stops
            before anything else is checked. A value PostgreSQL could not store — a
            NUL, a lone surrogate, NaN or Infinity, an integer of over 1000 digits,
            in any field, key or ``agent.params`` value — is a problem of its field
            (:func:`~triggers._storable.storable_problems`).
    """
    version = data.get("version")
    if version is None:
        raise SpecError("version", "is missing.",
                        'add version 1 at the top of the spec (JSON "version": 1, TOML version = 1).')
    model = SUPPORTED_VERSIONS.get(version) if type(version) is int else None
    if model is None:
        raise SpecError(
            "version", f"{version!r} is not a spec version this watchkeeper reads.",
            f"use one of {sorted(SUPPORTED_VERSIONS)}; a newer spec needs a newer watchkeeper.",
        )
    unstorable = storable_problems(data, "")
    warnings: list[SpecWarning] = []
    context = {_MIN_INTERVAL_KEY: min_interval, _STORED_KEY: stored, _WARNINGS_KEY: warnings}
    try:
        spec = model.model_validate(dict(data), context=context)
    except pydantic.ValidationError as exc:
        found = _translate(exc)
        raise _merged(unstorable, [*found, *_unrun_rules(data, found)]) from exc
    except (RecursionError, OverflowError) as exc:
        raise _merged(unstorable, [SpecProblem(
            "spec", f"cannot be read ({type(exc).__name__}).",
            "keep values within ordinary ranges and nesting shallow.")]) from exc
    if unstorable:
        raise _merged(unstorable, [])
    spec._warnings = tuple(warnings)
    return spec


def _unrun_rules(data: Mapping[str, Any], found: list[SpecProblem]) -> list[SpecProblem]:
    """The trigger's cross-field rules that pydantic did not run because another of its
    fields failed: a rule whose own fields are valid runs here on the raw data
    (``first_match`` with a ``cooldown``); one that cannot says when it will
    (whether an ``at`` time exists in its zone: once the zone is valid)."""
    trigger = data.get("trigger")
    failed = {p.field for p in found}
    if not isinstance(trigger, Mapping) or not any(f.startswith("trigger.") for f in failed):
        return []
    kind = trigger.get("type")
    if kind == "condition" and trigger.get("mode") == "first_match" and \
            "trigger.cooldown" not in failed and _positive(trigger.get("cooldown")):
        return [SpecProblem(*_COOLDOWN_FIRST_MATCH)]
    if kind == "at" and "trigger.zone" in failed and "trigger.at" not in failed:
        return [SpecProblem("trigger.at", "whether this local time exists in the zone (not "
                            "skipped by a DST change) is checked once trigger.zone is valid.",
                            "fix trigger.zone; this check then runs.")]
    return []


def _positive(value: Any) -> bool:
    """Whether a raw duration is one the parser reads as more than zero."""
    try:
        return pydantic.TypeAdapter(timedelta).validate_python(value) > timedelta(0)
    except (pydantic.ValidationError, TypeError):
        return False


def _merged(first: list[SpecProblem], then: list[SpecProblem]) -> SpecError:
    """One error: ``first`` and those of ``then`` about another field, in the order of
    the spec's fields (``first`` before ``then`` within one top-level field)."""
    fields = {p.field for p in first}
    merged = [*first, *(p for p in then if p.field not in fields)]
    order = {name: index for index, name in enumerate(SpecV1.model_fields)}
    return SpecError.of(sorted(merged, key=lambda p: order.get(p.field.split(".")[0],
                                                               len(order))))


def _translate(exc: pydantic.ValidationError,
               root: type[BaseModel] | None = None) -> list[SpecProblem]:
    """Every error of ``exc`` as a problem, in pydantic's order (the model's field
    order; unknown fields after the known ones of their table).

    A misspelled field shows up as "extra" plus "missing": the extra one's fix names
    the missing field, which is then not reported a second time.
    """
    errors = _extras_sorted(exc.errors())
    problems: list[SpecProblem] = []
    suggested: set[str] = set()
    for error in errors:
        if error["type"] == "too_short" and _explained(error, errors):
            continue  # a list whose items failed is "too short after validation" too
        problem = _problems_of(error, errors, root or SpecV1)
        if error["type"] == "extra_forbidden" and problem[0].fix.startswith("did you mean"):
            parent = _where(error["loc"][:-1]) if len(error["loc"]) > 1 else ""
            suggested.add(f"{parent}.{_suggestion(error, errors)}".lstrip("."))
        problems.extend(problem)
    missing = {_where(e["loc"]) for e in errors if e["type"] == "missing"}
    return [p for p in problems
            if not (p.field in suggested and p.field in missing and p.problem == "is missing.")]


def _extras_sorted(errors: list[Any]) -> list[Any]:
    """``errors`` with each run of unknown fields of one table sorted by name (pydantic
    lists them in input order; the report should not depend on it)."""
    out: list[Any] = []
    for error in errors:
        run = out[-1]["loc"][:-1] if out and out[-1]["type"] == "extra_forbidden" else None
        if error["type"] == "extra_forbidden" and run == error["loc"][:-1]:
            out.append(error)
            index = len(out) - 1
            while index > 0 and out[index - 1]["type"] == "extra_forbidden" and \
                    out[index - 1]["loc"][:-1] == run and \
                    str(out[index - 1]["loc"][-1]) > str(error["loc"][-1]):
                out[index - 1], out[index] = out[index], out[index - 1]
                index -= 1
        else:
            out.append(error)
    return out


def _explained(error: Any, errors: list[Any]) -> bool:
    """Whether another error lies inside ``error``'s location."""
    loc = tuple(error["loc"])
    return any(len(e["loc"]) > len(loc) and tuple(e["loc"][:len(loc)]) == loc for e in errors)


def _problems_of(first: Any, errors: list[Any], root: type[BaseModel]) -> list[SpecProblem]:
    """One pydantic error as problems (a validator's SpecError may carry several); an
    error about a value's type or range says what fits (:func:`problem_of_error`)."""
    original = (first.get("ctx") or {}).get("error")
    where = _where(first["loc"])
    if isinstance(original, SpecError):
        return [SpecProblem(_field_at(where, p.field), p.problem, p.fix)
                for p in original.problems]
    if first["type"] == "union_tag_invalid":
        return [SpecProblem(
            "trigger.type", f"unknown trigger type {first['input'].get('type')!r}.",
            "use one of 'at', 'condition', 'cron', 'interval'.")]
    if first["type"] == "union_tag_not_found":
        return [SpecProblem("trigger.type", "is missing.",
                            "set trigger.type to 'at', 'condition', 'cron' or 'interval'.")]
    if first["type"] == "extra_forbidden":
        return [SpecProblem(where, "is not a field of this spec.", _did_you_mean(first, errors))]
    if first["type"] == "missing":
        return [SpecProblem(where, "is missing.", _add(root, first["loc"], where))]
    if first["type"] in ("literal_error", "enum"):
        expected = (first.get("ctx") or {}).get("expected", "")
        return [SpecProblem(where, f"{first['input']!r} is not allowed.", f"use {expected}.")]
    if first["type"].startswith("time_delta"):
        return [SpecProblem(where, f"{first['input']!r} is not a duration.",
                            "write seconds (1800) or an ISO 8601 duration such as 'PT30M' or "
                            "'P1D'.")]
    if first["type"].startswith("datetime"):
        return [SpecProblem(where, f"{first['input']!r} is not a date and time.",
                            "write ISO 8601, e.g. '2026-12-02T20:00:00+01:00'.")]
    return [problem_of_error(first, root, where)]


def _add(root: type[BaseModel], loc: tuple[int | str, ...], where: str) -> str:
    """The fix of a missing field: add it, saying what it is (its description)."""
    name = where.rsplit(".", 1)[-1]
    info = field_info(root, tuple(loc))
    description = " ".join((info.description or "").split()) if info is not None else ""
    return f"add {name}: {description}" if description else f"add {name}."


def _field_at(where: str, field: str) -> str:
    """The full path of a field a validator named, given where pydantic found the error.

    A validator names either a bare field of its own model (``threshold``: prefixed
    with ``where``) or a path from the spec's root without list indexes
    (``delivery.destination`` found at ``delivery.1``: ``delivery.1.destination``).
    """
    if "." not in field:  # a field of a nested model: prefix the model's path
        return where if where.split(".")[-1] == field else f"{where}.{field}"
    parts, named = where.split("."), field.split(".")
    plain = [p for p in parts if not p.isdigit()]
    if named[:len(plain)] == plain:
        return ".".join(parts + named[len(plain):])
    return field


def _did_you_mean(extra: Any, errors: list[Any]) -> str:
    """Suggest the missing field a misspelled one probably meant."""
    close = _suggestion(extra, errors)
    if close:
        return f"did you mean {close!r}?"
    return "remove it or check its spelling against the README."


def _suggestion(extra: Any, errors: list[Any]) -> str | None:
    """The missing sibling field closest to the unknown one, if any is close."""
    name = str(extra["loc"][-1])
    missing = [str(e["loc"][-1]) for e in errors
               if e["type"] == "missing" and tuple(e["loc"][:-1]) == tuple(extra["loc"][:-1])]
    close = difflib.get_close_matches(name, missing, n=1)
    if not close and len(extra["loc"]) == 1:  # a top-level key: any field of the spec
        close = difflib.get_close_matches(name, list(SpecV1.model_fields), n=1)
    return close[0] if close else None


def _where(loc: tuple[int | str, ...]) -> str:
    """Dotted field path; drops the discriminator tag pydantic inserts after 'trigger'."""
    parts = list(loc)
    if len(parts) > 1 and parts[0] == "trigger" and parts[1] in ("cron", "interval", "at",
                                                                  "condition"):
        del parts[1]
    parts = [p for p in parts if p not in ("Comparison", "AllOf", "AnyOf", "NotOf")]
    return ".".join(field_part(p) for p in parts) or "spec"
