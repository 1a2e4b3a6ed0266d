"""Webhook signing secrets sealed at rest (issue 18, item 6): envelope encryption under a
key kept outside the database, the secrets of before migration 0010 sealed at start,
a wrong or missing key refused at start naming the setting, and `secrets rotate-key`."""

from __future__ import annotations

import base64
import os
import stat
import sys
from pathlib import Path

import anyio
import pytest
from _helpers import TEST_KEYRING, utc

from watchkeeper.outbox import DeliveryFailed
from watchkeeper.runtime import ConfigError
from watchkeeper.runtime.engine._clock import FakeClock
from watchkeeper.runtime.engine._delivery_store import PgDeliveryStore
from watchkeeper.runtime.store._db import Database
from watchkeeper.runtime.store._sealing import Keyring
from watchkeeper.runtime.usecases import add_endpoint, add_user, rotate_secret

pytestmark = pytest.mark.anyio

OTHER = Keyring([bytes(range(100, 132))], source="WATCHKEEPER_SECRET_KEY")


async def dump(db: Database) -> str:
    """Everything a dump of webhook_secrets holds, as text (bytea as hex and as latin-1)."""
    rows = await db.pool.fetch("SELECT * FROM webhook_secrets ORDER BY secret_id")
    parts = []
    for row in rows:
        for value in row.values():
            if isinstance(value, bytes):
                parts += [value.hex(), value.decode("latin-1")]
            else:
                parts.append(str(value))
    return "\n".join(parts)


async def test_a_dump_alone_cannot_sign_and_the_key_opens_every_secret(
        db: Database, db_dsn: str) -> None:
    """A secret is stored only sealed: neither its text nor its key bytes appear in the
    table, the clear column is NULL; the delivery store opens it with the key; a process
    with another key cannot (a retryable delivery failure naming WATCHKEEPER_SECRET_KEY),
    and a start with another key is refused naming the setting; a row stored in clear
    (as before migration 0010) is sealed at the next start and still signs."""
    clock = FakeClock(utc("2026-06-01T00:00:00Z"))
    await add_user(db, clock, "acme", "alice")
    first = await add_endpoint(db, clock, "acme", "hook", "https://example.com/hook")
    second = await rotate_secret(db, clock, "acme", "hook")
    text = await dump(db)
    for secret in (first, second):
        raw = base64.b64decode(secret.removeprefix("whsec_"))
        assert secret not in text and raw.hex() not in text and raw.decode("latin-1") not in text
    rows = await db.pool.fetch("SELECT secret, key_id, length(sealed) AS n FROM webhook_secrets")
    assert [(r["secret"], r["key_id"]) for r in rows] == [(None, TEST_KEYRING.current_id)] * 2
    store = PgDeliveryStore(db, clock)
    assert (await store.endpoint("acme", "hook")).secrets == (second, first)

    async with Database.open(db_dsn, migrate=False) as bare:
        bare.keyring = OTHER
        with pytest.raises(DeliveryFailed) as refused:
            await PgDeliveryStore(bare, clock).endpoint("acme", "hook")
        assert refused.value.retryable and "WATCHKEEPER_SECRET_KEY" in str(refused.value)
    with pytest.raises(ConfigError, match="WATCHKEEPER_SECRET_KEY"):
        async with Database.open(db_dsn, migrate=False, keyring=OTHER):
            pass

    legacy = "whsec_" + base64.b64encode(b"L" * 32).decode()
    await db.pool.execute("INSERT INTO webhook_secrets (tenant_id, endpoint, secret, created_at) "
                          "VALUES ('acme', 'hook', $1, $2)", legacy, clock.now())
    async with Database.open(db_dsn, migrate=False, keyring=TEST_KEYRING) as started:
        assert await started.pool.fetchval(
            "SELECT count(*) FROM webhook_secrets WHERE secret IS NOT NULL OR sealed IS NULL") == 0
        assert legacy not in await dump(started)
        assert (await PgDeliveryStore(started, clock).endpoint("acme", "hook")).secrets == (
            legacy, second, first)


async def cli(*args: str, env: dict[str, str]) -> tuple[int, str, str]:
    done = await anyio.run_process([sys.executable, "-m", "watchkeeper", *args], env=env,
                                   check=False)
    return done.returncode, done.stdout.decode(), done.stderr.decode()


async def test_the_key_file_the_wrong_key_at_start_and_rotate_key(db: Database, db_dsn: str,
                                                                 tmp_path: Path) -> None:
    """Without WATCHKEEPER_SECRET_KEY the first start creates <home>/secret.key, mode
    0600, and seals under it; a start with another key in WATCHKEEPER_SECRET_KEY exits 2
    naming the setting before doing anything; `secrets rotate-key` re-wraps every data
    key under a new key (the sealed secrets unchanged), replaces the key file, and the
    secrets open with the new key and no longer with the old one."""
    clock = FakeClock(utc("2026-06-01T00:00:00Z"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("WATCHKEEPER_")}
    env.update(DATABASE_URL=db_dsn, WATCHKEEPER_HOME=str(tmp_path))
    code, _, err = await cli("users", "add", "acme", "alice", env=env)
    assert code == 0, err
    code, secret, err = await cli("webhooks", "add", "acme", "hook", "https://example.com/h",
                                  env=env)
    assert code == 0, err
    key_file = tmp_path / "secret.key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    before, old_key = Keyring.load(None, tmp_path), key_file.read_text().strip()
    code, _, err = await cli("status", env={**env, "WATCHKEEPER_SECRET_KEY": Keyring.generate()})
    assert code == 2 and "WATCHKEEPER_SECRET_KEY" in err and "Traceback" not in err, err
    code, _, err = await cli("status", env={**env, "WATCHKEEPER_SECRET_KEY": "not-a-key"})
    assert code == 2 and "WATCHKEEPER_SECRET_KEY does not hold a secret key" in err, err
    sealed_before = await db.pool.fetchval("SELECT sealed FROM webhook_secrets")

    code, out, err = await cli("secrets", "rotate-key", env=env)
    assert code == 0 and out == "" and "1 webhook secret(s) re-sealed" in err, err
    after = Keyring.load(None, tmp_path)
    assert after.current_id != before.current_id
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    row = await db.pool.fetchrow("SELECT sealed, key_id FROM webhook_secrets")
    assert row["sealed"] == sealed_before and row["key_id"] == after.current_id
    async with Database.open(db_dsn, migrate=False, keyring=after) as fresh:
        assert (await PgDeliveryStore(fresh, clock).endpoint("acme", "hook")).secrets == (
            secret.strip(),)
    with pytest.raises(ConfigError, match="sealed under key"):
        async with Database.open(db_dsn, migrate=False, keyring=Keyring.load(old_key, tmp_path)):
            pass
