"""Three-valued predicates over observations (DESIGN "Conditions (three-valued)").

A predicate is a comparison of one subject's observation with a threshold quantity
(``<``, ``<=``, ``>``, ``>=``, ``==``, ``!=``), or ``all`` / ``any`` / ``not`` of
predicates, at most 4 levels deep and 16 comparisons in all. Evaluation is Kleene's
strong three-valued logic:

* a comparison is ``unknown`` when its observation is absent, missing, failed, timed
  out, from the future, older than the comparison's ``freshness``, out of range
  (:func:`triggers._units.in_range`), in another currency,
  or in a unit that does not compare (another dimension; an absolute temperature
  against a difference). A stale quote or a number in another currency is never
  evidence that the condition is false;
* ``all`` is false if any part is false, else unknown if any is unknown, else true;
  ``any`` dually; ``not`` swaps true and false and keeps unknown.

Pure: the observations and ``now`` are arguments.
"""

from __future__ import annotations

import enum
import operator
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from fractions import Fraction
from typing import Annotated, Any, Literal

import pydantic
from pydantic import ConfigDict, Discriminator, Field, Tag

from ._errors import SpecError
from ._observations import Observation, ObservationStatus
from ._slots import format_utc
from ._units import (
    Quantity,
    check_currency,
    check_unit,
    comparable,
    in_range,
    parse_quantity,
    quantity_of,
    threshold_in,
    units_generation,
)
from ._values import Duration

__all__ = ["MAX_DEPTH", "MAX_LEAVES", "AllOf", "AnyOf", "Comparison", "Evaluation", "Leaf",
           "NotOf", "Predicate", "Verdict", "check_bounds", "evaluate", "subjects_of"]

MAX_DEPTH = 4
"""Levels of nesting a predicate may have (a lone comparison is depth 1)."""
MAX_LEAVES = 16
"""Comparisons a predicate may hold in all."""


class Verdict(enum.StrEnum):
    """A three-valued truth value with Kleene's connectives (``&``, ``|``, ``~``)."""

    TRUE = "true"
    FALSE = "false"
    UNKNOWN = "unknown"

    @classmethod
    def of(cls, value: bool) -> Verdict:
        """TRUE or FALSE."""
        return cls.TRUE if value else cls.FALSE

    def __and__(self, other: Verdict) -> Verdict:  # type: ignore[override]
        if Verdict.FALSE in (self, other):
            return Verdict.FALSE
        if Verdict.UNKNOWN in (self, other):
            return Verdict.UNKNOWN
        return Verdict.TRUE

    def __or__(self, other: Verdict) -> Verdict:  # type: ignore[override]
        if Verdict.TRUE in (self, other):
            return Verdict.TRUE
        if Verdict.UNKNOWN in (self, other):
            return Verdict.UNKNOWN
        return Verdict.FALSE

    def __invert__(self) -> Verdict:
        return {Verdict.TRUE: Verdict.FALSE, Verdict.FALSE: Verdict.TRUE}.get(self, self)

    @property
    def definite(self) -> bool:
        """True for TRUE and FALSE."""
        return self is not Verdict.UNKNOWN


_OPS: dict[str, Callable[[Any, Any], bool]] = {
    "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
    "==": operator.eq, "!=": operator.ne,
}


class _Model(pydantic.BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, ser_json_timedelta="float")


class Comparison(_Model):
    """``subject op threshold``, e.g. ``{subject = "AAPL", op = "<=", threshold =
    "10 USD/share", freshness = "P45D"}``.

    Attributes:
        freshness: the oldest ``as_of`` (relative to the poll) still evidence; older
            is ``unknown``. ``None``: any age.
        unit: the unit the source reports this subject in, if you want it checked at
            proposal (a delta against an absolute temperature, USD against EUR); at run
            time the observation's own unit decides.
    """

    subject: Annotated[str, Field(min_length=1, max_length=256)] = Field(description=(
        "What the source reports on, e.g. 'AAPL'."))
    op: Literal["<", "<=", ">", ">=", "==", "!="] = Field(description=(
        "How the reading compares with threshold."))
    threshold: Annotated[str, Field(min_length=1, max_length=100)] = Field(description=(
        "A quantity with its unit, e.g. '10 USD/share' or '5000 USD'."))
    freshness: Duration | None = Field(None, description=(
        "The oldest reading still taken as evidence (seconds or ISO 8601, e.g. 'P45D'); older reads "
        "unknown. null: any age."))
    unit: Annotated[str, Field(max_length=64)] | None = Field(None, description=(
        "The unit the source reports this subject in, to check the threshold against at proposal; null: "
        "the reading's own unit decides."))

    @pydantic.field_validator("freshness", mode="before")
    @classmethod
    def _freshness_text(cls, value: Any) -> Any:
        if isinstance(value, bool) or (isinstance(value, str) and
                                       re.fullmatch(r"P[^T]*[YM].*", value.upper())):
            raise SpecError("freshness", f"{value!r} is not a fixed duration (months and "
                            "years vary in length).", "write days, e.g. freshness = 'P45D'.")
        return value

    @pydantic.field_validator("threshold")
    @classmethod
    def _threshold(cls, value: str) -> str:
        parse_quantity(value, "threshold")
        return value

    @pydantic.field_validator("freshness")
    @classmethod
    def _freshness(cls, value: timedelta | None) -> timedelta | None:
        if value is not None and not timedelta(0) < value <= timedelta(days=3660):
            raise SpecError("freshness", "must be positive and at most 3660 days.",
                            "e.g. freshness = 'P2D'.")
        return value

    @pydantic.model_validator(mode="after")
    def _units_compare(self) -> Comparison:
        if self.unit is not None:
            observed = check_unit(self.unit, "unit")
            threshold = self.quantity
            if threshold.unit.name == "dimensionless" and observed.name != "dimensionless":
                raise SpecError(
                    "threshold", f"{self.threshold!r} has no unit, but the readings are in "
                    f"{self.unit!r} (a bare 5 against percent means 500 %).",
                    f"write the unit: threshold = '{self.threshold.strip()} {self.unit}'.")
            if not comparable(threshold.unit, observed):
                raise SpecError(
                    "threshold", f"{self.threshold!r} does not compare with observations in "
                    f"{self.unit!r} (another dimension or currency, or an absolute "
                    "temperature against a temperature difference).",
                    "give the threshold in a unit of the same kind, e.g. '86 degF' for degC "
                    "readings, '5 delta_degF' for a change in degC.")
        return self

    @property
    def quantity(self) -> Quantity:
        """The threshold as an exact quantity."""
        return _quantity(self.threshold)


class AllOf(_Model):
    """True when every part is true (Kleene conjunction)."""

    all: Annotated[tuple[Predicate, ...], Field(min_length=1)] = Field(description=(
        "True when every one of these predicates is true."))


class AnyOf(_Model):
    """True when some part is true (Kleene disjunction)."""

    any: Annotated[tuple[Predicate, ...], Field(min_length=1)] = Field(description=(
        "True when any of these predicates is true."))


class NotOf(_Model):
    """The negation (unknown stays unknown)."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True,
                              ser_json_timedelta="float")

    not_: Predicate = Field(alias="not", description=(
        "True when this predicate is false (unknown stays unknown)."))


def _kind(value: Any) -> str | None:
    """Which predicate a value is, by its keys: ``all``, ``any``, ``not``, else a
    comparison (so an error names the right part, not every member of the union)."""
    if isinstance(value, dict):
        for key, tag in (("all", "AllOf"), ("any", "AnyOf"), ("not", "NotOf")):
            if key in value:
                return tag
        return "Comparison"
    return type(value).__name__ if isinstance(value, Comparison | AllOf | AnyOf | NotOf) \
        else None


Predicate = Annotated[
    Annotated[Comparison, Tag("Comparison")] | Annotated[AllOf, Tag("AllOf")]
    | Annotated[AnyOf, Tag("AnyOf")] | Annotated[NotOf, Tag("NotOf")],
    Discriminator(_kind, custom_error_type="predicate",
                  custom_error_message="a predicate is a comparison (subject, op, threshold) "
                                       "or a table with all, any or not")]
AllOf.model_rebuild()
AnyOf.model_rebuild()
NotOf.model_rebuild()


def _parts(predicate: Predicate) -> tuple[Predicate, ...]:
    if isinstance(predicate, AllOf):
        return predicate.all
    if isinstance(predicate, AnyOf):
        return predicate.any
    if isinstance(predicate, NotOf):
        return (predicate.not_,)
    return ()


def check_bounds(predicate: Predicate, field: str = "trigger.predicate") -> None:
    """Refuse predicates deeper than :data:`MAX_DEPTH` or with more than
    :data:`MAX_LEAVES` comparisons.

    Raises:
        SpecError: naming ``field``.
    """
    def walk(p: Predicate, depth: int) -> tuple[int, int]:
        parts = _parts(p)
        if not parts:
            return depth, 1
        results = [walk(q, depth + 1) for q in parts]
        return max(d for d, _ in results), sum(n for _, n in results)

    depth, leaves = walk(predicate, 1)
    if depth > MAX_DEPTH:
        raise SpecError(field, f"is nested {depth} levels deep (at most {MAX_DEPTH}).",
                        "flatten it: all/any take several parts.")
    if leaves > MAX_LEAVES:
        raise SpecError(field, f"holds {leaves} comparisons (at most {MAX_LEAVES}).",
                        "split it into several definitions.")


def subjects_of(predicate: Predicate) -> tuple[str, ...]:
    """The subjects the predicate reads, in first-use order, without repeats."""
    seen: dict[str, None] = {}

    def walk(p: Predicate) -> None:
        if isinstance(p, Comparison):
            seen.setdefault(p.subject, None)
        for q in _parts(p):
            walk(q)
    walk(predicate)
    return tuple(seen)


@dataclass(frozen=True, slots=True)
class Leaf:
    """One comparison's outcome: its verdict, why, and the observation it used."""

    comparison: Comparison
    verdict: Verdict
    reason: str
    observation: Observation | None


@dataclass(frozen=True, slots=True)
class Evaluation:
    """A predicate's verdict, a one-line reason, and every comparison's outcome."""

    verdict: Verdict
    reason: str
    leaves: tuple[Leaf, ...]


def evaluate(predicate: Predicate, observations: Mapping[str, Observation],
             now: datetime) -> Evaluation:
    """Evaluate ``predicate`` against the latest observation of each subject at ``now``
    (aware). Never raises for bad data: what cannot be judged is ``unknown``."""
    leaves: list[Leaf] = []

    def walk(p: Predicate) -> tuple[Verdict, str]:
        """The verdict of ``p`` and its reason as a tree: ``all(...)``, ``not(...)``."""
        if isinstance(p, Comparison):
            observation = observations.get(p.subject)
            try:
                leaf = compare(p, observation, now)
            except Exception as exc:  # a malformed observation is unknown, never a crash
                leaf = Leaf(p, Verdict.UNKNOWN, f"unknown: {p.subject} could not be judged "
                            f"({type(exc).__name__}: {exc})", observation)
            leaves.append(leaf)
            return leaf.verdict, leaf.reason
        if isinstance(p, NotOf):
            inner, why = walk(p.not_)
            return ~inner, f"not({why})"
        parts = [walk(q) for q in (p.all if isinstance(p, AllOf) else p.any)]
        result = Verdict.TRUE if isinstance(p, AllOf) else Verdict.FALSE
        for part, _ in parts:
            result = result & part if isinstance(p, AllOf) else result | part
        name = "all" if isinstance(p, AllOf) else "any"
        return result, f"{name}({'; '.join(why for _, why in parts)}) is {result.value}"

    verdict, tree = walk(predicate)
    reason = tree if len(leaves) == 1 and isinstance(predicate, Comparison) \
        else f"{verdict.value}: {tree}"
    return Evaluation(verdict, reason, tuple(leaves))


def compare(comparison: Comparison, observation: Observation | None, now: datetime) -> Leaf:
    """One comparison, three-valued (see the module docstring for when it is unknown)."""
    subject = comparison.subject
    if observation is None:
        return Leaf(comparison, Verdict.UNKNOWN, f"unknown: no observation of {subject}", None)
    if observation.status is not ObservationStatus.OK or observation.value is None:
        why = f" ({observation.detail})" if observation.detail else ""
        return Leaf(comparison, Verdict.UNKNOWN,
                    f"unknown: {subject} is {observation.status.value}{why}", observation)
    if observation.as_of is None or observation.as_of > now:
        return Leaf(comparison, Verdict.UNKNOWN,
                    f"unknown: {subject} has no as_of at or before the poll", observation)
    if comparison.freshness is not None and now - observation.as_of > comparison.freshness:
        return Leaf(comparison, Verdict.UNKNOWN,
                    f"unknown: {subject} as of {format_utc(observation.as_of)} is older than "
                    f"its freshness {_duration(comparison.freshness)}", observation)
    value = observation.value
    unit, currency = observation.unit, observation.currency
    key = (id(comparison), id(value), unit, currency)
    judged = _JUDGED.get(key)
    if judged is None or judged[0] is not comparison or judged[1] is not value \
            or judged[2] != units_generation():
        if len(_JUDGED) >= 65_536:
            _JUDGED.clear()
        judged = _JUDGED[key] = (comparison, value, units_generation(),
                                 *_judge_value(comparison, value, unit, currency))
    return Leaf(comparison, judged[3], judged[4], observation)


def _judge_value(comparison: Comparison, value: Decimal, unit: str | None,
                 currency: str | None) -> tuple[Verdict, str]:
    """The verdict and reason of ``comparison`` on a fresh reading of ``value`` in
    ``unit`` and ``currency`` (:func:`compare`'s last steps: they depend on nothing else,
    and a series hands the same reading to every poll until its next row)."""
    subject = comparison.subject
    if not in_range(value):
        return Verdict.UNKNOWN, f"unknown: {subject} value {value} is out of range"
    shown = f"{value} {unit or ''}".strip()
    try:
        check_unit(unit or "")
        if currency:
            check_currency(currency)
    except SpecError as exc:
        return Verdict.UNKNOWN, (f"unknown: {subject} {shown}"
                                 f"{' ' + currency if currency else ''}: {exc.problem}")
    folded = quantity_of(value, unit, currency)
    if folded is None:
        return Verdict.UNKNOWN, (f"unknown: {subject} {shown} is in {currency}, which its "
                                 "unit contradicts")
    magnitude, folded_unit = folded
    threshold = comparison.quantity
    bound = threshold_in(threshold.magnitude, threshold.unit.name, folded_unit)
    if bound is None:
        return Verdict.UNKNOWN, (f"unknown: {subject} {shown}"
                                 + (f" {currency}" if currency and currency not in shown else "")
                                 + f" does not compare with {comparison.threshold}")
    verdict = Verdict.of(_OPS[comparison.op](_fraction(magnitude), bound))
    return verdict, f"{verdict.value}: {subject} {shown} {comparison.op} {comparison.threshold}"


_JUDGED: dict[tuple[int, int, str | None, str | None],
              tuple[Comparison, Decimal, int, Verdict, str]] = {}
""":func:`_judge_value`'s answers by the comparison and the reading (the same objects:
each entry holds both, so their ids stand for them while it lives) and the unit
registry's generation (:func:`units_generation`: new unit definitions may change an
answer). A series repeats a reading at every poll until its next row; a live source
makes new objects, and is judged anew."""


_QUANTITIES: dict[str, Quantity] = {}
_FRACTIONS: dict[Any, Fraction] = {}


def _fraction(value: Any) -> Fraction:
    """``Fraction(value)``, made once per value while it is recent (a series repeats a
    reading at every poll until the next row)."""
    exact = _FRACTIONS.get(value)
    if exact is None:
        if len(_FRACTIONS) >= 65_536:
            _FRACTIONS.clear()
        exact = _FRACTIONS[value] = Fraction(value)
    return exact


def _quantity(text: str) -> Quantity:
    cached = _QUANTITIES.get(text)
    if cached is None:
        if len(_QUANTITIES) > 65_536:
            _QUANTITIES.clear()
        cached = _QUANTITIES[text] = parse_quantity(text)
    return cached


def _duration(value: timedelta) -> str:
    seconds = value.total_seconds()
    if seconds % 86400 == 0:
        return f"{int(seconds // 86400)} d"
    if seconds % 3600 == 0:
        return f"{int(seconds // 3600)} h"
    return f"{seconds:g} s"


def decimal_or_none(value: Any) -> Decimal | None:
    """``Decimal(value)`` for a finite number, else ``None`` (NaN, inf, text)."""
    try:
        number = Decimal(str(value))
    except Exception:
        return None
    return number if number.is_finite() else None
