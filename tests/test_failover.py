"""A real failover: three supervisors on a pg_auto_failover formation, ``perform failover``.

The test runs ``bench/ha.py`` (as ``tests/test_faults.py`` runs the fault harness): it
builds a monitor and two nodes with synchronous replication under a temporary directory
owned by ``postgres`` (pg_autoctl refuses root), starts three supervisor processes on
the formation's two-host URI (``target_session_attrs=read-write``), lets them admit,
run and deliver, runs ``pg_autoctl perform failover``, waits until the old primary has
rejoined as secondary, settles, drains, and counts. Every invariant line must read 0
(nothing lost, no duplicate occurrence key, no report under a stale token, no delivery
without a report, no supervisor exit, ...), admission must have resumed on the new
primary within 30 s, and the primary must have changed. It uses no test database: the
formation is its own and is removed at the end with every process the bench started.

Needs pg_auto_failover: it fails (never skips) with the fix when ``pg_autoctl`` is
missing, as ``tests/test_read_standby.py`` does for PostgreSQL's server binaries.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import anyio
import asyncpg
import pytest

from watchkeeper.runtime.store._db import INLINE_VALUES, Database

pytestmark = pytest.mark.anyio

BENCH = Path(__file__).resolve().parent.parent / "bench" / "ha.py"


async def _requirements() -> None:
    """Fail with the fix when this machine cannot build a formation (``bench/ha.py
    --check`` exits 2 and names it)."""
    done = await anyio.run_process([sys.executable, str(BENCH), "--check"], check=False)
    if done.returncode != 0:
        said = (done.stderr or done.stdout).decode().strip()
        pytest.fail(f"the failover test needs pg_auto_failover: {said}", pytrace=False)


def figure(output: str, name: str) -> int:
    """The number printed before ``name`` in the bench's output."""
    found = re.search(rf"^\s+(\d+)\s+{re.escape(name)}", output, re.MULTILINE)
    assert found is not None, f"no figure {name!r} in:\n{output}"
    return int(found.group(1))


@pytest.mark.timeout(130)
async def test_nothing_is_lost_or_doubled_across_a_failover() -> None:
    """One ``perform failover`` under 30 interval definitions every 2 s, 4 cron and 2
    conditions, 6 s of running before and after it: zeros everywhere, and admission
    resumes."""
    await _requirements()
    with anyio.fail_after(120):
        done = await anyio.run_process(
            [sys.executable, str(BENCH), "--rounds", "failover", "--settle", "6",
             "--intervals", "30", "--crons", "4", "--conditions", "2"], check=False)
    output = done.stdout.decode() + done.stderr.decode()
    section = output.split("invariants (each must be 0):", 1)
    assert len(section) == 2, output
    lines = [line for line in section[1].split("admission (", 1)[0].splitlines()
             if re.match(r"^\s+\d+\s", line)]
    assert len(lines) >= 14, output
    assert all(int(line.split()[0]) == 0 for line in lines), output
    for name in ("due occurrences with no decision (lost)",
                 "occurrence keys with more than one task", "reports under a stale token",
                 "deliveries without a committed report",
                 "supervisor processes that exited on their own"):
        assert figure(output, name) == 0, output
    assert done.returncode == 0, output
    assert "synchronous_standby_names = ANY 1" in output, output
    resumed = re.search(r"^\s+failover: resumed after ([\d.]+) s .*primary (\w+) -> (\w+)\)",
                        output, re.MULTILINE)
    assert resumed is not None, output
    assert float(resumed.group(1)) < 30, output
    assert resumed.group(2) != resumed.group(3), output
    assert figure(output, "occurrences due (interval + cron, computed)") >= 30 * 8, output
    assert figure(output, "webhook-ids processed by the receiver") >= 100, output


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    """A PostgreSQL server of its own (initdb, trust, a free port of 127.0.0.1), as the
    postgres user when this process is root; stopped and removed after the module. Its
    synchronous_standby_names is changed by the test, which a shared server cannot take."""
    bindirs = [os.environ.get("PG_BINDIR", "")] + sorted(
        glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)
    bindir = next((Path(b) for b in bindirs if b and (Path(b) / "initdb").exists()), None)
    if bindir is None:
        pytest.fail("this test needs PostgreSQL's server binaries (initdb). Fix: apt-get "
                    "install postgresql-15 (.ci/run does this), or set PG_BINDIR to their "
                    "folder.", pytrace=False)
    root = Path(tempfile.mkdtemp(prefix="wk-syncrep-"))
    root.chmod(0o700)
    as_root = os.geteuid() == 0
    if as_root:
        user = pwd.getpwnam("postgres")
        os.chown(root, user.pw_uid, user.pw_gid)

    def run(*argv: str) -> None:
        command = [str(bindir / argv[0]), *argv[1:]]
        if as_root:
            command = ["runuser", "-u", "postgres", "--", *command]
        subprocess.run(command, check=True, capture_output=True, timeout=120)

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    started = False
    try:
        run("initdb", "-D", str(root / "data"), "-U", "postgres", "--auth=trust", "--no-sync")
        with (root / "data" / "postgresql.conf").open("a") as conf:
            conf.write(f"\nport = {port}\nlisten_addresses = '127.0.0.1'\n"
                       f"unix_socket_directories = '{root}'\nfsync = off\n"
                       "shared_buffers = 16MB\n")
        run("pg_ctl", "start", "-w", "-t", "60", "-D", str(root / "data"), "-l",
            str(root / "log"))
        started = True
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        if started:
            with contextlib.suppress(subprocess.CalledProcessError):
                run("pg_ctl", "stop", "-w", "-t", "60", "-m", "immediate", "-D",
                    str(root / "data"))
        shutil.rmtree(root, ignore_errors=True)


async def test_a_session_ends_while_its_synchronous_standby_is_gone(server: str) -> None:
    """Found by ``bench/ha.py``: during ``perform failover`` the old primary's fast
    shutdown hung, so it never rejoined as a secondary. Each backend of a watchkeeper
    session, terminated, was stuck in its exit ("idle waiting for 0/3BE31E0"): a session
    that has temporary tables drops them when it exits, in a transaction whose COMMIT
    waits for the synchronous standby, which had just been promoted, and the one SIGTERM
    that could cancel that wait had already been spent. watchkeeper's sessions each made
    their staging tables at connect. Now a staging table lives in the transaction that
    fills it (ON COMMIT DROP): a session leaves nothing to drop, and a terminated one
    exits at once with a synchronous standby named and absent."""
    conn = await asyncpg.connect(server)
    try:
        await conn.execute("ALTER SYSTEM RESET synchronous_standby_names")
        await conn.execute("SELECT pg_reload_conf()")
    finally:
        await conn.close()
    async with Database.open(server, min_size=1, max_size=2) as db:
        async with db.connection() as session:
            async with session.transaction():
                # more rows than are sent inline: COPYed into a temporary table
                rows = [("d1", f"s{i}", "true") for i in range(INLINE_VALUES // 6 + 1)]
                await session.stage("wk_stage_polls", ["definition_id", "slot", "verdict"], rows)
                staged = await session.raw.fetchval("SELECT count(*) FROM wk_stage_polls")
            assert staged == len(rows)
            pid = session.raw.get_server_pid()
            # nothing of the staging outlives the transaction
            assert await session.raw.fetchval(
                "SELECT count(*) FROM pg_class WHERE relnamespace = pg_my_temp_schema()") == 0
        admin = await asyncpg.connect(server)
        try:
            await admin.execute("ALTER SYSTEM SET synchronous_standby_names = 'absent'")
            await admin.execute("SELECT pg_reload_conf()")
            await _synchronous_standby_awaited(server, admin)
            ended = await admin.fetchval("SELECT pg_terminate_backend($1, 10000)", pid)
            waiting = await admin.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", pid)
        finally:
            await admin.execute("ALTER SYSTEM RESET synchronous_standby_names")
            await admin.execute("SELECT pg_reload_conf()")
            await admin.close()
        assert ended and waiting == 0, "the terminated session is still exiting"


async def _synchronous_standby_awaited(server: str, admin: asyncpg.Connection) -> None:
    """Wait until the server's commits wait for the (absent) synchronous standby: the
    checkpointer publishes a reloaded synchronous_standby_names to the backends on its
    own time, so a probe session commits small transactions until one is seen waiting
    (wait_event SyncRep); that wait is then cancelled (the commit stays local) and the
    probe, holding no temporary table, closed. Without this the session under test
    could be ended before the setting applies, and the test would prove nothing.

    Raises:
        TimeoutError: no commit waited within 30 s.
    """
    probe = await asyncpg.connect(server)
    probe_pid = probe.get_server_pid()

    async def commit_until_one_waits() -> None:
        while True:  # each commit waits for the standby once the setting is published
            await probe.execute("CREATE TEMP TABLE sync_probe (); DROP TABLE sync_probe")

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(commit_until_one_waits)
            with anyio.fail_after(30):
                # another server process's state: polled
                while await admin.fetchval("SELECT wait_event FROM pg_stat_activity "  # noqa: ASYNC110
                                           "WHERE pid = $1", probe_pid) != "SyncRep":
                    await anyio.sleep(0.05)
            await admin.execute("SELECT pg_cancel_backend($1)", probe_pid)
            tg.cancel_scope.cancel()
    finally:
        probe.terminate()
