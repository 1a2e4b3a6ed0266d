"""A multi-host DATABASE_URL in libpq's form, and a write that lands on a standby.

``postgresql://h1:p1,h2:p2/db?target_session_attrs=read-write`` is what
``pg_autoctl show uri`` prints; asyncpg 0.32 reads it itself (every host in turn,
keeping the first whose session is read-write). A standby is simulated without mocks by
``ALTER DATABASE ... SET default_transaction_read_only = on``: every new session of that
database then answers a write as a hot standby does (SQLSTATE 25006), and PostgreSQL
reports the setting at connect, where asyncpg's read-write check reads it.
"""

from __future__ import annotations

import socket
from datetime import UTC, datetime
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest

from watchkeeper.runtime import DatabaseUnavailable
from watchkeeper.runtime.store._db import Database

pytestmark = pytest.mark.anyio

NOW = datetime(2026, 6, 1, tzinfo=UTC)


def closed_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def two_hosts(dsn: str, *, attrs: str | None = "read-write") -> str:
    """``dsn`` with a host that is down in front of its own: h1:p1,h2:p2."""
    parts = urlsplit(dsn)
    if not parts.hostname or parts.hostname.startswith("/"):
        # the embedded default listens on a Unix socket only (no TCP port to list beside a
        # closed one); CI and any DATABASE_URL over TCP run these tests
        pytest.skip("the server is reached over a Unix socket: the multi-host form needs TCP")
    user = parts.netloc.rpartition("@")[0]
    netloc = f"{user}@127.0.0.1:{closed_port()},{parts.hostname}:{parts.port or 5432}"
    query = "&".join(q for q in (parts.query, attrs and f"target_session_attrs={attrs}") if q)
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


async def _admin(dsn: str, statement: str) -> None:
    """``statement`` over a connection to the server's ``postgres`` database (the test's
    own may be read-only)."""
    conn = await asyncpg.connect(urlunsplit(urlsplit(dsn)._replace(path="/postgres")))
    try:
        await conn.execute(statement)
    finally:
        await conn.close()


async def _tenants(dsn: str) -> list[str]:
    conn = await asyncpg.connect(dsn, server_settings={"search_path": "watchkeeper"})
    try:
        return [r[0] for r in await conn.fetch("SELECT tenant_id FROM tenants ORDER BY 1")]
    finally:
        await conn.close()


async def _standby(dsn: str, on: bool) -> None:
    """Make every new session of ``dsn``'s database read-only (``on``) or not, and end
    its sessions as a failover does."""
    name = urlsplit(dsn).path.lstrip("/")
    setting = "SET default_transaction_read_only = on" if on else "RESET default_transaction_read_only"
    await _admin(dsn, f'ALTER DATABASE "{name}" {setting}')
    await _admin(dsn, f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                      f"WHERE datname = '{name}' AND pid <> pg_backend_pid()")


async def test_a_two_host_url_whose_first_host_is_down_reaches_the_second(db_dsn: str) -> None:
    """With the first host refusing connections, the second (the real server, read-write)
    serves: the write lands there and reads back over a direct connection."""
    url = two_hosts(db_dsn)
    assert urlsplit(url).netloc.count(",") == 1
    async with Database.open(url, migrate=False, min_size=1, max_size=2) as db:
        await db.execute("tenant_ensure", "acme", NOW)
        async with db.connection() as conn:
            port = await conn.raw.fetchval("SELECT inet_server_port()")
    assert await _tenants(db_dsn) == ["acme"]
    assert port == (urlsplit(db_dsn).port or 5432)


async def test_no_read_write_host_is_an_outage_not_a_configuration_error(db_dsn: str) -> None:
    """When every host answers as a standby, opening with target_session_attrs=read-write
    fails as the server being unreachable (retried by the loops; asyncpg names the last
    host's connection error), and succeeds once the second host is read-write again."""
    await _standby(db_dsn, True)
    try:
        with pytest.raises(DatabaseUnavailable):
            async with Database.open(two_hosts(db_dsn), migrate=False, min_size=1, max_size=1):
                pass
    finally:
        await _standby(db_dsn, False)
    async with Database.open(two_hosts(db_dsn), migrate=False, min_size=1, max_size=1) as db:
        await db.execute("tenant_ensure", "globex", NOW)
    assert await _tenants(db_dsn) == ["globex"]


async def test_a_write_on_a_standby_is_an_outage_and_its_session_is_dropped(db_dsn: str) -> None:
    """A URL without target_session_attrs lands on a read-only server after a 'failover':
    a new session (read-only: not pooled) and any write answer DatabaseUnavailable (never
    StoreError, which would end a loop). A session that
    answers read-only to a write is dropped, so the next one connects anew; once the
    server is read-write again the next write succeeds."""
    async with Database.open(two_hosts(db_dsn, attrs=None), migrate=False, min_size=1,
                             max_size=1) as db:
        await db.execute("tenant_ensure", "acme", NOW)
        # a session of its own made read-only in place, as a standby's session is
        with pytest.raises(DatabaseUnavailable, match="read-only transaction") as caught:
            async with db.connection() as conn:
                pid = conn.raw.get_server_pid()
                await conn.raw.execute("SET default_transaction_read_only = on")
                async with conn.transaction():
                    await conn.execute("tenant_ensure", "initech", NOW)
        assert isinstance(caught.value.__cause__, asyncpg.ReadOnlySQLTransactionError)
        # ... it did not go back to the pool: the next statement runs on another session
        async with db.connection() as conn:
            assert conn.raw.get_server_pid() != pid
        # the whole server answers as a standby after its sessions ended
        await _standby(db_dsn, True)
        causes = set()
        for _ in range(3):
            with pytest.raises(DatabaseUnavailable) as caught:
                await db.execute("tenant_ensure", "umbrella", NOW)
            causes.add(type(caught.value.__cause__).__name__)
        assert "ReadOnlySQLTransactionError" in causes
        name = urlsplit(db_dsn).path.lstrip("/")
        await _admin(db_dsn, f'ALTER DATABASE "{name}" RESET default_transaction_read_only')
        await db.execute("tenant_ensure", "globex", NOW)
    assert await _tenants(db_dsn) == ["acme", "globex"]
