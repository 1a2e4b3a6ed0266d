"""An operator's unit definitions (``WATCHKEEPER_UNITS_FILE``), added to the shared
registry of :mod:`triggers._units` line by line, each held to the bounds of a spec's
units (:mod:`triggers._unit_bounds`) before pint evaluates it. Pure: no I/O (the runtime
reads the file and passes its text).
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from typing import Any

from ._errors import SpecError, SpecProblems
from ._unit_bounds import MAX_DIGITS, MAX_EXPONENT, MAX_POWER, check_expression
from ._units import forget_cached_units, pint_reason, registry

__all__ = ["MAX_DEFINITION_LENGTH", "MAX_UNITS_TEXT", "MAX_UNIT_SCALE", "define_units"]

MAX_DEFINITION_LENGTH = 256
"""Characters a definition line may have, its ``#`` comment not counted."""
MAX_UNITS_TEXT = 1_000_000
"""Characters a units file may have (:func:`define_units` refuses more at once)."""
MAX_UNIT_SCALE = 300
"""A defined unit lies within 1e-300 .. 1e300 of the root units it is built from (so no
chain of definitions, each within the bounds, builds a unit whose conversion factor is a
billion-digit number)."""
_BOUNDS_FIX = (f"write numbers of at most {MAX_DIGITS} digits within 1e-{MAX_EXPONENT}.."
               f"1e{MAX_EXPONENT}, exponents that are plain numbers up to {MAX_POWER} and "
               "no power of a power, e.g. 'ppq = 1e-15' or 'grain_x = 64.79891 * milligram'.")

_DEFINED: dict[str, str] = {}
"""Definition lines already added by :func:`define_units`, by their text: loading the
same file twice is a no-op."""
_DIRECTIVE_FIX = "write one definition per line; @import, @group, @context and other " \
    "directives are not read."


def define_units(text: str, source: str = "units") -> list[str]:
    """Add unit definitions to the shared registry (:func:`~triggers._units.registry`).

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

    Every expression pint would evaluate (the value, an ``offset:`` or other modifier,
    a prefix's or a dimension's value, and the symbol and aliases) is held to the bounds
    of a spec's units before pint sees it (:func:`~triggers._unit_bounds.check_expression`:
    numbers :func:`~triggers.in_range`, exponents plain numbers up to 6, no power of a
    power), a line to :data:`MAX_DEFINITION_LENGTH` characters, and a defined unit to a
    positive size within 1e-300..1e300 (:data:`MAX_UNIT_SCALE`) of its root units:
    ``bomb = 9**9**9 * meter``, ``big = 1e999999 * meter`` or a line of 100,000 digits
    is refused at once instead of hanging every command that reads the file.

    Raises:
        SpecError: one problem per refused line, field ``"<source>:<line number>"``;
            or one problem, field ``source``, for a text over :data:`MAX_UNITS_TEXT`
            characters (nothing of it is defined).
    """
    if len(text) > MAX_UNITS_TEXT:
        raise SpecError(source, f"is over {MAX_UNITS_TEXT} characters long.",
                        "keep the units file to the definitions you use.")
    reg = registry()
    names: list[str] = []
    found = SpecProblems()
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        with found.check():
            names.append(_define_line(reg, line, f"{source}:{number}"))
    forget_cached_units()
    found.raise_if_any()
    return names


def _define_line(reg: Any, line: str, field: str) -> str:
    """Define one line; return its name.

    Raises:
        SpecError: naming ``field``.
    """
    if line in _DEFINED:
        return _DEFINED[line]
    if len(line) > MAX_DEFINITION_LENGTH:
        raise SpecError(field, f"{line[:40]!r}... is {len(line)} characters long, over "
                        f"{MAX_DEFINITION_LENGTH}.", "write one short definition per line.")
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
    for part in _evaluated_parts(name, value):
        try:
            check_expression(part)
        except ValueError as exc:
            shown = part.strip() if len(part.strip()) <= 60 else part.strip()[:57] + "..."
            raise SpecError(field, f"{shown!r} is refused ({exc}).", _BOUNDS_FIX) from None
    if not name.startswith("[") and not name.endswith("-") and "[" not in value:
        expression = value.split(";", 1)[0].split("=", 1)[0]
        try:
            quantity = reg.parse_expression(expression)
        except Exception as exc:  # pint raises several unrelated error types
            raise SpecError(field, f"{expression.strip()!r} cannot be read "
                            f"({pint_reason(exc)}).",
                            "define a unit from numbers and units pint knows, e.g. "
                            "'ppq = 1e-15' or 'grain_x = 64.79891 * milligram'.") from exc
        _check_scale(reg, quantity, expression.strip(), field)
    try:
        reg.define(line)
    except Exception as exc:  # pint raises several unrelated error types
        problem = "redefines a unit that exists" if "redefine" in str(exc).lower() \
            else f"cannot be read ({pint_reason(exc)})"
        raise SpecError(field, f"{line[:60]!r} {problem}.",
                        "pick a new name, in pint's definition syntax (name = value "
                        "[= symbol] [= alias]).") from exc
    _DEFINED[line] = name
    return name


def _evaluated_parts(name: str, value: str) -> list[str]:
    """The parts of ``name = value`` pint evaluates, split as pint's definition parser
    splits them (``pint/delegates/txt_defparser/plain.py``): a prefix's or a derived
    dimension's whole value; a unit's converter and each ``key: value`` modifier after
    ``;``; and the symbol and aliases after further ``=`` (names, checked all the same)."""
    converter, *aliases = value.split("=")
    parts = [converter]
    if not name.endswith("-") and not name.startswith("[") and ";" in converter:
        converter, modifiers = converter.split(";", 1)
        parts = [converter, *(m.partition(":")[2] for m in modifiers.split(";"))]
    return [part for part in (*parts, *aliases) if part.strip()]


def _check_scale(reg: Any, quantity: Any, expression: str, field: str) -> None:
    """Refuse a unit whose size is not positive or lies beyond 1e-300..1e300
    (:data:`MAX_UNIT_SCALE`) of its root units (in logarithms: no big number is built).

    Each unit it refers to is within the bound already (pint's own, or defined through
    this check), so its root factor is cheap to compute.

    Raises:
        SpecError: naming ``field``.
    """
    magnitude = Fraction(quantity.magnitude)
    if magnitude <= 0:
        raise SpecError(field, f"{expression!r} is not a positive size.",
                        "define a unit as a positive multiple of others (comparisons "
                        "assume a conversion keeps the order).")
    scale = _log10(magnitude)
    for unit, exponent in quantity.unit_items():
        try:
            factor = Fraction(reg.get_root_units(unit)[0])
        except Exception:  # a non-multiplicative unit: its factor is its own bounded scale
            continue
        if factor > 0:
            scale += float(exponent) * _log10(factor)
    if abs(scale) > MAX_UNIT_SCALE:
        raise SpecError(field, f"{expression!r} is about 1e{scale:.0f} of its root units, "
                        f"beyond 1e-{MAX_UNIT_SCALE}..1e{MAX_UNIT_SCALE}.",
                        "define the unit from units of a moderate size.")


def _log10(value: Fraction) -> float:
    """log10 of a positive Fraction of any size (math.log10 takes big ints, not floats
    beyond 1e308)."""
    return math.log10(value.numerator) - math.log10(value.denominator)
