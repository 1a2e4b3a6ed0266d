"""Spec files: a definition spec or an operator registration, as TOML or JSON."""

from __future__ import annotations

import json
import tomllib
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pydantic

from watchkeeper.triggers import Binding, Spec, SpecError, SpecProblems, parse_spec

if TYPE_CHECKING:
    from ..engine._registry import ScheduleDef

__all__ = ["load_data", "load_registrations", "load_spec", "load_spec_data"]


def load_data(path: Path) -> dict[str, Any]:
    """Read a ``.toml`` or ``.json`` file (UTF-8) into plain data.

    Raises:
        SpecError: field ``file``: unreadable, not UTF-8 text (naming the first bad
            byte's offset, as a series file does), a syntax error, or not a table.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecError("file", f"cannot read {path}: {exc.strerror}.", "check the path.") from exc
    except UnicodeDecodeError as exc:
        raise SpecError("file", f"{path}: not UTF-8 text (byte {exc.start}).",
                        "save it as UTF-8.") from exc
    kind = "JSON" if path.suffix == ".json" else "TOML"
    try:
        data = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
    except (ValueError, tomllib.TOMLDecodeError) as exc:
        raise SpecError("file", f"{path} is not valid {kind}: {exc}.",
                        "fix the syntax (the position is in the message).") from exc
    if not isinstance(data, dict):
        raise SpecError("file", f"{path} does not hold a table/object.", "write key = value pairs.")
    return data


def load_spec(path: Path, *, min_interval: timedelta) -> Spec:
    """A definition spec from ``path``.

    Raises:
        SpecError: listing every problem, each naming the field and the fix.
    """
    return parse_spec(load_spec_data(path), min_interval=min_interval)


def load_spec_data(path: Path) -> dict[str, Any]:
    """The plain data of one spec in ``path``, not yet parsed (:func:`load_data`).

    Raises:
        SpecError: as :func:`load_data`, or the file holds ``[[definitions]]``.
    """
    data = load_data(path)
    if "definitions" in data and "version" not in data:
        raise SpecError("file", f"{path} holds [[definitions]] tables (a replay or "
                        "registration file), not one spec.",
                        "propose a single spec; give a file of calendar registrations "
                        "to 'watchkeeper register', one of condition definitions to "
                        "'watchkeeper replay --definitions'.")
    return data


_REGISTRATION_KEYS = {
    "id", "cron", "zone", "every", "anchor", "dst_gap", "jitter", "overrun", "late_policy",
    "late_grace", "instructions", "bindings",
}


def load_registrations(path: Path, *, min_interval: timedelta) -> list[ScheduleDef]:
    """Operator definitions from a file with one ``[[definitions]]`` table each.

    Only the ``bindings`` terminal can be declared in a file; a ``run`` callable is
    registered from Python.

    Raises:
        SpecError: listing every problem of every definition, each field named
            ``definitions.<index>.<field>`` (e.g. ``definitions.1.zone``).
    """
    data = load_data(path)
    items = data.get("definitions")
    if not isinstance(items, list) or not items:
        raise SpecError("definitions", "no [[definitions]] table found.",
                        "add one [[definitions]] table per operator definition.")
    found = SpecProblems()
    out = []
    for index, item in enumerate(items):
        where = f"definitions.{index}"
        if not isinstance(item, Mapping):
            found.add(where, "is not a table.", "write [[definitions]] with key = value pairs.")
            continue
        definition = _registration(item, where, found, min_interval)
        if definition is not None:
            out.append(definition)
    found.raise_if_any()
    return out


def _registration(item: Mapping[str, Any], where: str, found: SpecProblems,
                  min_interval: timedelta) -> ScheduleDef | None:
    """One ``[[definitions]]`` table as a definition; its problems go to ``found``."""
    from ..engine._registry import ScheduleDef  # here: the engine brings the database driver

    before = len(found.problems)
    for key in sorted(set(item) - _REGISTRATION_KEYS):
        found.add(f"{where}.{key}", "is not a registration field.",
                  f"use only {sorted(_REGISTRATION_KEYS)}.")
    fields = {k: v for k, v in item.items() if k in _REGISTRATION_KEYS}
    for key in ("every", "jitter", "late_grace"):
        if key in fields and isinstance(fields[key], int | float) \
                and not isinstance(fields[key], bool):
            fields[key] = timedelta(seconds=fields[key])
    fields["bindings"] = _bindings(fields.get("bindings", []), f"{where}.bindings", found)
    with found.check(where):
        definition = ScheduleDef(min_interval=min_interval, **fields)
        return definition if len(found.problems) == before else None
    return None


def _bindings(raw: Any, where: str, found: SpecProblems) -> list[Binding]:
    """The valid bindings of ``raw``; every invalid field goes to ``found``."""
    if not isinstance(raw, list):
        found.add(where, "is not a list of tables.", "write [[definitions.bindings]] tables.")
        return []
    bindings = []
    for index, item in enumerate(raw):
        try:
            bindings.append(Binding.model_validate(item))
        except pydantic.ValidationError as exc:
            for error in exc.errors():
                loc = ".".join(str(part) for part in (index, *error["loc"]))
                found.add(f"{where}.{loc}", f"{error['msg']}.",
                          "see the binding fields in the README.")
    return bindings
