"""Values PostgreSQL cannot store are spec problems, found at parse time and named by
their exact field: NaN and Infinity (jsonb), lone surrogates (not UTF-8), NUL (text),
integers of over 1000 digits; bad mapping keys are named by the key's repr; instants
beyond UTC's range are named by their field, not 'spec'."""

from __future__ import annotations

import copy
import json
import math
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_cli import cli

from watchkeeper.runtime.engine._clock import FakeClock
from watchkeeper.runtime.store._db import Database
from watchkeeper.runtime.usecases import add_user
from watchkeeper.triggers import BindingSetError, SpecError, parse_spec, validate_bindings
from watchkeeper.triggers._storable import MAX_NESTING, field_part, storable_problems

BASE: dict[str, Any] = {"version": 1, "trigger": {"type": "cron", "expr": "0 9 * * 1",
                                                  "zone": "Europe/Paris"}}
FULL: dict[str, Any] = {
    **BASE, "title": "t", "notes": "n", "instructions": "i",
    "agent": {"name": "digest", "params": {"threshold": 5, "tags": ["a", {"k": "v"}]}},
    "sources": ["s"], "audiences": ["ops"],
    "delivery": [{"channel": "file", "destination": "out.jsonl"}],
}
STRING_FIELDS = [("title",), ("notes",), ("instructions",), ("agent", "name"),
                 ("agent", "params", "tags", 0), ("agent", "params", "tags", 1, "k"),
                 ("sources", 0), ("audiences", 0), ("delivery", 0, "destination"),
                 ("trigger", "expr"), ("trigger", "zone")]
BAD_TEXT = {"\x00": "NUL", chr(0xD800): "lone surrogate", chr(0xDCFF): "lone surrogate"}
"""chr(): ruff reads two surrogate literals as one repeated key."""


def with_value(path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    """FULL with the value at ``path`` replaced."""
    data = copy.deepcopy(FULL)
    place = data
    for part in path[:-1]:
        place = place[part]
    place[path[-1]] = value
    return data


def dotted(path: tuple[Any, ...]) -> str:
    return ".".join(str(p) for p in path)


def problems(data: dict[str, Any]) -> list[tuple[str, str]]:
    """(field, problem) of every problem parse_spec reports for ``data``."""
    with pytest.raises(SpecError) as raised:
        parse_spec(data)
    return [(p.field, p.problem) for p in raised.value.problems]


def test_the_full_spec_is_valid() -> None:
    """The spec the other tests spoil parses (so every refusal below is the spoiled value's)."""
    assert parse_spec(FULL).agent.params["tags"] == ["a", {"k": "v"}]


@pytest.mark.parametrize("path", STRING_FIELDS, ids=dotted)
@pytest.mark.parametrize("bad", sorted(BAD_TEXT), ids=ascii)
def test_a_bad_character_in_any_string_is_named_by_its_field(path: tuple[Any, ...],
                                                             bad: str) -> None:
    """A NUL or a lone surrogate in any string of a spec is one problem at exactly that
    field, whatever else the field's own check would say about it."""
    found = problems(with_value(path, f"ok{bad}"))
    assert [field for field, _ in found] == [dotted(path)]
    assert BAD_TEXT[bad] in found[0][1]


@pytest.mark.parametrize(("value", "shown"), [
    (math.nan, "NaN"), (math.inf, "Infinity"), (-math.inf, "-Infinity"),
    (float("1e400"), "Infinity")])
def test_a_non_finite_param_is_named_by_its_path(value: float, shown: str) -> None:
    """agent.params.threshold = NaN, Infinity or 1e400 (read as Infinity) is refused at
    parse time, naming agent.params.threshold (jsonb holds no NaN or Infinity)."""
    found = problems(with_value(("agent", "params", "threshold"), value))
    assert found == [("agent.params.threshold", found[0][1])]
    assert found[0][1].startswith(f"is {shown}, not a finite number")


def test_every_unstorable_value_is_reported_at_once() -> None:
    """NaN deep in params, a NUL key, a surrogate title and an overlong integer, beside a
    bad zone: five problems in one error, each at its own field."""
    data = with_value(("agent", "params"), {"deep": [1.5, {"x": math.nan}], "a\x00b": 1,
                                            "big": 10 ** 1000})
    data["title"] = "caf\udce9"
    data["trigger"]["zone"] = "Mars/Olympus"
    assert [field for field, _ in problems(data)] == [
        "trigger.zone", "agent.params.deep.1.x", "agent.params.'a\\x00b'", "agent.params.big",
        "title"]


@pytest.mark.parametrize(("key", "field"), [
    ("a\x00b", "agent.params.'a\\x00b'"), ("\x00", "agent.params.'\\x00'"),
    ("\ud800", "agent.params.'\\ud800'")])
def test_a_bad_key_is_named_by_its_parent_and_its_repr(key: str, field: str) -> None:
    """A key holding a NUL or a surrogate is named parent + repr(key), never '' or the
    raw character (which would print as nothing, or not at all)."""
    found = problems(with_value(("agent", "params"), {key: 1}))
    assert found == [(field, found[0][1])]
    assert found[0][1].startswith("the key contains")
    assert field.encode("ascii")  # printable anywhere


def test_a_bad_top_level_key_is_not_reported_twice() -> None:
    """A top-level key with a NUL is one problem (the key), not also 'not a field' under
    an unprintable name."""
    assert [field for field, _ in problems({**BASE, "ti\x00tle": "x"})] == ["'ti\\x00tle'"]


@pytest.mark.parametrize(("field", "value"), [
    ("ends.until", "9999-12-31T23:59:59-01:00"), ("ends.until", "0001-01-01T00:00:00+01:00"),
    ("trigger.anchor", "0001-01-01T00:00:00+23:59"),
    ("trigger.at", "9999-12-31T23:59:59-01:00")])
def test_an_instant_beyond_utc_is_named_by_its_field(field: str, value: str) -> None:
    """An instant with no UTC equivalent (9999-12-31T23:59:59-01:00) is out of range at
    its own field, shown as written, not 'spec: cannot be read (OverflowError)'."""
    trigger = {"type": "at", "at": value} if field == "trigger.at" else (
        {"type": "interval", "every": 3600, "anchor": value} if field == "trigger.anchor"
        else BASE["trigger"])
    data = {**BASE, "trigger": trigger}
    if field == "ends.until":
        data["ends"] = {"until": value}
    assert problems(data) == [(field, f"{value} is outside 1970-2200.")]


JSON_LEAF = st.one_of(st.none(), st.booleans(), st.integers(-10**30, 10**30),
                      st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=8))
JSON = st.recursive(JSON_LEAF, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=6), inner, max_size=4)),
    max_leaves=20)


def storable(value: Any) -> bool:
    """Whether PostgreSQL would take ``value`` as jsonb: the encoder writes it without
    NaN and it encodes as UTF-8 without NUL (the oracle, not the code under test)."""
    try:
        text = json.dumps(value, allow_nan=False, ensure_ascii=False)
        text.encode("utf-8")
    except (ValueError, UnicodeEncodeError):
        return False
    return _ESCAPED_NUL.search(text) is None


_ESCAPED_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")
"""json.dumps writes NUL as \\u0000; an escaped backslash before 'u0000' is not one."""


@given(st.dictionaries(st.text(max_size=6), JSON, max_size=4))
def test_params_are_accepted_exactly_when_jsonb_could_hold_them(params: dict[str, Any]) -> None:
    """Property: agent.params parse exactly when json.dumps(allow_nan=False) writes them
    as UTF-8 without NUL; every problem's field starts with agent.params."""
    data = {**BASE, "agent": {"params": params}}
    if storable(params):
        assert parse_spec(data).agent.params == params
    else:
        with pytest.raises(SpecError) as raised:
            parse_spec(data)
        assert all(p.field.startswith("agent.params") for p in raised.value.problems)


@given(st.text(max_size=6))
def test_a_field_part_is_printable_and_distinct(key: str) -> None:
    """Property: a key's field part is the key itself when printable, else its repr; it
    always encodes as UTF-8."""
    part = field_part(key)
    assert part == (key if key and key.isprintable() else repr(key))
    part.encode("utf-8")


def test_nesting_beyond_the_limit_is_one_problem() -> None:
    """Params nested deeper than 32 levels are refused naming the deepest path read."""
    value: Any = 1
    for _ in range(MAX_NESTING + 1):
        value = [value]
    with pytest.raises(SpecError, match="nested more than 32 levels"):
        storable_problems({"agent": {"params": {"x": value}}}, "")


def test_a_binding_with_an_unstorable_message_or_param_is_refused() -> None:
    """A binding's message with a surrogate and a NaN param are faults of the binding set,
    each naming the binding and the field."""
    with pytest.raises(BindingSetError) as raised:
        validate_bindings([{"tenant_id": "acme", "binding_id": "b1", "owner_user_id": "alice",
                            "message": "hi\ud800", "params": {"x": math.nan}}])
    assert [m.split(" ", 2)[:2] for m in raised.value.messages] == [
        ["binding", "0.message"], ["binding", "0.params.x"]]


@pytest.mark.anyio
async def test_propose_with_a_nan_param_exits_2_naming_the_field(db: Database, db_dsn: str,
                                                                 tmp_path: Path) -> None:
    """A JSON spec with NaN in agent.params and a surrogate title: propose exits 2 (not 1
    from the database) naming both fields, and stores nothing."""
    await cli("users", "add", "acme", "alice", dsn=db_dsn, home=tmp_path)
    path = tmp_path / "spec.json"
    path.write_text('{"version": 1, "title": "\\ud800", "trigger": {"type": "cron", '
                    '"expr": "0 9 * * 1", "zone": "UTC"}, "agent": {"params": '
                    '{"threshold": NaN, "limit": 1e400}}}', encoding="utf-8")
    code, out, err = await cli("propose", str(path), "--tenant", "acme", "--id", "h",
                               "--owner", "alice", dsn=db_dsn, home=tmp_path, check=False)
    assert (code, out) == (2, "")
    for field in ("agent.params.threshold: is NaN", "agent.params.limit: is Infinity",
                  "title: contains a lone surrogate"):
        assert field in " ".join(err.split()), err
    assert await db.pool.fetchval("SELECT count(*) FROM definitions") == 0


@pytest.mark.anyio
@pytest.mark.parametrize(("name", "words"), [("A\x00", "NUL"), ("caf\udce9", "lone surrogate")])
async def test_a_display_name_postgresql_cannot_store_is_refused(db: Database, clock: FakeClock,
                                                                name: str, words: str) -> None:
    """users add --name with a NUL or an undecodable byte (a surrogate escape) is a
    problem of display_name, not a database error; nobody is added."""
    with pytest.raises(SpecError) as raised:
        await add_user(db, clock, "acme", "alice", display_name=name)
    assert raised.value.field == "display_name" and words in raised.value.problem
    assert await db.pool.fetchval("SELECT count(*) FROM users") == 0
