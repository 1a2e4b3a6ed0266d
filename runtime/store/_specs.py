"""Stored specs: parsed once per ``spec_hash`` and shared.

Thousands of definitions usually share a handful of specs; the tick fetches only
hashes and parses each distinct spec once per process.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from watchkeeper.triggers import Spec, parse_spec, user_payload

from ._db import JsonText

__all__ = ["cached_spec", "compiled_columns", "spec_from_json", "spec_from_row"]

_CACHE: dict[str, Spec] = {}
_CACHE_LIMIT = 65_536


def spec_from_json(spec_hash: str, data: Mapping[str, Any] | str) -> Spec:
    """The spec stored under ``spec_hash``, parsed at most once per process.

    A stored spec was checked against the minimum interval and the zone rule when it
    was proposed; a later change of that setting or rule must not make it unreadable,
    so neither applies here (``stored=True``).
    """
    spec = _CACHE.get(spec_hash)
    if spec is None:
        plain = json.loads(data) if isinstance(data, str) else dict(data)
        spec = parse_spec(plain, min_interval=timedelta(0), stored=True)
        if len(_CACHE) >= _CACHE_LIMIT:
            _CACHE.clear()
        _CACHE[spec_hash] = spec
    return spec


def cached_spec(spec_hash: str) -> Spec | None:
    """The spec stored under ``spec_hash`` if this process has parsed it already (its
    effective part: the title and notes are those of the first row seen), else ``None``."""
    return _CACHE.get(spec_hash)


def spec_from_row(row: Mapping[str, Any] | None) -> Spec:
    """The spec of a ``definition_revisions`` row (or any row with spec and spec_hash).

    The cache is keyed by ``spec_hash``, which covers the effective part only: the
    descriptive part (title, notes) always comes from the row itself, so two tenants
    with the same effective spec never see each other's titles.
    """
    assert row is not None, "revision row missing"
    data = row["spec"]
    if isinstance(data, str):
        data = json.loads(data)
    base = spec_from_json(row["spec_hash"], data)
    title, notes = data.get("title", ""), data.get("notes", "")
    if base.title == title and base.notes == notes:
        return base
    return base.model_copy(update={"title": title, "notes": notes})


def compiled_columns(spec: Spec) -> tuple[JsonText, JsonText]:
    """A new revision's ``compiled`` and ``payload`` columns (``revision_insert`` $13, $14):
    the spec compiled for the tick, and what its tasks carry (:mod:`triggers._compiled`)."""
    return (JsonText(json.dumps(spec.compiled.to_json())), JsonText(json.dumps(user_payload(spec))))
