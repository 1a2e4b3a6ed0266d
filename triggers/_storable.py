"""Values PostgreSQL cannot store, found before they reach it.

A spec (and a binding) is stored as text and jsonb. PostgreSQL refuses, at insert time:

* a NUL character in text or jsonb (PostgreSQL docs "Character Types": "the character
  with code zero cannot be stored"; jsonb: "unsupported Unicode escape sequence");
* a string that is not UTF-8: Python holds a lone surrogate (``"\\ud800"`` from a JSON
  escape, or an undecodable command-line byte under ``surrogateescape``), which has no
  UTF-8 encoding at all;
* NaN and Infinity in jsonb (JSON has no such numbers, RFC 8259 section 6); a JSON
  ``1e400`` is read as Infinity;
* an integer beyond what the JSON encoder writes (4300 digits, Python's
  ``sys.int_info.default_max_str_digits``): refused above :data:`MAX_INT_DIGITS`.

:func:`storable_problems` walks plain data (mappings, lists, strings, numbers) and names
the field of each such value; a mapping key that is itself unstorable is named by the
path to its mapping and the key's ``repr`` (``agent.params.'a\\x00b'``), so the field
can be printed. Pure: no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ._errors import SpecError, SpecProblem

__all__ = ["MAX_NESTING", "MAX_INT_DIGITS", "field_part", "refuse_unstorable",
           "storable_problems"]

MAX_NESTING = 32
"""Levels of nesting a value may have."""
MAX_INT_DIGITS = 1000
"""Decimal digits an integer may have (JSON numbers, jsonb numeric)."""
_INT_LIMIT = 10 ** MAX_INT_DIGITS


def refuse_unstorable(value: Any, where: str) -> None:
    """Refuse what PostgreSQL cannot store anywhere in ``value`` (see the module docstring).

    Raises:
        SpecError: naming every such field at once (or the one nested too deep).
    """
    problems = storable_problems(value, where)
    if problems:
        raise SpecError.of(problems)


def storable_problems(value: Any, where: str, depth: int = 0) -> list[SpecProblem]:
    """The problems of every unstorable value in ``value``, fields below ``where``
    (dotted; ``""`` for the root, named ``spec``), in the order met.

    Raises:
        SpecError: nested more than :data:`MAX_NESTING` levels (checked first: nothing
            else can be read).
    """
    if depth > MAX_NESTING:
        raise SpecError(where or "spec", f"is nested more than {MAX_NESTING} levels deep.",
                        "flatten it.")
    field = where or "spec"
    if isinstance(value, str):
        return _text_problems(value, field, "")
    if isinstance(value, float):
        return [] if math.isfinite(value) else [_not_finite(value, field)]
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= _INT_LIMIT:
        digits = int(value.bit_length() * math.log10(2)) + 1
        return [SpecProblem(field, f"is an integer of about {digits} digits, more than "
                            f"{MAX_INT_DIGITS}.", "write a number this long as a string.")]
    found: list[SpecProblem] = []
    if isinstance(value, Mapping):
        for key, item in value.items():
            path = f"{where}.{field_part(key)}".lstrip(".")
            if isinstance(key, str):
                found.extend(_text_problems(key, path, "the key "))
            found.extend(storable_problems(item, path, depth + 1))
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            found.extend(storable_problems(item, f"{where}.{index}".lstrip("."), depth + 1))
    return list(dict.fromkeys(found))


def field_part(key: Any) -> str:
    """``key`` as one part of a field path: as written when it is printable text, else
    its ``repr`` (``'a\\x00b'``, ``'\\ud800'``, ``''``), so a field can always be printed."""
    if isinstance(key, str) and (not key or not key.isprintable()):
        return repr(key)
    return str(key)


def _text_problems(text: str, field: str, what: str) -> list[SpecProblem]:
    """A NUL and a lone surrogate in ``text`` (``what`` is ``"the key "`` for a key)."""
    found = []
    if "\x00" in text:
        found.append(SpecProblem(field, f"{what}contains a NUL character (PostgreSQL text "
                                 "cannot hold one).", "remove it."))
    try:
        text.encode("utf-8")  # only a surrogate code point has no UTF-8 encoding
    except UnicodeEncodeError as exc:
        surrogate = exc.start
        found.append(SpecProblem(
            field, f"{what}contains a lone surrogate ({text[surrogate]!r} at character "
            f"{surrogate}), which cannot be encoded as UTF-8.",
            "remove it: it is half of a JSON surrogate pair (a character beyond U+FFFF is "
            "escaped as a whole pair, e.g. '\\ud83d\\ude00') or a byte that was not UTF-8."))
    return found


def _not_finite(value: float, field: str) -> SpecProblem:
    shown = "NaN" if math.isnan(value) else ("-Infinity" if value < 0 else "Infinity")
    return SpecProblem(field, f"is {shown}, not a finite number (JSON and PostgreSQL's jsonb "
                       "hold no NaN or Infinity; a number beyond about 1.8e308, such as "
                       "1e400, is read as Infinity).",
                       "write a finite number, or the value as a string if the agent "
                       "expects one.")
