"""Bounds on what pint evaluates: a unit string of a spec or an observation, and every
expression of an operator's units file.

pint evaluates a unit expression as arithmetic on exact Fractions: ``m**9**9**9`` (a
power of a power), ``km**6,0,0,0,0,0,0`` (pint drops commas: ``km**6000000``), or
``1e999999`` (a million-digit integer) would run for minutes or exhaust memory, and a
spec's threshold is evaluated by every poll. :func:`check_expression` reads the tokens
pint reads and refuses such input before pint sees it. Pure: no I/O.
"""

from __future__ import annotations

import re
import tokenize
from decimal import Decimal
from fractions import Fraction

__all__ = ["MAX_DIGITS", "MAX_EXPONENT", "MAX_POWER", "check_expression", "in_range"]

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


MAX_POWER = 6
"""Largest exponent a unit may carry (m**3, s**-2; pint evaluates m**9**9**9 for ever)."""
_NUMBER = re.compile(r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?")
_OPERATORS = frozenset({"+", "-", "*", "/", "**", "(", ")"})
_SKIPPED = frozenset({"NEWLINE", "NL", "ENDMARKER", "INDENT", "DEDENT"})


def check_expression(text: str) -> None:
    """Refuse, before pint evaluates ``text``, what would make it slow or huge.

    The checks read the tokens pint itself reads: ``text`` after pint's
    ``string_preprocessor`` (which drops commas, so ``m**6,0,0`` is ``m**600``, and turns
    ``^`` and superscripts into ``**``), split by pint's tokenizer. Every number is a
    plain decimal :func:`in_range` (``1e999999`` would be a million-digit Fraction); every
    exponent is a number (``2``, ``-1``, ``(1/2)``) of at most :data:`MAX_POWER`; no
    power is raised to a power (``9**9**9``, ``(2**6)**6``); no name ends in two digits
    (pint reads ``m99999`` as a power); only ``+ - * / ** ( )`` operate.

    Raises:
        ValueError: saying which rule ``text`` breaks.
    """
    from pint.pint_eval import tokenizer
    from pint.util import string_preprocessor

    prepared = string_preprocessor(text.strip()).replace("[", "__obra__").replace("]", "__cbra__")
    try:
        tokens = [(tokenize.tok_name[t.type], t.string) for t in tokenizer(prepared)]
    except tokenize.TokenError:
        raise ValueError("a parenthesis is not closed") from None
    except Exception:  # SyntaxError, IndentationError, ...
        raise ValueError("cannot be split into numbers, names and operators") from None
    tokens = [(kind, string) for kind, string in tokens if kind not in _SKIPPED]
    groups: list[bool] = []  # per open parenthesis: whether a power lies inside
    closed_power = False  # the group just closed held a power
    index = 0
    while index < len(tokens):
        kind, string = tokens[index]
        if kind == "NUMBER":
            _check_number(string)
        elif kind == "NAME":
            if re.search(r"[^\W\d]\d{2,}", string.replace("__cbra__", "")):
                raise ValueError("digits after a unit name (write m**3, not m3)")
        elif kind != "OP" or string not in _OPERATORS:
            raise ValueError(f"{string!r} is not a number, a unit or + - * / ** ( )")
        elif string == "(":
            groups.append(False)
        elif string == ")" and groups:
            closed_power = groups.pop()
            if groups:
                groups[-1] = groups[-1] or closed_power
        elif string == "**":
            previous = tokens[index - 1][1] if index else ""
            if previous == ")" and closed_power:
                raise ValueError("a power of a power")
            index = _exponent(tokens, index + 1)
            if groups:
                groups[-1] = True
            if index < len(tokens) and tokens[index][1] == "**":
                raise ValueError("a power of a power")
            continue
        index += 1


def _exponent(tokens: list[tuple[str, str]], index: int) -> int:
    """Check the exponent starting at ``tokens[index]``; return the index after it.

    Raises:
        ValueError: not a number (``2``, ``-1``, ``(1/2)``, ``(-3)``), or above
            :data:`MAX_POWER`.
    """
    texts = [string for _, string in tokens[index:index + 6]] + [""] * 6
    parens = texts[0] == "("
    at = int(parens)
    sign = texts[at] if texts[at] in ("-", "+") else ""
    at += bool(sign)
    numbers = [texts[at]]
    at += 1
    if parens and texts[at] == "/":
        numbers += ["/", texts[at + 1]]
        at += 2
    if not all(_NUMBER.fullmatch(n) for n in numbers[::2]) or (parens and texts[at] != ")"):
        shown = "".join(texts[:3])
        raise ValueError(f"the exponent {shown!r} is not a number (write m**2, s**-1 or "
                         "m**(1/2))" if shown else "an exponent is missing")
    _check_power(sign, numbers)
    return index + at + int(parens)


def _check_power(sign: str, numbers: list[str]) -> None:
    """Raises ValueError: the exponent ``sign numbers`` is above :data:`MAX_POWER`."""
    for number in numbers[::2]:
        _check_number(number)
    value = Fraction(Decimal(numbers[0]))
    if len(numbers) == 3:
        denominator = Fraction(Decimal(numbers[2]))
        if not denominator:
            raise ValueError("an exponent divides by zero")
        value /= denominator
    if abs(value) > MAX_POWER:
        raise ValueError(f"exponent {sign}{''.join(numbers)} is above {MAX_POWER}")


def _check_number(text: str) -> None:
    """Raises ValueError: ``text`` is not a plain decimal, or not :func:`in_range`."""
    if not _NUMBER.fullmatch(text):
        raise ValueError(f"{text!r} is not a plain decimal number")
    if not in_range(Decimal(text)):
        shown = text if len(text) <= 20 else text[:17] + "..."
        raise ValueError(f"the number {shown} is out of range: at most {MAX_DIGITS} "
                         f"significant digits, magnitude 1e-{MAX_EXPONENT} to "
                         f"1e{MAX_EXPONENT}")
