"""Opaque keyset cursors, the same in every door: a position in a list (a page's last
key) as base64url JSON, instants tagged so they come back as aware instants. Opaque to
clients; a cursor this product did not make for that list is refused naming
``cursor``."""

from __future__ import annotations

import base64
import binascii
import json
from datetime import datetime
from typing import Any

from watchkeeper.triggers import SpecError

from ._input import check_input, check_instants

__all__ = ["DEFINITIONS_CURSOR", "HISTORY_CURSOR", "POLLS_CURSOR", "decode_cursor",
           "encode_cursor"]

HISTORY_CURSOR: tuple[type, ...] = (datetime, str, str, str, str)
"""The shape of a history position: (scheduled_for, tenant, binding, slot, kind)."""
DEFINITIONS_CURSOR: tuple[type, ...] = (str, str)
"""The shape of a definitions-list position: (tenant_id, definition_id)."""
POLLS_CURSOR: tuple[type, ...] = (datetime, str, str, str)
"""The shape of a poll timeline position: (scheduled_for, definition, binding, slot)."""

_FIX = "pass the next_cursor of the previous page unchanged."


def encode_cursor(position: tuple[Any, ...] | None) -> str | None:
    """An opaque cursor for a keyset position (``None`` on the last page)."""
    if position is None:
        return None
    plain = [{"t": v.isoformat()} if isinstance(v, datetime) else v for v in position]
    return base64.urlsafe_b64encode(json.dumps(plain).encode()).decode().rstrip("=")


def decode_cursor(cursor: str | None, shape: tuple[type, ...], *,
                  fix: str = _FIX) -> tuple[Any, ...] | None:
    """The keyset position an :func:`encode_cursor` cursor stands for, one value of each
    type in ``shape`` (one of the ``*_CURSOR`` shapes; a ``datetime`` comes back aware),
    or ``None`` for no cursor (``None`` or empty).

    Raises:
        SpecError: field ``cursor`` (with ``fix`` as the fix), when it was not made for
            a list of this shape.
    """
    if not cursor:
        return None
    try:
        plain = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        if not isinstance(plain, list) or len(plain) != len(shape):
            raise ValueError(cursor)
        values = tuple(datetime.fromisoformat(v["t"]) if isinstance(v, dict) else v
                       for v in plain)
        if not all(type(v) is kind for v, kind in zip(values, shape, strict=True)):
            raise ValueError(cursor)
        if any(isinstance(v, datetime) and v.tzinfo is None for v in values):
            raise ValueError(cursor)
        check_input({"cursor": list(values)})
        check_instants({f"cursor.{i}": v for i, v in enumerate(values)
                        if isinstance(v, datetime)})
    except (ValueError, TypeError, KeyError, binascii.Error, UnicodeDecodeError,
            SpecError) as exc:
        raise SpecError("cursor", "is not a cursor of this list.", fix) from exc
    return values
