"""schemathesis against the running product: a real `watchkeeper serve` subprocess on
the test's PostgreSQL, seeded with a definition, a task, a webhook and keys in two
tenants, fuzzed through every operation of its OpenAPI document and then chained (the
stateful phase) as a user, as an app key acting for that user and as the other tenant's
operator: no 5xx,
every response conforms to the document (status codes, content types, schemas, Allow
headers), schema-invalid input is refused with 4xx (tests/schemathesis.toml says which
checks the schema cannot decide)."""

from __future__ import annotations

import base64
import os
import re
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest
from _helpers import confirmed, owner
from _served import served

from watchkeeper.runtime.engine._clock import SystemClock
from watchkeeper.runtime.store._db import Database
from watchkeeper.runtime.usecases import add_endpoint, create_key, trigger_now

pytestmark = pytest.mark.anyio

CONFIG = Path(__file__).with_name("schemathesis.toml")
EXAMPLES_PER_OPERATION = 4
SEED = 20261201


@pytest.fixture
async def server_url(db: Database, db_dsn: str, tmp_path: Path) -> AsyncIterator[str]:
    """`watchkeeper serve --no-supervisor` on the test's database; its base URL."""
    # the test's own database handle seals the endpoints' secrets under the tests' key:
    # the server must hold the same one (its start checks it against what is sealed)
    env = {**os.environ, "DATABASE_URL": db_dsn, "WATCHKEEPER_HOME": str(tmp_path / "home"),
           "WATCHKEEPER_SECRET_KEY": base64.urlsafe_b64encode(bytes(range(32))).decode()}
    async with served(env, "--no-supervisor") as server:
        yield server.url


@pytest.mark.timeout(240)
async def test_schemathesis_finds_no_failure(db: Database, server_url: str, tmp_path: Path) -> None:
    """Every operation, fuzzed and then chained (the stateful phase), in three passes
    that each reach the logic: acme's user alice with her token, acme's app key acting
    for alice (On-Behalf-Of pinned: it is part of the authentication, not a parameter),
    and globex's operator (another tenant, so rotating tokens and revoking keys cannot
    blind the other passes); they run at once, the coverage phase (boundary values, about
    a thousand cases) in the user's pass only, to keep the test near a minute.
    schemathesis reports no failure and tests every operation in each pass."""
    clock = SystemClock()
    for tenant, user in (("acme", "alice"), ("globex", "gus")):
        me = await confirmed(db, clock, {"trigger": {"type": "cron", "expr": "0 20 * * 3",
                                                     "zone": "Europe/Paris"}},
                             definition_id="holdings", principal=await owner(db, clock, tenant,
                                                                             user))
        await trigger_now(db, clock, me, tenant, "holdings")
        await add_endpoint(db, clock, tenant, "ops", "https://example.com/hook")
    tokens = {"user": await _token_of(db, clock)}
    app = (await create_key(db, clock, "app", tenant_id="acme", name="backend")).token
    operator = (await create_key(db, clock, "operator", tenant_id="globex", name="ops")).token
    spare = (await create_key(db, clock, "agent", tenant_id="globex", name="spare")).key.key_id
    passes = (("user", ["-H", f"Authorization: Bearer {tokens['user']}"], "alice", 1),
              ("app", ["-H", f"Authorization: Bearer {app}", "-H", "On-Behalf-Of: alice"],
               "alice", 1),
              ("operator", ["-H", f"Authorization: Bearer {operator}"], "gus", 2))
    keep_key = (f'\n[[operations]]\n# the operator revokes a spare key, never its own\n'
                f'include-name = "DELETE /v1/keys/{{key_id}}"\n'
                f'phases.stateful.enabled = false\n'
                f'parameters = {{ "path.key_id" = "{spare}" }}\n')
    st = Path(sys.executable).with_name("st")
    outputs: dict[str, tuple[int, str]] = {}

    async def run(label: str, auth: list[str], user: str, task: int) -> None:
        config = tmp_path / f"{label}.toml"
        config.write_text(CONFIG.read_text() + "\n[parameters]\n" + "\n".join(
            f'"{name}" = {value}' for name, value in (
                ("path.definition_id", '"holdings"'), ("path.revision", "1"),
                ("path.task_id", str(task)), ("path.user_id", f'"{user}"'),
                ("path.name", '"ops"'))) + "\n" + (keep_key if label == "operator" else ""))
        result = await anyio.run_process(
            [str(st), "--config-file", str(config), "run", f"{server_url}/openapi.json", *auth,
             "-n", str(EXAMPLES_PER_OPERATION), "--seed", str(SEED),
             "--phases", "coverage,fuzzing,stateful" if label == "user" else "fuzzing,stateful",
             "--no-color"],
            check=False, cwd=tmp_path)
        outputs[label] = (result.returncode, result.stdout.decode())

    async with anyio.create_task_group() as tg:
        for label, auth, user, task in passes:
            tg.start_soon(run, label, auth, user, task)
    for label, (code, out) in outputs.items():
        assert code == 0, f"as {label}:\n{out[-6000:]}"
        assert re.search(r"Tested: 3\d", out) and " passed" in out, out
        assert "failures" not in out and re.search(r"Stateful\s", out), out


async def _token_of(db: Database, clock: SystemClock) -> str:
    """A fresh token for alice (the one confirmed() made was not kept)."""
    from watchkeeper.runtime.usecases import add_user

    return await add_user(db, clock, "acme", "alice", rotate=True)
