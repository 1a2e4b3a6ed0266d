"""Fixes a model can follow (issue 19, item 3): a value of the wrong type says what
fits instead, with the field's own range; every field of the spec's schema says what it
is; the schema requires a cron trigger's zone as the parser does; an agent no
supervisor has ever offered is accepted with a warning in the answer."""

from __future__ import annotations

import json
from typing import Any

import pytest
from _helpers import owner

from watchkeeper.runtime.engine._clock import FakeClock
from watchkeeper.runtime.store._db import Database
from watchkeeper.runtime.usecases import propose_spec
from watchkeeper.triggers import SpecError, SpecV1, parse_spec

CRON = {"type": "cron", "expr": "0 9 * * 1", "zone": "Europe/Paris"}


def problems(spec: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """The refusal of ``spec`` as {field: (message, fix)}."""
    with pytest.raises(SpecError) as caught:
        parse_spec({"version": 1, "trigger": CRON, **spec})
    return {p["field"]: (p["message"], p["fix"]) for p in caught.value.to_json()}


def test_type_errors_say_what_fits_with_the_fields_range() -> None:
    """Integers, a decimal and the model agent's number and integer each name their
    shape, their range (from the field's constraints) and an example; none points to
    the README."""
    found = problems({
        "limits": {"max_model_requests": "5", "max_tasks_per_period": 2.5,
                   "max_attempts": "three", "max_cost_usd": [1]},
        "agent": {"name": "model", "params": {"model": "m", "temperature": "warm",
                                              "max_output_tokens": "lots"}}})
    assert found == {
        "limits.max_attempts": ("'three' is not an integer.",
                                "write an integer from 1 to 20, such as 3."),
        "limits.max_tasks_per_period": ("2.5 is not an integer.",
                                        "write an integer from 0 to 1000000, such as 5."),
        "limits.max_model_requests": ("'5' is not an integer.",
                                      "write an integer from 0 to 1000000000, such as 5."),
        "limits.max_cost_usd": ("[1] is not a decimal number.",
                                'write a decimal string from 0 to 1000000000, such as "0.25".'),
        "agent.params.temperature": ("'warm' is not a number.",
                                     "write a number from 0 to 2, such as 0.5."),
        "agent.params.max_output_tokens": ("'lots' is not an integer.",
                                           "write an integer from 1 to 1000000, such as 2048."),
    }
    assert problems({"limits": {"max_attempts": 21}})["limits.max_attempts"] == (
        "21 is more than the maximum 20.", "write an integer from 1 to 20, such as 3.")
    assert problems({"ends": {"after": 0}})["ends.after"][1] == \
        "write an integer from 1 to 1000000000, such as 5."


def test_a_missing_field_fix_says_what_the_field_is() -> None:
    """The fix of a missing field adds it with its description, not a README pointer."""
    with pytest.raises(SpecError) as caught:
        parse_spec({"version": 1, "trigger": {"type": "interval"}})
    assert caught.value.to_json() == [{
        "field": "trigger.every", "message": "is missing.",
        "fix": "add every: How often: seconds or an ISO 8601 duration such as 'PT15M', at "
               "least the runtime's minimum interval (60 s by default)."}]


def test_every_field_of_the_spec_schema_says_what_it_is() -> None:
    """Each property of the spec's JSON Schema has a description, and no description
    sends the reader to the module docstring, DESIGN or the README."""
    schema = SpecV1.model_json_schema()
    missing, pointers = [], []

    def walk(node: Any, path: str) -> None:
        if isinstance(node, dict):
            for name, prop in (node.get("properties") or {}).items():
                if "description" not in prop:
                    missing.append(f"{path}/{name}")
            for key, value in node.items():
                if key == "description" and any(word in value for word in (
                        "docstring", "DESIGN", "README", ":class:")):
                    pointers.append(path)
                walk(value, f"{path}/{key}")
        elif isinstance(node, list):
            for item in node:
                walk(item, path)

    walk(schema, "")
    assert missing == [] and pointers == []
    assert len(json.dumps(schema)) > 0


def test_the_schema_requires_a_cron_zone_as_the_parser_does() -> None:
    """CronTrigger's schema lists zone as a required string; the parser refuses a cron
    trigger without one."""
    cron = SpecV1.model_json_schema()["$defs"]["CronTrigger"]
    assert "zone" in cron["required"] and cron["properties"]["zone"]["type"] == "string"
    with pytest.raises(SpecError) as caught:
        parse_spec({"version": 1, "trigger": {"type": "cron", "expr": "0 9 * * 1"}})
    assert caught.value.problems[0].field == "trigger.zone"


@pytest.mark.anyio
async def test_an_agent_no_supervisor_offered_is_accepted_with_a_warning(
        db: Database, clock: FakeClock) -> None:
    """agent.name 'gpt' is proposed with a warning naming agent.name; 'researcher', once
    a supervisor (now stopped) offered it, and the built-in 'digest' have none."""
    alice = await owner(db, clock)
    await db.pool.execute(
        "INSERT INTO supervisors (supervisor_id, hostname, pid, started_at, heartbeat_at,"
        " status, detail) VALUES ('s1', 'h', 1, now(), now(), 'stopped', $1::jsonb)",
        {"agents": ["digest", "researcher"]})
    answers = {}
    for name in ("gpt", "researcher", "digest"):
        view = await propose_spec(db, clock, alice, definition_id=f"d-{name}",
                                  spec={"version": 1, "trigger": CRON, "agent": {"name": name}})
        answers[name] = view.to_json()["warnings"]
    assert [w["field"] for w in answers["gpt"]] == ["agent.name"]
    assert "no supervisor has ever offered an agent named 'gpt'" in answers["gpt"][0]["message"]
    assert "'researcher'" in answers["gpt"][0]["message"]
    assert answers["researcher"] == [] and answers["digest"] == []
    assert await db.pool.fetchval("SELECT count(*) FROM definition_revisions "
                                  "WHERE definition_id = 'd-gpt'") == 1


@pytest.mark.anyio
async def test_request_parameters_that_do_not_fit_say_what_fits_over_http(
        db: Database, clock: FakeClock, tmp_path: Any) -> None:
    """The API's own request checks answer the same words as the MCP tools: since and
    limit of the wrong type each say what fits instead (no 'see /openapi.json')."""
    from _api import serving

    from watchkeeper.runtime.usecases import create_key

    await owner(db, clock)
    key = (await create_key(db, clock, "operator", tenant_id="acme", name="k")).token
    async with serving(db, clock, tmp_path) as api:
        answer = await api.call("GET", "/v1/history", key, since="yesterday", limit="many")
    assert answer.status_code == 422
    assert answer.json()["errors"] == [
        {"field": "since",
         "message": "'yesterday' is not an RFC 3339 date-time with an offset (a number of "
                    "seconds is not one).",
         "fix": "write RFC 3339 with an offset, such as 2026-03-29T01:00:00Z or "
                "2026-03-29T03:00:00+02:00."},
        {"field": "limit", "message": "'many' is not an integer.",
         "fix": "write an integer, such as 5."}]
