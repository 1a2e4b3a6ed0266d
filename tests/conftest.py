"""Shared fixtures: a real PostgreSQL, a migrated template, a fresh database per test.

``DATABASE_URL`` (any database on the server; the role needs CREATEDB) is used when
set; otherwise an embedded PostgreSQL is started for the session. A session fixture
migrates a uuid-named template database; each test clones ``test_<uuid>`` from it and
drops it ``WITH (FORCE)`` afterwards (procrastinate's and pgqueuer's pattern). No
rollback-per-test trick: leases and SKIP LOCKED need real commits across connections.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest
from _helpers import TEST_KEYRING
from _pgproxy import PgProxy

from watchkeeper.runtime.engine._clock import FakeClock
from watchkeeper.runtime.store._db import Database
from watchkeeper.runtime.store._embedded import embedded_postgres

pytest_plugins = ["_browser"]  # the headless chromium fixture of the page's browser tests


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    """asyncpg is asyncio-only."""
    return "asyncio"


@pytest.fixture(scope="session")
def server_dsn() -> Iterator[str]:
    """A DSN of a reachable server: DATABASE_URL, or an embedded one for the session."""
    url = os.environ.get("DATABASE_URL")
    if url:
        yield url
        return
    # Not under pytest's own temp root: every pytest session on the machine resets that
    # root to 0700, which would take away the embedded server's traversal grant.
    home = Path(tempfile.mkdtemp(prefix="wk-tests-"))
    try:
        with embedded_postgres(home) as dsn:
            yield dsn
    finally:
        shutil.rmtree(home, ignore_errors=True)


def with_database(dsn: str, name: str) -> str:
    """``dsn`` pointing at database ``name``."""
    parts = urlsplit(dsn)
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))


async def _admin(server: str, statement: str) -> None:
    conn = await asyncpg.connect(server)
    try:
        await conn.execute(statement)
    finally:
        await conn.close()


def _quoted(name: str) -> str:
    assert name.replace("_", "").isalnum()
    return '"' + name + '"'


@pytest.fixture(scope="session")
async def template_db(server_dsn: str) -> AsyncIterator[str]:
    """A migrated template database, dropped at the end of the session."""
    name = f"wk_template_{uuid.uuid4().hex[:12]}"
    await _admin(server_dsn, f"CREATE DATABASE {_quoted(name)}")
    try:
        async with Database.open(with_database(server_dsn, name)):
            pass  # migrations applied; every connection closed on exit
        yield name
    finally:
        await _admin(server_dsn, f"DROP DATABASE IF EXISTS {_quoted(name)} WITH (FORCE)")


@pytest.fixture
async def db_dsn(server_dsn: str, template_db: str) -> AsyncIterator[str]:
    """A fresh database cloned from the template, dropped after the test."""
    name = f"test_{uuid.uuid4().hex[:16]}"
    await _admin(server_dsn, f"CREATE DATABASE {_quoted(name)} TEMPLATE {_quoted(template_db)}")
    try:
        yield with_database(server_dsn, name)
    finally:
        await _admin(server_dsn, f"DROP DATABASE IF EXISTS {_quoted(name)} WITH (FORCE)")


@pytest.fixture
async def fresh_dsn(server_dsn: str) -> AsyncIterator[str]:
    """A new, empty (unmigrated) database, dropped after the test."""
    name = f"test_{uuid.uuid4().hex[:16]}"
    await _admin(server_dsn, f"CREATE DATABASE {_quoted(name)}")
    try:
        yield with_database(server_dsn, name)
    finally:
        await _admin(server_dsn, f"DROP DATABASE IF EXISTS {_quoted(name)} WITH (FORCE)")


@pytest.fixture
async def db(db_dsn: str) -> AsyncIterator[Database]:
    """An open :class:`Database` on the test's fresh database (webhook secrets sealed
    under :data:`TEST_KEYRING`)."""
    async with Database.open(db_dsn, migrate=False, max_size=8,
                             keyring=TEST_KEYRING) as database:
        yield database


@pytest.fixture
def clock() -> FakeClock:
    """A fake clock at 2026-06-01T00:00Z; tests move it."""
    return FakeClock(datetime(2026, 6, 1, tzinfo=UTC))


@pytest.fixture
async def proxy(db_dsn: str) -> AsyncIterator[PgProxy]:
    """A fault-injecting proxy (tests/_pgproxy.py) in front of the test's database,
    disarmed: it can break one COMMIT (lost acknowledgement) or take the server away."""
    async with PgProxy(db_dsn) as running:
        yield running


@pytest.fixture
async def proxied_db(proxy: PgProxy) -> AsyncIterator[Database]:
    """A :class:`Database` whose every connection goes through ``proxy``."""
    async with Database.open(proxy.dsn, migrate=False, min_size=1, max_size=2) as database:
        yield database
