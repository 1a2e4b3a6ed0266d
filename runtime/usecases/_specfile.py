"""Spec files: a definition spec or an operator registration, as TOML or JSON."""

from __future__ import annotations

import json
import tomllib
from datetime import timedelta
from pathlib import Path
from typing import Any

import pydantic

from watchkeeper.triggers import Binding, Spec, SpecError, parse_spec

from ..engine._registry import ScheduleDef

__all__ = ["load_data", "load_registrations", "load_spec"]


def load_data(path: Path) -> dict[str, Any]:
    """Read a ``.toml`` or ``.json`` file into plain data.

    Raises:
        SpecError: unreadable file or a syntax error (field ``file``).
    """
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecError("file", f"cannot read {path}: {exc.strerror}.", "check the path.") from exc
    try:
        data = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
    except (ValueError, tomllib.TOMLDecodeError) as exc:
        raise SpecError("file", f"{path} is not valid {'JSON' if path.suffix == '.json' else 'TOML'}: "
                        f"{exc}.", "fix the syntax (the position is in the message).") from exc
    if not isinstance(data, dict):
        raise SpecError("file", f"{path} does not hold a table/object.", "write key = value pairs.")
    return data


def load_spec(path: Path, *, min_interval: timedelta) -> Spec:
    """A definition spec from ``path``.

    Raises:
        SpecError: naming the field and the fix.
    """
    data = load_data(path)
    if "definitions" in data and "version" not in data:
        raise SpecError("file", f"{path} holds [[definitions]] tables (a replay or "
                        "registration file), not one spec.",
                        "propose a single spec; give this file to 'watchkeeper replay "
                        "--definitions' or 'watchkeeper register'.")
    return parse_spec(data, min_interval=min_interval)


_REGISTRATION_KEYS = {
    "id", "cron", "zone", "every", "anchor", "dst_gap", "jitter", "overrun", "late_policy",
    "late_grace", "instructions", "bindings",
}


def load_registrations(path: Path, *, min_interval: timedelta) -> list[ScheduleDef]:
    """Operator definitions from a file with one ``[[definitions]]`` table each.

    Only the ``bindings`` terminal can be declared in a file; a ``run`` callable is
    registered from Python.

    Raises:
        SpecError: naming the definition and the field.
    """
    data = load_data(path)
    items = data.get("definitions")
    if not isinstance(items, list) or not items:
        raise SpecError("definitions", "no [[definitions]] table found.",
                        "add one [[definitions]] table per operator definition.")
    out = []
    for index, item in enumerate(items):
        unknown = set(item) - _REGISTRATION_KEYS
        if unknown:
            raise SpecError(f"definitions.{index}.{sorted(unknown)[0]}", "is not a registration field.",
                            f"use only {sorted(_REGISTRATION_KEYS)}.")
        fields = dict(item)
        for key in ("every", "jitter", "late_grace"):
            if key in fields and isinstance(fields[key], int | float):
                fields[key] = timedelta(seconds=fields[key])
        try:
            fields["bindings"] = [Binding.model_validate(b) for b in fields.get("bindings", [])]
        except pydantic.ValidationError as exc:
            first = exc.errors()[0]
            raise SpecError(f"definitions.{index}.bindings.{'.'.join(map(str, first['loc']))}",
                            f"{first['msg']}.", "see the binding fields in the README.") from exc
        out.append(ScheduleDef(min_interval=min_interval, **fields))
    return out
