"""The checks every door applies to what it accepts, in one place: text PostgreSQL can
store, identifiers, and instants in the range watchkeeper computes with.

A door hands over each value it read (a path or query parameter, a header, a body, a
tool argument) under the name the client wrote it with; a refusal is a
:class:`~watchkeeper.triggers.SpecError` naming that field (422 in the API, an error
result in the MCP tools, exit 2 in the CLI).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime
from typing import Annotated, Any

from pydantic import AwareDatetime, BeforeValidator

from watchkeeper.triggers import (
    INSTANT_RANGE,
    FixableValueError,
    SpecError,
    check_identifier,
    check_instant,
    storable_problems,
)

__all__ = ["INSTANT_RANGE", "Instant", "check_identifiers", "check_input", "check_instants"]

_RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d{1,9})?([Zz]|[+-]\d{2}:\d{2})")


def _date_time_text(value: Any) -> Any:
    """Only what the schema's ``format: date-time`` says (RFC 3339, with an offset): not
    a number, which pydantic would otherwise read as Unix seconds."""
    if isinstance(value, datetime):
        return value
    if not isinstance(value, str) or not _RFC3339.fullmatch(value):
        raise FixableValueError("is not an RFC 3339 date-time with an offset (a number "
                                "of seconds is not one).",
                                "write RFC 3339 with an offset, such as 2026-03-29T01:00:00Z "
                                "or 2026-03-29T03:00:00+02:00.")
    return value


Instant = Annotated[AwareDatetime, BeforeValidator(_date_time_text)]
"""An instant as a door accepts it: RFC 3339 text with an offset (the JSON Schema's
``format: date-time``), never a number; :func:`check_instants` then bounds it."""


def check_input(values: Mapping[str, Any]) -> None:
    """Refuse a NUL character or a lone surrogate anywhere in ``values`` (nested
    mappings and lists too; a key is checked as well), each named by its field: the
    name in ``values``, then the path below it (``spec.agent.params.x``).

    Raises:
        SpecError: every such field at once.
    """
    found = [problem for name, value in values.items()
             for problem in storable_problems(value, name)]
    if found:
        raise SpecError.of(found)


def check_identifiers(values: Mapping[str, str | None]) -> None:
    """Each value that is not ``None`` follows the identifier rule (1-128 letters,
    digits, ``. _ : @ -``, starting with a letter or digit).

    Raises:
        SpecError: naming the first field that does not.
    """
    for field, value in values.items():
        if value is not None:
            check_identifier(value, field)


def check_instants(values: Mapping[str, datetime | None]) -> None:
    """Each value that is not ``None`` is an aware instant within
    :data:`INSTANT_RANGE` (1970-01-01T00:00Z to 2200-01-01T00:00Z, the range of a spec's
    instants), so nothing computed from it leaves the dates Python and PostgreSQL share.

    Raises:
        SpecError: naming the first field that is not.
    """
    for field, value in values.items():
        if value is not None:
            check_instant(value, field)
