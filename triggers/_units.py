"""Quantities: one shared pint registry, exact arithmetic, currencies as dimensions.

DESIGN "Conditions (three-valued)": quantities compare exactly (77 degF <= 25 degC and
0.1 + 0.2 <= 0.3 USD are true, as on paper); currencies are distinct base dimensions,
so USD never converts to EUR; offset units (degC, degF) compare as absolute
temperatures.

How:

* pint's ``UnitRegistry`` with ``non_int_type=Fraction``: every definition factor
  (``degF = 5/9 kelvin; offset: 233.15 + 200/9``) is parsed as an exact rational, so a
  conversion is exact. Observation values are ``Decimal`` (exactly representable as a
  ``Fraction``). ``Decimal`` itself is not enough: 5/9 has no finite decimal expansion.
* Every active ISO 4217 code (from ``pycountry``) is defined as its own base dimension
  (``USD`` is ``[currency_USD]``, ``EUR`` is ``[currency_EUR]``, ...); ``share`` is the
  base dimension ``[share]`` so prices per share ("USD/share") work.
* Concentrations: pint has ``ppm``; ``ppb`` (1e-9) and ``ppt`` (1e-12, parts per
  *trillion*, as in air quality; parts per thousand is ``permille``) are added, exact.
  Mass concentrations parse as written (``ug/m**3``, ``µg/m³``, ``μg/m^3``);
  superscript exponents are read as ``**`` powers, so they obey :data:`MAX_POWER` too.
* An operator adds units with :func:`~triggers._unit_file.define_units` (pint's
  definition syntax; the runtime reads ``WATCHKEEPER_UNITS_FILE`` and passes its text).
* Every unit string is held to :mod:`triggers._unit_bounds` before pint evaluates it.
* Comparing an observation with a threshold converts the threshold once into the
  observation's unit and caches that per unit pair (:func:`threshold_in`), so the hot
  path is one ``Fraction`` comparison — pint is consulted once per pair, not per
  evaluation.

Pure: no I/O, no clock. The registry is built once per process, on first use.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from typing import Any

from ._errors import SpecError
from ._unit_bounds import MAX_DIGITS, MAX_EXPONENT, MAX_POWER, check_expression, in_range

__all__ = ["MAX_DIGITS", "MAX_EXPONENT", "MAX_POWER", "MAX_UNIT_LENGTH", "Quantity", "Unit",
           "check_currency", "check_unit", "comparable", "forget_cached_units", "in_range",
           "parse_quantity", "pint_reason", "quantity_of", "registry", "threshold_in",
           "units_generation"]

_QUANTITY = re.compile(r"\s*([-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)\s*(.*?)\s*",
                       re.ASCII | re.DOTALL)


@functools.cache
def registry() -> Any:
    """The process-wide pint ``UnitRegistry`` (exact ``Fraction`` magnitudes, ISO 4217
    currencies and ``share`` as base dimensions). Built on first use (about 1 s)."""
    import pint
    import pycountry

    reg = pint.UnitRegistry(non_int_type=Fraction, autoconvert_offset_to_baseunit=False,
                            on_redefinition="raise")
    reg.define("share = [share] = shares")
    reg.define("ppb = 1e-9")  # parts per billion (pint has ppm only)
    reg.define("ppt = 1e-12")  # parts per trillion: without it pint reads ppt as pico-pint
    for currency in pycountry.currencies:
        code = currency.alpha_3
        reg.define(f"{code} = [currency_{code}]")
    return reg


@functools.cache
def _currency_codes() -> frozenset[str]:
    import pycountry

    return frozenset(c.alpha_3 for c in pycountry.currencies)


def check_currency(code: str, field: str = "currency") -> str:
    """``code`` upper-cased if it is an ISO 4217 currency code (``usd`` -> ``USD``).

    Raises:
        SpecError: naming ``field``.
    """
    upper = code.strip().upper()
    if upper not in _currency_codes():
        raise SpecError(field, f"{code!r} is not an ISO 4217 currency code.",
                        "use a three-letter code such as USD, EUR or JPY.")
    return upper


@dataclass(frozen=True, slots=True)
class Unit:
    """A validated unit: its canonical pint name and, for a temperature, whether it is
    an absolute temperature (kelvin, degC, degF, degR) or a difference (delta_degC,
    delta_degF). The two kinds never compare."""

    name: str
    temperature: str | None = None  # "absolute", "delta" or None

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True, slots=True)
class Quantity:
    """An exact magnitude in a unit, e.g. ``Quantity(Decimal("86"), check_unit("degF"))``."""

    magnitude: Decimal
    unit: Unit

    def __str__(self) -> str:
        return f"{self.magnitude} {self.unit}"


@functools.lru_cache(maxsize=4096)
def _unit(text: str) -> Unit:
    """Canonical unit for ``text``; raises pint's errors (or ValueError)."""
    reg = registry()
    if text.strip() in ("", "1", "dimensionless"):
        return Unit("dimensionless")
    if len(text) > 4 * MAX_UNIT_LENGTH:  # canonical names may be longer than user text
        raise ValueError(f"longer than {MAX_UNIT_LENGTH} characters")
    text = _superscripts(text)
    check_expression(text)
    unit = reg.Unit(text)
    items = list(unit._units.items())  # pint's UnitsContainer: {name: exponent}
    offset = any(not reg._units[name].is_multiplicative for name, _ in items)
    # pint silently turns an offset unit inside a product or quotient (degC/s) into a
    # difference (delta_degC/s); refuse that: write delta_degC/s if a rate is meant
    written_offset = any(part in _OFFSET_NAMES for part in re.split(r"[\s*/()^]+", text))
    if (offset or written_offset) and (len(items) != 1 or items[0][1] != 1):
        raise ValueError("an offset unit (degC, degF) cannot be multiplied, divided or "
                         "raised to a power; write delta_degC/s for a rate")
    dimensions = {str(k): v for k, v in dict(unit.dimensionality).items()}
    temperature = None
    if dimensions == {"[temperature]": 1}:
        temperature = "absolute" if offset or items[0][0] in ("kelvin", "degree_Rankine") \
            else "delta"
    return Unit(_name(items), temperature)


_OFFSET_NAMES = frozenset({"degC", "degF", "celsius", "fahrenheit", "degree_Celsius",
                           "degree_Fahrenheit", "°C", "°F", "degreeC", "degreeF", "degRe",
                           "reaumur", "degree_Reaumur", "°Re"})
_SUPERSCRIPT = re.compile("[⁺⁻]?[⁰¹²³⁴⁵⁶⁷⁸⁹]+")
_SUPERSCRIPT_DIGITS = str.maketrans("⁰¹²³⁴⁵⁶⁷⁸⁹⁺⁻", "0123456789+-")


def _superscripts(text: str) -> str:
    """``µg/m³`` -> ``µg/m**3``; ``s⁻¹`` -> ``s**-1`` (pint reads both; this way the
    exponent checks see them)."""
    return _SUPERSCRIPT.sub(lambda m: "**" + m.group().translate(_SUPERSCRIPT_DIGITS), text)


MAX_UNIT_LENGTH = 64
"""Characters a unit string may have (pint's parser is not linear in the length)."""


def _name(items: list[tuple[str, Any]]) -> str:
    """A canonical pint unit string from (name, exponent) pairs (pint's own formatter
    cannot print the Fraction exponents of this registry)."""
    def power(name: str, exponent: Any) -> str:
        value = Fraction(exponent)
        if value == 1:
            return name
        shown = str(value.numerator) if value.denominator == 1 else f"({value})"
        return f"{name} ** {shown}"
    return " * ".join(power(name, exponent) for name, exponent in sorted(items))


def check_unit(text: str, field: str = "unit") -> Unit:
    """Validate a unit string (``"USD/share"``, ``"degF"``, ``"delta_degC"``, ``"mm"``).

    Raises:
        SpecError: naming ``field``: unknown unit, a prefixed or compound offset unit
            (``kilodegC``, ``degC/s``).
    """
    try:
        if len(text) > MAX_UNIT_LENGTH:
            raise ValueError(f"longer than {MAX_UNIT_LENGTH} characters")
        return _unit(text)
    except Exception as exc:  # pint raises several unrelated error types
        shown = text if len(text) <= 80 else text[:77] + "..."
        raise SpecError(field, f"{shown!r} is not a unit ({pint_reason(exc)}).",
                        "use a pint unit such as 'USD/share', 'degF', 'delta_degC', 'ppb', "
                        "'ug/m**3' or 'percent' (currencies are ISO 4217 codes), or define "
                        "it in WATCHKEEPER_UNITS_FILE.") from exc


def parse_quantity(text: str, field: str = "threshold") -> Quantity:
    """``"86 degF"`` -> Quantity(Decimal("86"), degF); ``"5000"`` is dimensionless.

    Raises:
        SpecError: naming ``field``: no number first, a number out of range
            (:func:`in_range`), or a bad unit.
    """
    match = _QUANTITY.fullmatch(text) if isinstance(text, str) else None
    if match is None:
        raise SpecError(field, f"{text!r} is not a number followed by a unit.",
                        "e.g. threshold = '10 USD/share' or '86 degF'.")
    try:
        magnitude = Decimal(match.group(1))
    except InvalidOperation as exc:  # pragma: no cover - the pattern admits only numbers
        raise SpecError(field, f"{match.group(1)!r} is not a number.", "e.g. '10.5'.") from exc
    if not in_range(magnitude):
        raise SpecError(field, f"{match.group(1)!r} is out of range (at most {MAX_DIGITS} "
                        f"significant digits, magnitude 1e-{MAX_EXPONENT} to 1e{MAX_EXPONENT}).",
                        "write the threshold in a unit that keeps the number moderate.")
    return Quantity(magnitude, check_unit(match.group(2), field))


def pint_reason(exc: Exception) -> str:
    """The first line of a pint error, at most 160 characters (pint's messages can quote
    a whole expression)."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text[:160]


@functools.lru_cache(maxsize=65536)
def threshold_in(threshold_magnitude: Decimal, threshold_unit: str,
                 observed_unit: str) -> Fraction | None:
    """The threshold converted exactly into ``observed_unit``, or ``None`` when the two
    are not comparable (another dimension, another currency, an unknown unit, an
    absolute temperature against a temperature difference).

    Cached per (threshold, unit pair): the hot path of a comparison is then one
    ``Fraction`` comparison. Unit conversions between comparable units are increasing
    (positive scale), so ``value OP threshold`` in the observation's unit is the same
    comparison as in the threshold's unit.
    """
    try:
        source = _unit(threshold_unit)
        target = _unit(observed_unit)
    except Exception:
        return None
    if source.temperature != target.temperature:
        return None  # an absolute temperature is not comparable with a difference
    reg = registry()
    try:
        converted = reg.Quantity(Fraction(threshold_magnitude), source.name).to(target.name)
    except Exception:
        return None
    magnitude = converted.magnitude
    return magnitude if isinstance(magnitude, Fraction) else Fraction(magnitude)


def comparable(a: Unit, b: Unit) -> bool:
    """Whether values in ``a`` and ``b`` can be compared (same dimension, same
    currency, both absolute temperatures or both differences)."""
    return threshold_in(Decimal(1), a.name, b.name) is not None


def quantity_of(value: Decimal, unit: str | None, currency: str | None) -> tuple[Decimal, str] | None:
    """An observation's value and unit with its currency folded in: a unit without a
    currency dimension is multiplied by ``currency``; a unit that has one must name the
    same currency. ``None`` when they disagree (USD/share reported in EUR)."""
    name = (unit or "").strip() or "dimensionless"
    if not currency:
        return value, name
    folded = _fold(name, currency.strip().upper())
    return None if folded is None else (value, folded)


@functools.lru_cache(maxsize=4096)
def _fold(name: str, code: str) -> str | None:
    """The unit ``name`` with currency ``code`` folded in (cached per pair)."""
    try:
        parsed = _unit(name)
    except Exception:
        return None
    currencies = {dim for dim in _dimension_names(parsed) if dim.startswith("[currency_")}
    if not currencies:
        return code if name == "dimensionless" else f"{code} * ({name})"
    return name if currencies == {f"[currency_{code}]"} else None


def _dimension_names(unit: Unit) -> list[str]:
    if unit.name == "dimensionless":
        return []
    return [str(d) for d in dict(registry().Unit(unit.name).dimensionality)]


_GENERATION = [0]


def units_generation() -> int:
    """How many times the cached answers about units were forgotten
    (:func:`forget_cached_units`): a cache of an answer that used units keeps it only
    while this number is unchanged."""
    return _GENERATION[0]


def forget_cached_units() -> None:
    """Forget every cached answer about units (after new definitions, a unit that was
    unknown may exist)."""
    _unit.cache_clear()
    threshold_in.cache_clear()
    _fold.cache_clear()
    _GENERATION[0] += 1
