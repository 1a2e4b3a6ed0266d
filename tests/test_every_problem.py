"""Every problem in one answer (issue 19, item 1): a proposal is refused once, listing
the definition id, the owner, the spec's fields, its cross-field rules and its webhook
destinations, each with its field, what is wrong and the fix — over the HTTP API, the
MCP tools and the CLI; a rule that cannot run until another field is fixed says so."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from _api import Api, serving
from test_mcp import World, over_http, refused

from watchkeeper.runtime.engine._clock import FakeClock
from watchkeeper.runtime.store._db import Database
from watchkeeper.triggers import SpecError, parse_spec

pytestmark = pytest.mark.anyio

BAD = {"version": 1, "trigger": {"type": "cron", "expr": "0 20 * * 3", "zone": "CET"},
       "delivery": [{"channel": "webhook", "destination": "slack-nope"},
                    {"channel": "file", "destination": "../etc/passwd"},
                    {"channel": "email"}]}
FIELDS = ["definition_id", "owner", "trigger.zone", "delivery.0.destination",
          "delivery.1.destination", "delivery.2.channel"]
"""What the refusal of BAD, proposed as '-x' for the unknown user bob, lists (in order:
the id, the owner, then the spec's fields in the spec's order)."""


@pytest.fixture
async def world(db: Database, clock: FakeClock) -> World:
    """Two tenants with keys (test_mcp's)."""
    return await World.build(db, clock)


@pytest.fixture
async def api(db: Database, clock: FakeClock, tmp_path: Path) -> AsyncIterator[Api]:
    """The API with the MCP tools."""
    async with serving(db, clock, tmp_path, mcp=True) as running:
        yield running


def check(errors: list[dict[str, Any]]) -> None:
    """The six problems of BAD, each with its message and a fix."""
    assert [e["field"] for e in errors] == FIELDS
    assert all(e["message"] and e["fix"] for e in errors)
    by_field = {e["field"]: e for e in errors}
    assert by_field["owner"]["message"] == "tenant acme has no user 'bob'."
    assert by_field["delivery.0.destination"]["message"] == \
        "tenant acme has no webhook endpoint 'slack-nope'."
    assert "Europe/Paris" in by_field["trigger.zone"]["fix"]


async def test_one_refusal_lists_id_owner_spec_and_destinations_over_http_and_mcp(
        db: Database, api: Api, world: World) -> None:
    """The API (422 problem details) and the MCP tool (error result) answer the same six
    problems at once, and nothing is stored."""
    answer = await api.call("POST", "/v1/definitions/-x/revisions", world.tokens["agent@acme"],
                            body={"spec": BAD, "owner": "bob"})
    assert answer.status_code == 422, answer.text
    check(answer.json()["errors"])
    async with over_http(api, world.tokens["agent@acme"]) as client:
        result = await client.call_tool("propose_agreement", {
            "definition_id": "-x", "spec": BAD, "owner": "bob"})
    check(refused(result)["errors"])
    assert await db.pool.fetchval(
        "SELECT count(*) FROM definitions WHERE tenant_id = 'acme'") == 0


async def test_one_refusal_lists_every_problem_on_the_command_line(
        db: Database, db_dsn: str, world: World, tmp_path: Path) -> None:
    """`propose --json` prints the same six problems as a JSON list and exits 2."""
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(BAD))
    env = {**os.environ, "DATABASE_URL": db_dsn, "WATCHKEEPER_HOME": str(tmp_path)}
    result = await anyio.run_process(
        [sys.executable, "-m", "watchkeeper", "propose", str(path), "--tenant", "acme",
         "--id=-x", "--owner", "bob", "--json"], env=env, check=False)
    assert result.returncode == 2, result.stderr.decode()
    check(json.loads(result.stdout))


def test_a_cross_field_rule_runs_beside_a_failing_field() -> None:
    """first_match with a cooldown is reported beside a too-short poll_every (not only
    once poll_every is fixed); an at time's existence in its zone, which needs the zone,
    says it is checked once trigger.zone is valid."""
    condition = {"type": "condition", "mode": "first_match",
                 "source": {"name": "prices", "version": "1"}, "poll_every": "PT10S",
                 "cooldown": "PT1H",
                 "predicate": {"subject": "FUND", "op": "<=", "threshold": "5000 USD"}}
    with pytest.raises(SpecError) as caught:
        parse_spec({"version": 1, "trigger": condition})
    assert [(p.field, p.problem) for p in caught.value.problems] == [
        ("trigger.poll_every", "10 s is under the minimum resolution of 60 s."),
        ("trigger.cooldown", "applies to every_edge only (first_match fires once).")]
    with pytest.raises(SpecError) as caught:
        parse_spec({"version": 1, "trigger": {"type": "at", "at": "2026-03-29T02:30:00",
                                              "zone": "CET"}})
    assert [p.field for p in caught.value.problems] == ["trigger.zone", "trigger.at"]
    assert "checked once trigger.zone is valid" in caught.value.problems[1].problem
