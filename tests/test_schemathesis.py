"""schemathesis against the running product: a real `watchkeeper serve` subprocess on
the test's PostgreSQL, seeded with a definition, a task, a webhook and keys, fuzzed
through every operation of its OpenAPI document as the operator and as a user: no 5xx,
every response conforms to the document (status codes, content types, schemas, Allow
headers), schema-invalid input is refused with 4xx (tests/schemathesis.toml says which
checks the schema cannot decide)."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest
from _helpers import confirmed

from watchkeeper.runtime.engine._clock import SystemClock
from watchkeeper.runtime.store._db import Database
from watchkeeper.runtime.usecases import add_endpoint, create_key, trigger_now

pytestmark = pytest.mark.anyio

CONFIG = Path(__file__).with_name("schemathesis.toml")
EXAMPLES_PER_OPERATION = 6
SEED = 20261201


@pytest.fixture
async def served(db: Database, db_dsn: str, tmp_path: Path) -> AsyncIterator[str]:
    """`watchkeeper serve --no-supervisor` on the test's database; its base URL."""
    env = {**os.environ, "DATABASE_URL": db_dsn, "WATCHKEEPER_HOME": str(tmp_path / "home")}
    async with await anyio.open_process(
            [sys.executable, "-m", "watchkeeper", "serve", "--no-supervisor", "--port", "0"],
            env=env) as process:
        assert process.stderr is not None
        seen = b""
        with anyio.fail_after(30):
            while (found := re.search(rb"serving (http://127\.0\.0\.1:\d+)", seen)) is None:
                seen += await process.stderr.receive()
        try:
            yield found.group(1).decode()
        finally:
            process.terminate()
            with anyio.fail_after(30):
                await process.wait()


@pytest.mark.timeout(400)  # two schemathesis runs of about 70 s each on 2 busy cores
async def test_schemathesis_finds_no_failure(db: Database, served: str, tmp_path: Path) -> None:
    """Every operation, fuzzed as the operator and as the owning user: schemathesis
    reports no failure and tests every operation."""
    clock = SystemClock()
    alice = await confirmed(db, clock, {"trigger": {"type": "cron", "expr": "0 20 * * 3",
                                                    "zone": "Europe/Paris"}},
                            definition_id="holdings")
    await trigger_now(db, clock, alice, "acme", "holdings")
    await add_endpoint(db, clock, "acme", "ops", "https://example.com/hook")
    operator = (await create_key(db, clock, "operator", tenant_id="acme", name="ops")).token
    user = await _token_of(db, clock)
    config = tmp_path / "schemathesis.toml"
    config.write_text(CONFIG.read_text() + "\n[parameters]\n" + "\n".join(
        f'"{name}" = {value}' for name, value in (
            ("path.definition_id", '"holdings"'), ("path.revision", "1"),
            ("path.task_id", "1"), ("path.user_id", '"alice"'), ("path.name", '"ops"'))) + "\n")
    st = Path(sys.executable).with_name("st")
    for label, token in (("operator", operator), ("user", user)):
        result = await anyio.run_process(
            [str(st), "--config-file", str(config), "run", f"{served}/openapi.json",
             "-H", f"Authorization: Bearer {token}", "-n", str(EXAMPLES_PER_OPERATION),
             "--seed", str(SEED), "--phases", "coverage,fuzzing", "--no-color"],
            check=False, cwd=tmp_path)
        out = result.stdout.decode()
        assert result.returncode == 0, f"as {label}:\n{out[-6000:]}"
        assert re.search(r"Tested: 3\d", out) and " passed" in out and "failures" not in out, out


async def _token_of(db: Database, clock: SystemClock) -> str:
    """A fresh token for alice (the one confirmed() made was not kept)."""
    from watchkeeper.runtime.usecases import add_user

    return await add_user(db, clock, "acme", "alice", rotate=True)
