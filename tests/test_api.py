"""The HTTP API as a client uses it, against a real uvicorn and real PostgreSQL: the
principal x route x tenant matrix (with nothing changed by a refusal), problem
details, optimistic concurrency, the tick route under concurrency, keyset history,
readiness and metrics, and the OpenAPI document."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import pytest
from _api import Api, serving
from _helpers import owner

from watchkeeper.runtime.engine._clock import FakeClock
from watchkeeper.runtime.store._db import Database
from watchkeeper.runtime.usecases import add_user, create_key

pytestmark = pytest.mark.anyio

WEDNESDAY = {"version": 1, "trigger": {"type": "cron", "expr": "0 20 * * 3",
                                       "zone": "Europe/Paris"},
             "lateness": {"policy": "review_late", "late_grace": 60}, "title": "holdings"}


@pytest.fixture
async def api(db: Database, clock: FakeClock, tmp_path: Path) -> AsyncIterator[Api]:
    """The API over the test's database, on the fake clock."""
    async with serving(db, clock, tmp_path) as running:
        yield running


class World:
    """Two tenants: acme (alice owns 'h', bob owns 'b') and globex (gus owns 'g'), each
    definition confirmed, with a key of every kind."""

    tokens: dict[str, str]

    @classmethod
    async def build(cls, db: Database, clock: FakeClock, api: Api) -> World:
        world = cls()
        world.tokens = {}
        for tenant, user in (("acme", "alice"), ("acme", "bob"), ("globex", "gus")):
            world.tokens[user] = await add_user(db, clock, tenant, user)
        for kind in ("agent", "app", "operator"):
            for tenant in ("acme", "globex"):
                made = await create_key(db, clock, kind, tenant_id=tenant, name="k")
                world.tokens[f"{kind}@{tenant}"] = made.token
        world.tokens["tick"] = (await create_key(db, clock, "tick", tenant_id=None, name="t")).token
        for user, definition, agent in (("alice", "h", "agent@acme"), ("bob", "b", "agent@acme"),
                                        ("gus", "g", "agent@globex")):
            made = await api.call("POST", f"/v1/definitions/{definition}/revisions",
                                  world.tokens[agent], body={"spec": WEDNESDAY, "owner": user})
            assert made.status_code == 201, made.text
            done = await api.call("POST", f"/v1/definitions/{definition}/revisions/1/confirm",
                                  world.tokens[user],
                                  body={"spec_hash": made.json()["spec_hash"]})
            assert done.status_code == 200, done.text
        return world


async def fingerprint(db: Database) -> list[Any]:
    """Everything a refused request could have changed."""
    rows = []
    for query in ("SELECT tenant_id, definition_id, status, fence, latest_revision, "
                  "effective_revision, status_note FROM definitions ORDER BY 1, 2",
                  "SELECT tenant_id, definition_id, revision, status FROM definition_revisions "
                  "ORDER BY 1, 2, 3",
                  "SELECT count(*) FROM occurrences", "SELECT count(*) FROM tasks",
                  "SELECT tenant_id, user_id, token_sha256 FROM users ORDER BY 1, 2",
                  "SELECT key_id, revoked_at FROM api_keys ORDER BY 1",
                  "SELECT count(*) FROM webhook_endpoints",
                  "SELECT count(*) FROM notification_preferences"):
        rows.append([tuple(r) for r in await db.pool.fetch(query)])
    return rows


# (method, path, body) per capability; {d} is the target definition.
READS = [("GET", "/v1/definitions/{d}", None), ("GET", "/v1/definitions/{d}/polls", None)]
CONTROLS = [("POST", "/v1/definitions/{d}/pause", {"note": "why"}),
            ("POST", "/v1/definitions/{d}/resume", {"note": "back"}),
            ("POST", "/v1/definitions/{d}/trigger", None),
            ("POST", "/v1/definitions/{d}/reviews", {"slot": "2026-06-03T20:00[Europe/Paris]",
                                                     "decision": "skip"}),
            ("POST", "/v1/definitions/{d}/cancel", {"note": "done"})]
CONFIRM = ("POST", "/v1/definitions/{d}/revisions/1/confirm", {"spec_hash": "0" * 64})
PROPOSE = ("POST", "/v1/definitions/{d}/revisions",
           {"spec": WEDNESDAY, "owner": "{owner}", "based_on": 1})
OWNERS = {"h": "alice", "b": "bob", "n": "alice"}
OPERATE = [("GET", "/v1/deliveries", None), ("GET", "/v1/webhooks", None),
           ("GET", "/v1/users", None), ("GET", "/v1/keys", None), ("GET", "/v1/status", None),
           ("POST", "/v1/webhooks", {"name": "ops", "url": "https://example.com/hook"})]

# who: (principal token name, kind, the user it acts as, if any)
PRINCIPALS = [("agent@acme", "agent", None), ("alice", "user", "alice"),
              ("app@acme", "app", "alice"), ("operator@acme", "operator", None),
              ("tick", "tick", None)]


def expected(kind: str, user: str | None, capability: str, target: str) -> int:
    """The status DESIGN's table gives: invisible resources 404 before any 403 ('n' is
    a definition id nobody has yet: a proposal creates it)."""
    if kind == "tick":
        return 403
    if target == "g" or (kind in ("user", "app") and target == "b"):
        return 404
    allowed = {"read": {"agent", "user", "app", "operator"},
               "propose": {"agent", "user", "app", "operator"},
               "control": {"user", "app", "operator"}, "confirm": {"user", "app"},
               "operate": {"operator"}}[capability]
    return 0 if kind in allowed else 403


@pytest.mark.parametrize(("who", "kind", "user"), PRINCIPALS)
async def test_the_principal_route_tenant_matrix(db: Database, clock: FakeClock, api: Api,
                                                 who: str, kind: str, user: str | None) -> None:
    """Every route x this principal x own definition, another user's, another tenant's:
    the status DESIGN's table gives; every refusal leaves the store as it was."""
    world = await World.build(db, clock, api)
    token = world.tokens[who]
    headers = {"On-Behalf-Of": user} if kind == "app" else {}
    cases = ([(m, p, b, "read") for m, p, b in READS] + [(*PROPOSE, "propose")]
             + [(*CONFIRM, "confirm")] + [(m, p, b, "control") for m, p, b in CONTROLS])
    for target in ("g", "b", "h", "n"):
        for method, path, body, capability in cases:
            if (target == "g" and capability == "propose") or (
                    target == "n" and capability != "propose"):
                continue  # proposing 'g' would create acme's own g; 'n' exists only after
            before = await fingerprint(db)
            if capability == "propose":
                body = {**PROPOSE[2], "owner": OWNERS[target]}
                if target == "n":  # a new id has no revision to base an edit on
                    body.pop("based_on")
            answer = await api.call(method, path.format(d=target), token, body=body,
                                    headers=headers)
            want = expected(kind, user, capability, target)
            label = f"{who} {method} {path.format(d=target)}"
            if want:
                assert answer.status_code == want, (label, answer.text)
                assert answer.headers["content-type"] == "application/problem+json", label
                assert await fingerprint(db) == before, label
                assert "globex" not in answer.text and "gus" not in answer.text, label
            else:  # allowed: a 2xx, or a state conflict / nothing to review (409, 404 detail)
                assert answer.status_code < 500, (label, answer.text)
                if capability in ("read", "propose") or path.endswith(("/pause", "/trigger")):
                    assert answer.status_code in (200, 201), (label, answer.text)
    assert await db.pool.fetchval(
        "SELECT status FROM definitions WHERE tenant_id = 'globex' AND definition_id = 'g'") == "active"
    for method, path, body in OPERATE:
        before = await fingerprint(db)
        answer = await api.call(method, path, token, body=body, headers=headers)
        want = expected(kind, user, "operate", "h")
        if want:
            assert answer.status_code == want, (who, path, answer.text)
            assert await fingerprint(db) == before, (who, path)
        else:
            assert answer.status_code in (200, 201), (who, path, answer.text)
            assert "globex" not in answer.text and "gus" not in answer.text


async def test_no_credential_is_401_and_another_tenants_task_is_404(
        db: Database, clock: FakeClock, api: Api) -> None:
    """Without a credential every /v1 route is 401 with WWW-Authenticate; a revoked key
    is 401; globex's task is 404 for acme's agent and visible to globex's."""
    world = await World.build(db, clock, api)
    for method, path in (("GET", "/v1/definitions"), ("GET", "/v1/history"),
                         ("POST", "/v1/tick"), ("GET", "/v1/tasks/1")):
        answer = await api.call(method, path)
        assert answer.status_code == 401 and answer.headers["www-authenticate"].startswith("Bearer")
    made = await api.call("POST", "/v1/definitions/g/trigger", world.tokens["gus"])
    assert made.status_code == 200
    task = await db.pool.fetchval("SELECT task_id FROM tasks WHERE tenant_id = 'globex'")
    assert (await api.call("GET", f"/v1/tasks/{task}", world.tokens["agent@acme"])).status_code == 404
    seen = await api.call("GET", f"/v1/tasks/{task}", world.tokens["agent@globex"])
    assert seen.status_code == 200 and seen.json()["definition_id"] == "g"
    key_id = world.tokens["agent@acme"].split("_")[2]
    revoked = await api.call("DELETE", f"/v1/keys/{key_id}", world.tokens["operator@acme"])
    assert revoked.status_code == 204
    assert (await api.call("GET", "/v1/definitions", world.tokens["agent@acme"])).status_code == 401
    wrong = await api.call("DELETE", f"/v1/keys/{world.tokens['agent@globex'].split('_')[2]}",
                           world.tokens["operator@acme"])
    assert wrong.status_code == 404


async def test_a_proposal_answers_what_the_owner_confirms(db: Database, clock: FakeClock,
                                                          api: Api) -> None:
    """Propose returns revision, hash, effective part, summary, preview with DST notes
    and where to confirm; the app key confirms for alice and the revision records the
    key; a changed spec_hash is 409; a stale based_on is 409 naming the revision."""
    await owner(db, clock)
    agent = (await create_key(db, clock, "agent", tenant_id="acme", name="chat")).token
    app = await create_key(db, clock, "app", tenant_id="acme", name="backend")
    spec = {**WEDNESDAY, "trigger": {"type": "cron", "expr": "30 2 * * *", "zone": "Europe/Berlin"}}
    clock.set_wall(datetime(2027, 3, 25, tzinfo=UTC))  # Berlin springs forward 2027-03-28
    made = await api.call("POST", "/v1/definitions/night/revisions", agent,
                          body={"spec": spec, "owner": "alice"})
    assert made.status_code == 201 and made.headers["location"] == "/v1/definitions/night"
    body = made.json()
    assert body["needs_confirmation"] and len(body["spec_hash"]) == 64
    assert body["effective"]["trigger"]["expr"] == "30 2 * * *"
    assert "02:30" in body["summary"] and "Europe/Berlin" in body["summary"]
    skipped = [i for i in body["next"] if not i["runs"]]
    assert skipped and skipped[0]["slot"] == "2027-03-28T02:30[Europe/Berlin]"
    assert "does not exist" in skipped[0]["note"] or "skip" in skipped[0]["note"]
    assert body["confirm"]["path"] == "/v1/definitions/night/revisions/1/confirm"
    via = {"On-Behalf-Of": "alice"}
    bad = await api.call("POST", body["confirm"]["path"], app.token,
                         body={"spec_hash": "f" * 64}, headers=via)
    assert bad.status_code == 409 and bad.json()["type"].endswith("conflict")
    ok = await api.call("POST", body["confirm"]["path"], app.token, body=body["confirm"]["body"],
                        headers=via)
    assert ok.status_code == 200, ok.text
    assert await db.pool.fetchval("SELECT confirmed_by FROM definition_revisions") == (
        f"user:acme/alice via app key {app.key.key_id}")
    stale = await api.call("POST", "/v1/definitions/night/revisions", agent,
                           body={"spec": spec, "owner": "alice"})
    assert stale.status_code == 409 and "--based-on 1" in stale.json()["detail"]


async def test_every_spec_problem_is_one_422(db: Database, clock: FakeClock, api: Api) -> None:
    """Three mistakes: one 422 problem listing the three fields with fixes; nothing
    stored. A body that is not even the request shape is a 422 naming the field."""
    await owner(db, clock)
    agent = (await create_key(db, clock, "agent", tenant_id="acme", name="chat")).token
    spec = {"version": 1, "titel": "x", "trigger": {"type": "cron", "expr": "0 20 * * 3",
                                                    "zone": "CET"},
            "lateness": {"policy": "sometimes"}}
    answer = await api.call("POST", "/v1/definitions/x/revisions", agent,
                            body={"spec": spec, "owner": "alice"})
    assert answer.status_code == 422 and answer.headers["content-type"] == "application/problem+json"
    problem = answer.json()
    assert [e["field"] for e in problem["errors"]] == ["trigger.zone", "lateness.policy", "titel"]
    assert all(e["fix"] for e in problem["errors"]) and problem["status"] == 422
    assert await db.pool.fetchval("SELECT count(*) FROM definitions") == 0
    shape = await api.call("POST", "/v1/definitions/x/revisions", agent, body={"owner": 3})
    assert shape.status_code == 422
    assert {e["field"] for e in shape.json()["errors"]} == {"spec", "owner"}


async def test_two_concurrent_ticks_admit_each_occurrence_once(db: Database, clock: FakeClock,
                                                               api: Api) -> None:
    """Two tick requests at once, with a due slot of each of 20 definitions: 20 tasks
    admitted in all, each occurrence once; the answer is no-store; a user token is 403."""
    me = await owner(db, clock)
    tick = (await create_key(db, clock, "tick", tenant_id=None, name="cron")).token
    spec = {"version": 1, "trigger": {"type": "interval", "every": 3600}}
    from watchkeeper.runtime.usecases import confirm, propose
    from watchkeeper.triggers import parse_spec
    for n in range(20):
        made = await propose(db, clock, tenant_id="acme", definition_id=f"d{n}",
                             owner_user_id="alice", spec=parse_spec(spec), proposed_by="t")
        await confirm(db, clock, me, definition_id=f"d{n}", revision=1,
                      spec_hash=made.spec_hash)
    clock.advance(3600)
    answers: list[Any] = []

    async def hit(method: str) -> None:
        answers.append(await api.call(method, "/v1/tick", tick))

    async with anyio.create_task_group() as tg:
        tg.start_soon(hit, "POST")
        tg.start_soon(hit, "GET")
    assert [a.status_code for a in answers] == [200, 200]
    assert all(a.headers["cache-control"] == "no-store" for a in answers)
    admitted = sum(a.json()["decisions"].get("admitted", 0) for a in answers)
    assert admitted == 20
    assert await db.pool.fetchval("SELECT count(*) FROM tasks") == 20
    assert await db.pool.fetchval("SELECT count(DISTINCT (definition_id, slot)) FROM tasks") == 20
    token = await add_user(db, clock, "acme", "carol")
    assert (await api.call("POST", "/v1/tick", token)).status_code == 403


async def test_history_pages_with_an_opaque_cursor(db: Database, clock: FakeClock,
                                                   api: Api) -> None:
    """25 manual occurrences, pages of 10: 10, 10, 5, newest first, none repeated; a
    forged cursor is 422 naming 'cursor'."""
    world = await World.build(db, clock, api)
    for _ in range(25):
        clock.advance(1)
        assert (await api.call("POST", "/v1/definitions/h/trigger",
                               world.tokens["alice"])).status_code == 200
    seen, cursor, sizes = [], None, []
    while True:
        page = await api.call("GET", "/v1/history", world.tokens["alice"], limit=10,
                              cursor=cursor)
        assert page.status_code == 200, page.text
        items = page.json()["items"]
        sizes.append(len(items))
        seen += [i["slot"] for i in items]
        cursor = page.json()["next_cursor"]
        if cursor is None:
            break
    assert sizes == [10, 10, 5] and len(set(seen)) == 25 and seen == sorted(seen, reverse=True)
    forged = await api.call("GET", "/v1/history", world.tokens["alice"], cursor="bm90LWEtY3Vyc29y")
    assert forged.status_code == 422 and forged.json()["errors"][0]["field"] == "cursor"


async def test_readiness_metrics_and_the_openapi_document(db: Database, clock: FakeClock,
                                                          tmp_path: Path) -> None:
    """healthz is 200; readyz is 503 naming the clock when this host's clock is far from
    PostgreSQL's and 200 when near; /metrics has the backlog gauges; /openapi.json is
    3.1 with the spec model as a component that the propose body references."""
    from watchkeeper.runtime.engine._clock import SystemClock

    async with serving(db, clock, tmp_path) as far:
        assert (await far.call("GET", "/healthz")).status_code == 200
        answer = await far.call("GET", "/readyz")
        assert answer.status_code == 503 and "clock" in answer.json()["checks"]["clock"]
    async with serving(db, SystemClock(), tmp_path) as near:
        ready = await near.call("GET", "/readyz")
        assert ready.status_code == 200 and ready.json()["checks"] == {
            "database": "ok", "migrations": "ok", "clock": "ok"}
        assert "wake" not in ready.json()  # no supervisor in this process
        metrics = (await near.call("GET", "/metrics")).text
        assert 'watchkeeper_outbox_deliveries{status="pending"} 0.0' in metrics
        assert "watchkeeper_supervisors_alive 0.0" in metrics
        document = (await near.call("GET", "/openapi.json")).json()
    assert document["openapi"].startswith("3.1")
    schemas = document["components"]["schemas"]
    assert schemas["ProposeIn"]["properties"]["spec"] == {"$ref": "#/components/schemas/Spec"}
    assert "CronTrigger" in schemas and schemas["Spec"]["properties"]["trigger"]["discriminator"]
    security = document["components"]["securitySchemes"]
    assert any(s.get("scheme") == "bearer" for s in security.values())


async def test_readiness_says_how_the_supervisor_wakes(db: Database, tmp_path: Path) -> None:
    """With a supervisor in the process, /readyz says how it learns of new work: polling
    (and why) when it cannot listen, still ready (200)."""
    from watchkeeper.runtime.engine._clock import SystemClock
    from watchkeeper.runtime.engine._supervisor import Supervisor, SupervisorConfig

    supervisor = Supervisor(db, SystemClock(), SupervisorConfig(
        home=tmp_path, skew_budget=None, supervisor_id="sup-ready", listen=False,
        tick_seconds=2.5))
    async with serving(db, SystemClock(), tmp_path, supervisor=supervisor) as api:
        ready = await api.call("GET", "/readyz")
    assert ready.status_code == 200
    assert ready.json()["wake"] == "polling every 2.5 s: WATCHKEEPER_LISTEN is off"


async def test_a_tenant_operator_sees_its_own_status_never_the_fleet(
        db: Database, clock: FakeClock, api: Api) -> None:
    """GET /v1/status with a tenant's operator key answers that tenant's waiting tasks
    and notices only: no supervisor id, host name, pid, nor the agents and sources the
    supervisors offer (acme's agent 'xss' stays unknown to globex); the fleet is the
    CLI's (issue 18, item 5)."""
    world = await World.build(db, clock, api)
    await db.execute("supervisor_upsert", "box-7-sup", "acme-box.internal", 4242, clock.now(),
                     "running", 0.5, {"heartbeat_seconds": 5.0, "agents": ["xss"],
                                      "sources": ["acme-prices"], "loops": [], "restarts": {}})
    made = await api.call("POST", "/v1/definitions/h/trigger", world.tokens["alice"])
    assert made.status_code == 200, made.text
    task = await db.pool.fetchrow("SELECT task_id, agent FROM tasks WHERE tenant_id = 'acme'")
    assert task["agent"] != "xss"
    globex = await api.call("GET", "/v1/status", world.tokens["operator@globex"])
    assert globex.status_code == 200, globex.text
    assert globex.json() == {"tenant_id": "globex", "unclaimable": [], "deliveries": {},
                             "oldest_due": None}
    acme = await api.call("GET", "/v1/status", world.tokens["operator@acme"])
    assert acme.status_code == 200, acme.text
    body = acme.json()
    assert [(t["tenant_id"], t["task_id"], t["agent"]) for t in body["unclaimable"]] == [
        ("acme", task["task_id"], task["agent"])]
    for answer in (globex, acme):
        for secret in ("xss", "acme-prices", "acme-box", "4242", "box-7-sup", "supervisors"):
            assert secret not in answer.text, (secret, answer.text)
