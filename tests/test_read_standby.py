"""Reads from a hot standby (``DATABASE_READ_URL``), on a real streaming standby.

The module starts its own primary (``initdb`` on a free port: its default pg_hba admits
replication from 127.0.0.1, which a shared server may not) and takes a standby from it
with ``pg_basebackup -R``, streaming; both are stopped and removed at the end. As root,
every server command runs as the ``postgres`` user (PostgreSQL refuses root), in a
temporary directory it owns. Needs PostgreSQL's server binaries (Debian's
``/usr/lib/postgresql/<version>/bin``, ``PG_BINDIR``, or ``initdb`` on PATH); skipped
without them.

Checked without mocks: a row written on the primary is answered through the read path
once the standby has replayed it, and not before (replay paused on the standby: the
answer is the standby's, and its stated lag is at least the time since the write, timed
here); the API's answers carry where they were read and the lag; a definition the
standby has not replayed yet is answered by the primary; with the standby stopped,
reads answer from the primary, and go back to the standby once it is up again.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import asyncpg
import httpx2
import pytest
from _api import serving
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client

from watchkeeper.runtime import Settings
from watchkeeper.runtime import usecases as uc
from watchkeeper.runtime.doors.mcp._results import READ_META
from watchkeeper.runtime.engine._clock import FakeClock
from watchkeeper.runtime.store._db import Database
from watchkeeper.triggers import parse_spec

pytestmark = pytest.mark.anyio

NOW = datetime(2026, 6, 1, tzinfo=UTC)
SPEC = {"version": 1, "title": "Daily check",
        "trigger": {"type": "cron", "expr": "0 9 * * *", "zone": "Europe/Paris"},
        "instructions": "check", "delivery": [{"channel": "log"}]}


def _bindir() -> Path | None:
    candidates = [os.environ.get("PG_BINDIR", "")]
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)
    found = shutil.which("initdb")
    candidates.append(str(Path(found).parent) if found else "")
    return next((Path(c) for c in candidates
                 if c and (Path(c) / "initdb").exists() and (Path(c) / "pg_basebackup").exists()),
                None)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Cluster:
    """A primary and its streaming standby, each on its own port."""

    bindir: Path
    root: Path
    primary_port: int
    standby_port: int

    @property
    def primary(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.primary_port}/postgres"

    @property
    def standby(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.standby_port}/postgres"

    @staticmethod
    def database(dsn: str, name: str) -> str:
        return dsn.rsplit("/", 1)[0] + "/" + name

    def run(self, *argv: str) -> None:
        """A server command, as ``postgres`` when this process is root."""
        command = [str(self.bindir / argv[0]), *argv[1:]]
        if os.geteuid() == 0:
            command = ["runuser", "-u", "postgres", "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, timeout=180, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} failed: {done.stdout}{done.stderr}")

    def pg_ctl(self, node: str, action: str) -> None:
        extra = ["-m", "fast"] if action == "stop" else []
        self.run("pg_ctl", action, "-w", "-t", "120", "-D", str(self.root / node),
                 "-l", str(self.root / f"{node}.log"), *extra)


def _as_owner(path: Path) -> None:
    if os.geteuid() == 0:
        user = pwd.getpwnam("postgres")
        os.chown(path, user.pw_uid, user.pw_gid)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    """A primary (initdb) and a standby from pg_basebackup, streaming; torn down after."""
    bindir = _bindir()
    if bindir is None:
        pytest.fail("the standby test needs PostgreSQL's server binaries (initdb, "
                    "pg_basebackup). Fix: apt-get install postgresql-15 (.ci/run does this), "
                    "or set PG_BINDIR to their folder.", pytrace=False)
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            pytest.fail("running as root, the standby test runs its servers as the user "
                        "postgres, which is missing. Fix: apt-get install postgresql-15 "
                        "(it creates the user), or run the tests as another user.",
                        pytrace=False)
    root = Path(tempfile.mkdtemp(prefix="wk-standby-"))
    root.chmod(0o700)
    _as_owner(root)
    made = Cluster(bindir, root, _free_port(), _free_port())
    started: list[str] = []
    try:
        made.run("initdb", "-D", str(root / "primary"), "-U", "postgres", "--auth=trust",
                 "-E", "UTF8", "--no-sync")
        with (root / "primary" / "postgresql.conf").open("a") as conf:
            conf.write(f"\nport = {made.primary_port}\nlisten_addresses = '127.0.0.1'\n"
                       f"unix_socket_directories = '{root}'\nfsync = off\n"
                       "max_wal_senders = 4\nwal_level = replica\nhot_standby = on\n"
                       "shared_buffers = 16MB\n")
        made.pg_ctl("primary", "start")
        started.append("primary")
        made.run("pg_basebackup", "-h", "127.0.0.1", "-p", str(made.primary_port), "-U",
                 "postgres", "-D", str(root / "standby"), "-R", "-X", "stream",
                 "--checkpoint=fast", "--no-sync")
        with (root / "standby" / "postgresql.conf").open("a") as conf:
            conf.write(f"\nport = {made.standby_port}\n")
        made.pg_ctl("standby", "start")
        started.append("standby")
        yield made
    finally:
        for node in reversed(started):
            with contextlib.suppress(RuntimeError):  # already stopped
                made.run("pg_ctl", "stop", "-w", "-t", "60", "-m", "immediate", "-D",
                         str(root / node))
        shutil.rmtree(root, ignore_errors=True)


async def _one(dsn: str, query: str, *args: Any) -> Any:
    conn = await asyncpg.connect(dsn)
    try:
        return await conn.fetchval(query, *args)
    finally:
        await conn.close()


async def replayed(cluster: Cluster) -> None:
    """Wait (up to a minute) until the standby has replayed everything the primary has
    written so far."""
    target = await _one(cluster.primary, "SELECT pg_current_wal_lsn()")
    with anyio.fail_after(60):
        while True:  # polling the server: there is no event to wait on
            if await _one(cluster.standby, "SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn",
                          target):
                return
            await anyio.sleep(0.1)


@pytest.fixture
async def db(cluster: Cluster) -> AsyncIterator[Database]:
    """A fresh database on the primary, migrated, with the standby's copy of it attached
    the way ``serve`` attaches DATABASE_READ_URL (tried again 0.5 s after a failure)."""
    name = f"wk_{uuid.uuid4().hex[:12]}"
    await _one(cluster.primary, f'CREATE DATABASE "{name}"')
    try:
        async with Database.open(cluster.database(cluster.primary, name), max_size=6) as database:
            settings = Settings(database_read_url=cluster.database(cluster.standby, name))
            async with uc.read_standby(database, settings, retry_seconds=0.5,
                                       connect_timeout=3):
                yield database
    finally:
        await _one(cluster.primary, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@dataclass
class Owner:
    """alice: authenticated, and her token for the doors."""

    principal: uc.UserPrincipal
    token: str


async def _agreement(db: Database, clock: FakeClock, definition_id: str,
                     me: Owner | None = None) -> Owner:
    """alice's confirmed definition, written on the primary."""
    if me is None:
        token = await uc.add_user(db, clock, "acme", "alice")
        me = Owner(await uc.authenticate(db, token), token)
    proposal = await uc.propose(db, clock, tenant_id="acme", definition_id=definition_id,
                                owner_user_id="alice", spec=parse_spec(SPEC),
                                proposed_by="agent:test")
    await uc.confirm(db, clock, me.principal, definition_id=definition_id,
                     revision=proposal.revision, spec_hash=proposal.spec_hash)
    return me


def _slots(page: uc.HistoryPage) -> list[tuple[str, str]]:
    return [(e["definition_id"], e["kind"]) for e in page.entries]


async def test_history_is_read_from_the_standby_and_says_how_old(
        cluster: Cluster, db: Database, tmp_path: Path) -> None:
    clock = FakeClock(NOW)
    alice = await _agreement(db, clock, "d1")
    await uc.trigger_now(db, clock, alice.principal, "acme", "d1")
    await replayed(cluster)
    query = uc.HistoryQuery(tenant_id="acme")

    with uc.noting_reads() as note:
        page = await uc.history(db, query)
    assert _slots(page) == [("d1", "manual")]
    source = note.source
    assert source is not None and source.server == "standby" and source.fallback is None
    assert source.lag_seconds is not None and 0 <= source.lag_seconds < 30

    # hold the standby's replay: a task written on the primary now is not in its answers
    await _one(cluster.standby, "SELECT pg_wal_replay_pause()")
    try:
        clock.advance(3600)
        await uc.trigger_now(db, clock, alice.principal, "acme", "d1")
        written = time.time()
        assert await db.pool.fetchval("SELECT count(*) FROM tasks") == 2  # on the primary
        # the lag is PostgreSQL's own real clock against the replayed commit's timestamp:
        # no injected clock stands in for it, so real time must pass for a lag to show
        await anyio.sleep(1.5)
        elapsed = time.time() - written
        with uc.noting_reads() as note:
            page = await uc.history(db, query)
        assert _slots(page) == [("d1", "manual")]  # the standby's answer: one task
        source = note.source
        assert source is not None and source.server == "standby"
        assert source.lag_seconds is not None and source.lag_seconds >= elapsed

        async with serving(db, clock, tmp_path, mcp=True) as api:
            answer = await api.call("GET", "/v1/history", alice.token)
            assert answer.status_code == 200, answer.text
            assert len(answer.json()["items"]) == 1
            assert answer.headers["Watchkeeper-Read-From"] == "standby"
            assert float(answer.headers["Watchkeeper-Read-Lag"]) >= elapsed
            # the page: signing in writes a session on the primary; its reads, the standby's
            signed = await api.client.post("/sign-in", data={"token": alice.token},
                                           headers={"Origin": api.url})
            assert signed.status_code == 303, signed.text
            shown = await api.client.get("/definitions/d1")
            assert shown.status_code == 200, shown.text
            assert shown.headers["Watchkeeper-Read-From"] == "standby"
            assert "Read from the standby: it may be up to" in shown.text
            # a write through the API goes to the primary, replay paused or not
            clock.advance(3600)
            made = await api.call("POST", "/v1/definitions/d1/trigger", alice.token)
            assert made.status_code < 300, made.text
            assert "Watchkeeper-Read-From" not in made.headers
            # the MCP read tools say it too: in _meta and in a sentence the model reads
            agent = (await uc.create_key(db, clock, "agent", tenant_id="acme",
                                         name="chat")).token
            async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {agent}"},
                                          timeout=httpx2.Timeout(30)) as http, \
                    Client(streamable_http_client(f"{api.url}/mcp", http_client=http)) as client:
                result = await client.call_tool("task_history", {})
            assert not result.is_error, result.content
            assert result.structured_content is not None
            assert len(result.structured_content["items"]) == 1
            read = (result.meta or {})[READ_META]
            assert read["server"] == "standby" and read["lag_seconds"] >= elapsed
            assert "Read from the standby" in result.content[-1].text  # type: ignore[union-attr]
    finally:
        await _one(cluster.standby, "SELECT pg_wal_replay_resume()")

    await replayed(cluster)
    with uc.noting_reads() as note:
        page = await uc.history(db, query)
    assert _slots(page) == [("d1", "manual")] * 3
    assert note.source is not None and note.source.server == "standby"


async def test_what_the_standby_has_not_replayed_is_read_from_the_primary(
        cluster: Cluster, db: Database) -> None:
    clock = FakeClock(NOW)
    alice = await _agreement(db, clock, "d1")
    await replayed(cluster)
    await _one(cluster.standby, "SELECT pg_wal_replay_pause()")
    try:
        await _agreement(db, clock, "d2", alice)
        with uc.noting_reads() as note:
            listed = await uc.list_definitions(db, "acme")
        assert [r["definition_id"] for r in listed] == ["d1"]  # the standby's list
        assert note.source is not None and note.source.server == "standby"
        with uc.noting_reads() as note:
            reading = await uc.read_definition(db, clock, alice.principal, "d2")
        assert reading.definition["definition_id"] == "d2"
        assert reading.definition["status"] == "active"
        assert note.source is not None and note.source.server == "primary"
        assert "not found on the standby" in (note.source.fallback or "")
    finally:
        await _one(cluster.standby, "SELECT pg_wal_replay_resume()")


async def test_reads_fall_back_to_the_primary_while_the_standby_is_down(
        cluster: Cluster, db: Database, tmp_path: Path) -> None:
    clock = FakeClock(NOW)
    alice = await _agreement(db, clock, "d1")
    await uc.trigger_now(db, clock, alice.principal, "acme", "d1")
    await replayed(cluster)
    with uc.noting_reads() as note:
        await uc.history(db, uc.HistoryQuery(tenant_id="acme"))
    assert note.source is not None and note.source.server == "standby"  # pooled now

    cluster.pg_ctl("standby", "stop")
    try:
        clock.advance(3600)
        await uc.trigger_now(db, clock, alice.principal, "acme", "d1")  # the primary only
        with uc.noting_reads() as note:
            page = await uc.history(db, uc.HistoryQuery(tenant_id="acme"))
        assert _slots(page) == [("d1", "manual")] * 2  # the primary's answer
        assert note.source is not None and note.source.server == "primary"
        assert "unreachable" in (note.source.fallback or "")
        async with serving(db, clock, tmp_path) as api:
            answer = await api.call("GET", "/v1/history", alice.token)
            assert answer.status_code == 200, answer.text
            assert len(answer.json()["items"]) == 2
            assert answer.headers["Watchkeeper-Read-From"] == "primary"
            assert "Watchkeeper-Read-Lag" not in answer.headers
    finally:
        cluster.pg_ctl("standby", "start")

    await replayed(cluster)
    await anyio.sleep(0.6)  # the standby is tried again retry_seconds after it failed
    with uc.noting_reads() as note:
        page = await uc.history(db, uc.HistoryQuery(tenant_id="acme"))
    assert _slots(page) == [("d1", "manual")] * 2
    assert note.source is not None and note.source.server == "standby"


async def test_without_a_standby_nothing_is_noted(cluster: Cluster, db: Database) -> None:
    async with Database.open(db.dsn or "", migrate=False) as primary:
        async with uc.read_standby(primary, Settings(database_read_url=" ")):
            assert primary.standby is None
            with uc.noting_reads() as note:
                assert await uc.list_definitions(primary, "acme") == []
        assert note.source is None
