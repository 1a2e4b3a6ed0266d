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
* An operator adds units with :func:`define_units` (pint's definition syntax; the
  runtime reads ``WATCHKEEPER_UNITS_FILE`` and passes its text).
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

from ._errors import SpecError, SpecProblems

__all__ = ["MAX_DIGITS", "MAX_EXPONENT", "Quantity", "Unit", "check_currency", "check_unit",
           "comparable", "define_units",
           "in_range", "parse_quantity", "quantity_of", "registry", "threshold_in"]

MAX_DIGITS = 40
"""Significant digits a value or threshold may have."""
MAX_EXPONENT = 100
"""Largest decimal exponent (either sign) of a value or threshold: exact conversion
turns a number into a Fraction, and 1e999999999 would be a billion-digit integer."""


def in_range(value: Decimal) -> bool:
    """Whether ``value`` is finite, has at most :data:`MAX_DIGITS` significant digits and
    lies within 1e-100 .. 1e100 in magnitude (or is zero)."""
    if not value.is_finite():
        return False
    if value.is_zero():  # 0E-99999 is zero, but no database column holds it
        return -(MAX_EXPONENT + MAX_DIGITS) <= int(value.as_tuple().exponent) <= MAX_EXPONENT
    return (len(value.as_tuple().digits) <= MAX_DIGITS
            and -MAX_EXPONENT <= value.adjusted() <= MAX_EXPONENT)


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
    _check_powers(text)
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


MAX_POWER = 6
"""Largest exponent a unit may carry (m**3, s**-2; pint evaluates m**9**9**9 for ever)."""
_POWER = re.compile(r"(\*\*|\^)\s*\(?\s*([-+]?[0-9.]+)")


def _check_powers(text: str) -> None:
    """Refuse chained or large exponents before pint evaluates them.

    Raises:
        ValueError: an exponent above :data:`MAX_POWER`, or a power of a power.
    """
    if re.search(r"(\*\*|\^)[^*^/]*(\*\*|\^)", text.replace(" ", "")) and \
            re.search(r"(\*\*|\^)\s*\(?\s*[-+]?[0-9.]+\s*\)?\s*(\*\*|\^)", text):
        raise ValueError("a power of a power")
    for match in _POWER.finditer(text):
        try:
            exponent = abs(float(match.group(2)))
        except ValueError:
            raise ValueError(f"exponent {match.group(2)!r}") from None
        if exponent > MAX_POWER:
            raise ValueError(f"exponent {match.group(2)} is above {MAX_POWER}")
    if re.search(r"[A-Za-z_]\d{2,}", text):  # pint reads m99999 as m**99999
        raise ValueError("digits after a unit name (write m**3, not m3)")
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
        raise SpecError(field, f"{shown!r} is not a unit ({_pint_reason(exc)}).",
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


def _pint_reason(exc: Exception) -> str:
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


_DEFINED: dict[str, str] = {}
"""Definition lines already added by :func:`define_units`, by their text: loading the
same file twice is a no-op."""
_DIRECTIVE_FIX = "write one definition per line; @import, @group, @context and other " \
    "directives are not read."


def define_units(text: str, source: str = "units") -> list[str]:
    """Add unit definitions to the shared registry (:func:`registry`).

    Args:
        text: pint's definition syntax, one definition per line (``ppq = 1e-15``,
            ``AQI = [air_quality_index]``, ``mmHg_x = 133.322 * pascal = mmHgx``,
            ``zeta- = 1e21``); blank lines and ``#`` comments are skipped.
        source: what the text came from, for the error (e.g. the file's path).

    Returns:
        The names the lines define, in order (a line already added by an earlier call,
        with the same text, is not added again; its name is returned all the same).

    Every line is tried, in order (a line may use the units of the lines before it).
    A line that pint cannot read, that redefines a unit (``ppm``, ``USD``), that refers
    to an unknown unit, that is a directive (``@import``), or whose name a spec could
    not use (``pm25``: digits after a name read as a power) is refused; the lines
    before and after it are still defined.

    Raises:
        SpecError: one problem per refused line, field ``"<source>:<line number>"``.
    """
    reg = registry()
    names: list[str] = []
    found = SpecProblems()
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        with found.check():
            names.append(_define_line(reg, line, f"{source}:{number}"))
    _unit.cache_clear()
    threshold_in.cache_clear()
    _fold.cache_clear()
    found.raise_if_any()
    return names


def _define_line(reg: Any, line: str, field: str) -> str:
    """Define one line; return its name.

    Raises:
        SpecError: naming ``field``.
    """
    if line in _DEFINED:
        return _DEFINED[line]
    if line.startswith("@"):
        raise SpecError(field, f"{line[:40]!r} is a directive.", _DIRECTIVE_FIX)
    name, equals, value = (part.strip() for part in line.partition("="))
    if not equals or not name or not value or not all(
            part.strip() for part in value.split(";", 1)[0].split("=")):
        raise SpecError(field, f"{line[:60]!r} is not a definition.",
                        "write name = value, e.g. 'ppq = 1e-15' or 'AQI = [air_quality]'.")
    unit_name = name.strip("[]").rstrip("-")
    if not unit_name.isidentifier() or re.search(r"[^\W\d]\d{2,}", unit_name):
        raise SpecError(field, f"{name!r} cannot name a unit in a spec.",
                        "use letters and '_' (a number after a name reads as a power: "
                        "write pm2_5, not pm25).")
    if not name.startswith("[") and not name.endswith("-") and "[" not in value:
        expression = value.split(";", 1)[0].split("=", 1)[0]
        try:
            reg.parse_expression(expression)
        except Exception as exc:  # pint raises several unrelated error types
            raise SpecError(field, f"{expression.strip()!r} cannot be read "
                            f"({_pint_reason(exc)}).",
                            "define a unit from numbers and units pint knows, e.g. "
                            "'ppq = 1e-15' or 'grain_x = 64.79891 * milligram'.") from exc
    try:
        reg.define(line)
    except Exception as exc:  # pint raises several unrelated error types
        problem = "redefines a unit that exists" if "redefine" in str(exc).lower() \
            else f"cannot be read ({_pint_reason(exc)})"
        raise SpecError(field, f"{line[:60]!r} {problem}.",
                        "pick a new name, in pint's definition syntax (name = value "
                        "[= symbol] [= alias]).") from exc
    _DEFINED[line] = name
    return name
