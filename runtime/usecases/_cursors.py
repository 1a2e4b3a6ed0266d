"""Opaque keyset cursors, the same in every door: a position in a list (a page's last
key) as base64url JSON, instants tagged so they come back as instants. Opaque to
clients; a cursor this API did not make is refused naming ``cursor``."""

from __future__ import annotations

import base64
import binascii
import json
from datetime import datetime
from typing import Any

from watchkeeper.triggers import SpecError

__all__ = ["decode_cursor", "encode_cursor"]


def encode_cursor(position: tuple[Any, ...] | None) -> str | None:
    """An opaque cursor for a keyset position (``None`` on the last page)."""
    if position is None:
        return None
    plain = [{"t": v.isoformat()} if isinstance(v, datetime) else v for v in position]
    return base64.urlsafe_b64encode(json.dumps(plain).encode()).decode().rstrip("=")


def decode_cursor(cursor: str | None, size: int) -> tuple[Any, ...] | None:
    """The keyset position of ``size`` values an :func:`encode_cursor` cursor stands for
    (``None`` for no cursor).

    Raises:
        SpecError: field ``cursor``, when it was not made by this list.
    """
    if cursor is None:
        return None
    try:
        plain = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        if not isinstance(plain, list) or len(plain) != size:
            raise ValueError(cursor)
        values = tuple(datetime.fromisoformat(v["t"]) if isinstance(v, dict) else v
                       for v in plain)
        if not all(isinstance(v, str | int | datetime) for v in values):
            raise ValueError(cursor)
    except (ValueError, TypeError, KeyError, binascii.Error, UnicodeDecodeError) as exc:
        raise SpecError("cursor", "is not a cursor of this list.",
                        "pass the next_cursor of the previous page unchanged.") from exc
    return values
