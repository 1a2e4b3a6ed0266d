"""Identifier-like values are matched whole: a trailing newline (which ``$`` lets
through), an embedded one, white space or a control character is refused everywhere an
id, a name or a schema is checked, and what is accepted comes back unchanged."""

from __future__ import annotations

import string
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_cli import cli

from watchkeeper.runtime import ConfigError, load_settings
from watchkeeper.runtime.engine._clock import FakeClock
from watchkeeper.runtime.store._db import Database, check_schema
from watchkeeper.runtime.usecases import add_user, create_key, propose
from watchkeeper.triggers import (
    BindingSetError,
    SpecError,
    check_identifier,
    parse_spec,
    validate_bindings,
)
from watchkeeper.triggers._spec import check_endpoint_name

ALNUM = frozenset(string.ascii_letters + string.digits)
IDENT_CHARS = ALNUM | frozenset("._:@-")
ENDPOINT_CHARS = ALNUM | frozenset("._-")
BAD_CHARS = "\n\r\t\v\f \x00\x1f\x7f\x85\u2028\u00e9\uff11"
"""Newlines (incl. NEL and LINE SEPARATOR), white space, controls, a letter and a digit
outside ASCII."""
SPEC = {"version": 1, "trigger": {"type": "cron", "expr": "0 9 * * 1", "zone": "UTC"}}


def is_identifier(value: str, allowed: frozenset[str], longest: int) -> bool:
    """The rule, written without a regular expression: 1..longest allowed characters, the
    first a letter or digit."""
    return 1 <= len(value) <= longest and value[0] in ALNUM and set(value) <= allowed


def near_identifiers(allowed: frozenset[str]) -> st.SearchStrategy[str]:
    """Texts of allowed characters with, often, a bad character before, inside or after."""
    good = st.text(alphabet=sorted(allowed), min_size=0, max_size=130)
    bad = st.sampled_from(BAD_CHARS)
    return st.one_of(good, st.tuples(good, bad, good).map("".join),
                     st.tuples(good, bad).map("".join))


@given(near_identifiers(IDENT_CHARS))
def test_check_identifier_accepts_exactly_the_rule(value: str) -> None:
    """Property: check_identifier accepts a text exactly when the rule does, and returns
    it unchanged; anything else (a trailing '\\n' included) is a SpecError naming the field."""
    if is_identifier(value, IDENT_CHARS, 128):
        assert check_identifier(value, "id") == value
    else:
        with pytest.raises(SpecError) as raised:
            check_identifier(value, "id")
        assert raised.value.field == "id"


@given(st.text(alphabet=sorted(IDENT_CHARS), min_size=1, max_size=128)
       .filter(lambda v: v[0] in ALNUM), st.sampled_from(BAD_CHARS))
def test_an_identifier_with_a_bad_character_appended_is_refused(value: str, bad: str) -> None:
    """Property: a valid identifier followed by a newline, a space or a control character
    is refused (re.match with '$' accepted 'acme\\n')."""
    assert check_identifier(value, "id") == value
    with pytest.raises(SpecError):
        check_identifier(value + bad, "id")


@given(near_identifiers(ENDPOINT_CHARS))
def test_endpoint_names_follow_the_rule(value: str) -> None:
    """Property: a webhook endpoint name is 1-64 of letters, digits, '.', '_', '-' starting
    with a letter or digit, nothing more (the same for a spec's webhook destination)."""
    expected = is_identifier(value, ENDPOINT_CHARS, 64)
    try:
        accepted = check_endpoint_name(value, "name") == value
    except SpecError:
        accepted = False
    assert accepted is expected
    delivery = {"channel": "webhook", "destination": value}
    try:
        parse_spec({**SPEC, "delivery": [delivery]})
        in_spec = True
    except SpecError:
        in_spec = False
    assert in_spec is expected


@pytest.mark.parametrize("name", ["series\n", "series\nx", " series", "series\t"])
def test_a_source_name_with_white_space_is_refused(name: str) -> None:
    """A condition's source name is matched whole: a trailing newline is refused."""
    trigger = {"type": "condition", "mode": "first_match", "poll_every": 3600,
               "source": {"name": name, "version": "1"},
               "predicate": {"subject": "x", "op": "<", "threshold": "1"}}
    with pytest.raises(SpecError) as raised:
        parse_spec({"version": 1, "trigger": trigger})
    assert raised.value.field == "trigger.source.name"


@pytest.mark.parametrize("field", ["tenant_id", "binding_id", "owner_user_id", "agent"])
def test_a_binding_id_with_a_trailing_newline_is_refused(field: str) -> None:
    """A binding's ids are checked whole: 'acme\\n' is not an identifier."""
    binding: dict[str, Any] = {"tenant_id": "acme", "binding_id": "b1",
                               "owner_user_id": "alice", "agent": "digest"}
    binding[field] += "\n"
    with pytest.raises(BindingSetError) as raised:
        validate_bindings([binding])
    assert raised.value.messages == [
        f"binding 0: {field} {binding[field]!r} is not a valid identifier"]


@pytest.mark.parametrize("name", ["wk2\n", "wk\n2", "wk2 ", "\nwk2"])
def test_a_schema_with_a_newline_is_refused(name: str,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """WATCHKEEPER_SCHEMA is a plain identifier matched whole, in check_schema and in the
    settings read from the environment."""
    with pytest.raises(ConfigError, match="not a plain identifier"):
        check_schema(name)
    monkeypatch.setenv("WATCHKEEPER_SCHEMA", name)
    with pytest.raises(ConfigError, match="setting WATCHKEEPER_SCHEMA: schema .* is not a plain"):
        load_settings()


@pytest.mark.anyio
async def test_users_keys_and_definitions_refuse_a_trailing_newline(db: Database,
                                                                    clock: FakeClock) -> None:
    """users add 'acme\\n' 'bob\\n', a key named 'ci\\n' and a definition id 'holdings\\n'
    are refused with their fields; nothing is written."""
    with pytest.raises(SpecError) as raised:
        await add_user(db, clock, "acme\n", "bob\n")
    assert [p.field for p in raised.value.problems] == ["tenant_id", "user_id"]
    await add_user(db, clock, "acme", "bob")
    with pytest.raises(SpecError) as raised:
        await create_key(db, clock, "agent", tenant_id="acme", name="ci\n")
    assert raised.value.field == "name"
    with pytest.raises(SpecError) as raised:
        await propose(db, clock, tenant_id="acme", definition_id="holdings\n",
                      owner_user_id="bob", spec=parse_spec(SPEC), proposed_by="agent:test")
    assert raised.value.field == "definition_id"
    counts = [await db.pool.fetchval(f"SELECT count(*) FROM {table}")
              for table in ("tenants", "users", "api_keys", "definitions")]
    assert counts == [1, 1, 0, 0]


@pytest.mark.anyio
async def test_the_cli_refuses_a_tenant_with_a_trailing_newline(db: Database, db_dsn: str,
                                                                tmp_path: Path) -> None:
    """watchkeeper users add $'acme\\n' $'bob\\n' exits 2 naming both fields, and adds nobody."""
    code, out, err = await cli("users", "add", "acme\n", "bob\n", dsn=db_dsn, home=tmp_path,
                               check=False)
    assert (code, out) == (2, "")
    assert "tenant_id: 'acme\\n' is not a valid identifier" in err
    assert "user_id: 'bob\\n' is not a valid identifier" in err
    assert await db.pool.fetchval("SELECT count(*) FROM tenants") == 0
