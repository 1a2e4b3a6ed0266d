"""The failover bench: three supervisors on a pg_auto_failover formation, failed over.

Why: issue 20 asks that watchkeeper's promises hold when its PostgreSQL primary goes
away and a standby takes over: no occurrence lost, none admitted twice, no report under
a stale fencing token, no notice without a report, no supervisor exiting; and how long
admission stops. This script builds a real formation on this machine, runs the
supervisors on it, fails it over, and counts with the fault harness's own queries
(``bench/faults.py``: :func:`faults.define`, :func:`faults.measure`), so both benches
count the same way. It exits 1 if any invariant is violated.

Set-up, all under one temporary directory owned by the ``postgres`` user (pg_autoctl
refuses to run as root: as root, every pg_autoctl command runs through ``runuser -u
postgres``), removed at the end with every process it started:

* a pg_auto_failover monitor and two Postgres nodes (``pg_autoctl create monitor`` and
  ``create postgres``, ``--auth trust --no-ssl``, on free ports of 127.0.0.1), each kept
  by its ``pg_autoctl`` keeper; the formation's default settings give synchronous
  replication (``synchronous_standby_names = 'ANY 1 (...)'``, ``synchronous_commit =
  on``) while both nodes are up;
* ``DATABASE_URL`` is what ``pg_autoctl show uri --formation default`` prints (two
  hosts, ``target_session_attrs=read-write``), with the user ``postgres`` and the
  bench's database;
* a webhook receiver (``outbox.Receiver`` on 127.0.0.1, in this process);
* ``--intervals`` definitions every ``--every`` seconds, ``--crons`` every minute and
  ``--conditions`` conditions polled every second (as in ``bench/faults.py``), each run
  by the agent ``faulty`` and delivered to the receiver;
* ``--supervisors`` OS processes of ``bench/_fault_supervisor.py`` (the product's
  ``Supervisor``, PostgreSQL's clock, lease ``--lease`` s), all on the formation's URI.

Rounds (``--rounds``, in order; each waits ``--settle`` seconds of normal running
before it, and after it until the formation has a primary and a secondary again):

* ``failover``: ``pg_autoctl perform failover`` (the primary drains, the secondary is
  promoted, the old primary rejoins as secondary);
* ``postmaster``: SIGKILL to the primary's postmaster (its pid from
  ``postmaster.pid``). The node's keeper is still running and restarts PostgreSQL in
  place, with crash recovery: pg_auto_failover fails over only when a node is
  unreachable for ``node_considered_unhealthy_timeout`` (20 s), so this round is a
  crash and restart of the primary, not a promotion;
* ``node``: SIGKILL to the primary's keeper and its PostgreSQL together (the process
  group: the host gone); the monitor promotes the secondary once it has found the node
  unhealthy; the keeper is started again after the promotion and the node rejoins as a
  secondary (``pg_rewind``).

Seconds until admission resumes: from the moment the round's fault was injected (this
host's clock, which is PostgreSQL's: same machine) to the end of the longest pause
between two consecutive task admissions (``tasks.admitted_at``) in the round, which
ends where the next round's fault begins (the last one: at the cutoff); the last
admission before the fault counts as the pause's possible start. Outside a failover
admissions come at almost every tick (0.5 s: 100 definitions due every 2 s by default),
so the pause is the outage.

Usage::

    .venv/bin/python bench/ha.py [--rounds failover,postmaster,node] [--settle 10]

Needs pg_auto_failover (Debian: ``apt-get install postgresql-15-auto-failover``) and
PostgreSQL's server binaries of the same major version.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import glob
import json
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg

_HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(_HERE))
import faults  # noqa: E402  (bench/faults.py: the counting shared with the fault harness)

from watchkeeper.outbox import Receiver, serve  # noqa: E402
from watchkeeper.runtime.store._db import Database  # noqa: E402
from watchkeeper.runtime.store._sealing import SETTING, Keyring  # noqa: E402

ROUNDS = ("failover", "postmaster", "node")
INSTALL = ("Fix: apt-get install postgresql-15-auto-failover (.ci/run does this when "
           "pg_autoctl is missing).")


class Missing(RuntimeError):
    """What this machine lacks to build a formation, with the fix in the message."""


def requirements() -> tuple[str, Path]:
    """``pg_autoctl``'s path and the server binaries' folder of the PostgreSQL major
    version pg_auto_failover's extension is installed for.

    Raises:
        Missing: pg_autoctl, its extension or the server binaries are missing, or this
            process is root and there is no ``postgres`` user to run them as.
    """
    autoctl = shutil.which("pg_autoctl")
    if autoctl is None:
        raise Missing("pg_autoctl (pg_auto_failover) is not installed. " + INSTALL)
    versions = sorted(glob.glob("/usr/lib/postgresql/*/lib/pgautofailover.so"), reverse=True)
    wanted = os.environ.get("PG_BINDIR")
    bindirs = [Path(wanted)] if wanted else [Path(v).parent.parent / "bin" for v in versions]
    bindir = next((b for b in bindirs if (b / "pg_ctl").exists() and (b / "initdb").exists()),
                  None)
    if bindir is None:
        raise Missing("pg_auto_failover's extension (pgautofailover.so) or PostgreSQL's "
                      "server binaries of its version are missing. " + INSTALL)
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            raise Missing("running as root, the formation runs as the user postgres, which "
                          "is missing. Fix: apt-get install postgresql-15 (it creates the "
                          "user), or run as another user.") from None
    return autoctl, bindir


def free_port() -> int:
    """A TCP port of 127.0.0.1 nothing listens on now (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Formation:
    """A pg_auto_failover monitor and two nodes under ``root``, each run by its keeper
    (``pg_autoctl ... --run``, its own process group)."""

    autoctl: str
    bindir: Path
    root: Path
    ports: dict[str, int] = field(default_factory=dict)
    keepers: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @classmethod
    def make_root(cls) -> Path:
        """A fresh directory under the temporary folder, owned by the formation's user."""
        root = Path(tempfile.mkdtemp(prefix="wk-ha-"))
        root.chmod(0o700)
        if os.geteuid() == 0:
            user = pwd.getpwnam("postgres")
            os.chown(root, user.pw_uid, user.pw_gid)
        return root

    def _command(self, *argv: str) -> list[str]:
        env = [f"PATH={self.bindir}:{os.environ.get('PATH', '/usr/bin:/bin')}",
               f"HOME={self.root}", f"XDG_CONFIG_HOME={self.root / 'config'}",
               f"XDG_DATA_HOME={self.root / 'share'}", f"XDG_RUNTIME_DIR={self.root / 'run'}"]
        command = ["env", *env, self.autoctl, *argv]
        if os.geteuid() == 0:
            command = ["runuser", "-u", "postgres", "--", *command]
        return command

    def run(self, *argv: str, timeout: float = 120) -> str:
        """One pg_autoctl command to its end; its standard output.

        Raises:
            RuntimeError: it failed (its output in the message).
        """
        done = subprocess.run(self._command(*argv), capture_output=True, text=True,
                              timeout=timeout, check=False, cwd=self.root)
        if done.returncode != 0:
            raise RuntimeError(f"pg_autoctl {' '.join(argv)} failed ({done.returncode}):\n"
                               f"{done.stdout}{done.stderr}")
        return done.stdout

    def keep(self, name: str, *argv: str) -> None:
        """Start ``name``'s keeper (``pg_autoctl argv``) in a process group of its own,
        logging to ``root/name.log``."""
        with open(self.root / f"{name}.log", "ab") as log:
            self.keepers[name] = subprocess.Popen(
                self._command(*argv), stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, cwd=self.root, start_new_session=True)

    @property
    def monitor_uri(self) -> str:
        """The monitor's URI, as the nodes register with it."""
        return (f"postgres://autoctl_node@127.0.0.1:{self.ports['monitor']}"
                "/pg_auto_failover?sslmode=disable")

    def pgdata(self, name: str) -> str:
        """The data directory of ``name`` (monitor, node1, node2)."""
        return str(self.root / name)

    async def start(self, within: float = 180) -> None:
        """Create the monitor, then node1 (the first primary), then node2 (its standby,
        by pg_basebackup), and wait until the formation reports a primary and a
        secondary.

        Raises:
            TimeoutError: not ready within ``within`` seconds.
            RuntimeError: a keeper exited (its log names the cause).
        """
        common = ("--hostname", "127.0.0.1", "--auth", "trust", "--no-ssl", "--run")
        self.ports = {name: free_port() for name in ("monitor", "node1", "node2")}
        self.keep("monitor", "create", "monitor", "--pgdata", self.pgdata("monitor"),
                  "--pgport", str(self.ports["monitor"]), *common)
        deadline = time.monotonic() + within
        await self._until(deadline, self._monitor_ready)
        for name, states in (("node1", {"single"}), ("node2", {"secondary"})):
            self.keep(name, "create", "postgres", "--pgdata", self.pgdata(name),
                      "--pgport", str(self.ports[name]), "--name", name,
                      "--monitor", self.monitor_uri, *common)
            await self._until(deadline, lambda n=name, s=states: self._reached(n, s))
        await self.stable(deadline - time.monotonic())

    async def _until(self, deadline: float, ready: Any) -> None:
        while True:
            for name, keeper in self.keepers.items():
                if keeper.poll() is not None:
                    raise RuntimeError(f"pg_autoctl keeper of {name} exited "
                                       f"({keeper.returncode}); see {self.root / name}.log")
            with contextlib.suppress(Exception):
                if await ready():
                    return
            if time.monotonic() > deadline:
                raise TimeoutError(f"formation not ready; logs in {self.root}")
            await asyncio.sleep(0.5)  # pg_autoctl has no event to wait on

    async def _monitor_ready(self) -> bool:
        conn = await asyncpg.connect(self.monitor_uri, timeout=2)
        try:
            return bool(await conn.fetchval(
                "SELECT count(*) FROM pg_extension WHERE extname = 'pgautofailover'"))
        finally:
            await conn.close()

    async def _reached(self, name: str, states: set[str]) -> bool:
        return any(n["nodename"] == name and n["current_group_state"] in states
                   and n["assigned_group_state"] in states for n in await self.state())

    async def state(self) -> list[dict[str, Any]]:
        """``pg_autoctl show state --json``: one dict per node (``nodename``,
        ``nodeport``, ``current_group_state``, ``assigned_group_state``, ...)."""
        out = await asyncio.to_thread(self.run, "show", "state", "--pgdata",
                                      self.pgdata("monitor"), "--json", timeout=30)
        return list(json.loads(out))

    async def stable(self, within: float = 120) -> str:
        """Wait until one node is primary and the other secondary, as assigned; the
        primary's name.

        Raises:
            TimeoutError: not so within ``within`` seconds.
        """
        found: list[str] = []

        async def ready() -> bool:
            nodes = await self.state()
            states = {n["nodename"]: n["current_group_state"] for n in nodes
                      if n["current_group_state"] == n["assigned_group_state"]}
            if sorted(states.values()) == ["primary", "secondary"]:
                found[:] = [k for k, v in states.items() if v == "primary"]
                return True
            return False

        await self._until(time.monotonic() + within, ready)
        return found[0]

    async def primary(self) -> str:
        """The name of the node the monitor has assigned primary (or wait_primary)."""
        for node in await self.state():
            if node["assigned_group_state"] in ("primary", "wait_primary", "single"):
                return str(node["nodename"])
        raise RuntimeError("no primary assigned")

    async def promoted(self, other_than: str) -> bool:
        """Whether a node other than ``other_than`` is primary (or wait_primary), as
        reported by its keeper; a failing ``show state`` counts as not yet."""
        with contextlib.suppress(Exception):
            return any(n["nodename"] != other_than
                       and n["current_group_state"] in ("primary", "wait_primary")
                       for n in await self.state())
        return False

    def uri(self, user: str, database: str) -> str:
        """``pg_autoctl show uri --formation default`` with ``user`` and ``database``."""
        printed = self.run("show", "uri", "--pgdata", self.pgdata("monitor"),
                           "--formation", "default").strip()
        parts = urlsplit(printed)
        netloc = parts.netloc.rpartition("@")[2]
        return urlunsplit((parts.scheme, f"{user}@{netloc}", "/" + database, parts.query, ""))

    def perform_failover(self) -> None:
        """``pg_autoctl perform failover`` (returns once the monitor has a new primary)."""
        self.run("perform", "failover", "--pgdata", self.pgdata("monitor"), timeout=120)

    def postmaster(self, name: str) -> int | None:
        """The pid in ``name``'s ``postmaster.pid`` (``None``: no such file now)."""
        try:
            return int((self.root / name / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def kill_postmaster(self, name: str) -> int:
        """SIGKILL ``name``'s postmaster; its pid.

        Raises:
            RuntimeError: ``name`` has no postmaster running.
        """
        pid = self.postmaster(name)
        if pid is None:
            raise RuntimeError(f"{name} has no postmaster.pid")
        os.kill(pid, signal.SIGKILL)
        return pid

    def kill_node(self, name: str) -> None:
        """SIGKILL ``name``'s keeper and its PostgreSQL (the keeper's process group)."""
        keeper = self.keepers.pop(name)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(keeper.pid, signal.SIGKILL)
        keeper.wait()

    def restart_node(self, name: str) -> None:
        """Start ``name``'s keeper again (``pg_autoctl run``)."""
        self.keep(name, "run", "--pgdata", self.pgdata(name))

    def stop(self) -> None:
        """Stop every keeper (``pg_autoctl stop``, then SIGKILL to its process group
        after 30 s) and remove the directory."""
        for name in ("node1", "node2", "monitor"):
            keeper = self.keepers.get(name)
            if keeper is None or keeper.poll() is not None:
                continue
            with contextlib.suppress(Exception):
                self.run("stop", "--pgdata", self.pgdata(name), timeout=30)
        for keeper in self.keepers.values():
            try:
                keeper.wait(30)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(keeper.pid, signal.SIGKILL)
                keeper.wait()
            # a postgres left over by a killed keeper is in the same process group
            with contextlib.suppress(ProcessLookupError):
                os.killpg(keeper.pid, signal.SIGKILL)
        self.keepers.clear()
        shutil.rmtree(self.root, ignore_errors=True)


@dataclass
class Round:
    """One injected failure and what it measured (seconds)."""

    kind: str
    injected: datetime
    primary_before: str = ""
    primary_after: str = ""
    inject_seconds: float = 0.0  # how long the injecting command took
    stable_seconds: float = 0.0  # until primary + secondary again
    resumed_seconds: float | None = None
    pause_seconds: float | None = None


async def admissions(dsn: str, since: datetime, until: datetime) -> list[datetime]:
    """``tasks.admitted_at`` from ``since`` to ``until`` (both included), in order."""
    async with Database.open(dsn, migrate=False, min_size=1, max_size=1) as db:
        rows = await db.pool.fetch("SELECT admitted_at FROM tasks WHERE admitted_at "
                                   "BETWEEN $1 AND $2 ORDER BY 1", since, until)
    return [r[0] for r in rows]


def resumption(times: list[datetime], injected: datetime) -> tuple[float, float] | None:
    """(seconds from ``injected`` to the end of the longest pause between consecutive
    ``times``, that pause in seconds); the pause may start at the last time before
    ``injected``; ``None`` when nothing was admitted after it."""
    before = [t for t in times if t <= injected]
    after = [t for t in times if t > injected]
    if not after:
        return None
    chain = before[-1:] + after
    gaps = [(b - a, b) for a, b in zip(chain, chain[1:], strict=False)]
    if not gaps:  # nothing before: from the injection to the first admission
        return ((after[0] - injected).total_seconds(),) * 2
    pause, end = max(gaps)
    return (end - injected).total_seconds(), pause.total_seconds()


async def inject(formation: Formation, kind: str, h: faults.Harness) -> Round:
    """Run one round of ``kind`` and wait until the formation is whole again."""
    primary = await formation.primary()
    began = time.monotonic()
    done = Round(kind, datetime.now().astimezone(), primary_before=primary)
    if kind == "failover":
        try:
            await asyncio.to_thread(formation.perform_failover)
        except RuntimeError as failed:  # e.g. it timed out waiting: the formation decides
            print(f"  {kind}: {str(failed).splitlines()[0]}; waiting for the formation",
                  flush=True)
    elif kind == "postmaster":
        killed = formation.kill_postmaster(primary)
        deadline = time.monotonic() + 120
        while formation.postmaster(primary) in (None, killed):  # the keeper restarts it
            h.reap()
            if time.monotonic() > deadline:
                raise TimeoutError("the keeper did not restart the postmaster in 120 s")
            await asyncio.sleep(0.2)
    elif kind == "node":
        formation.kill_node(primary)
        deadline = time.monotonic() + 120
        while not await formation.promoted(other_than=primary):
            h.reap()
            if time.monotonic() > deadline:
                raise TimeoutError("the monitor did not promote the secondary in 120 s")
            await asyncio.sleep(0.5)
        formation.restart_node(primary)
    done.inject_seconds = time.monotonic() - began
    deadline = time.monotonic() + 180
    while True:  # reap crashed supervisors while the formation heals
        h.reap()
        with contextlib.suppress(TimeoutError):
            done.primary_after = await formation.stable(5)
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"the formation did not recover from {kind} in 180 s")
    done.stable_seconds = time.monotonic() - began
    return done


async def run(args: argparse.Namespace) -> int:
    """Build the formation, run the rounds, settle, drain, count, print; the exit code."""
    autoctl, bindir = requirements()
    began = time.monotonic()
    formation = Formation(autoctl, bindir, Formation.make_root())
    work = Path(tempfile.mkdtemp(prefix="wk-ha-work-"))
    (work / "home").mkdir()
    h: faults.Harness | None = None
    try:
        await formation.start()
        ready = time.monotonic() - began
        database = f"bench_ha_{secrets.token_hex(4)}"
        dsn = formation.uri("postgres", database)
        admin = await asyncpg.connect(formation.uri("postgres", "postgres"))
        await admin.execute(f'CREATE DATABASE "{database}"')
        settings = await admin.fetchrow("SELECT current_setting('synchronous_standby_names') "
                                        "AS names, current_setting('synchronous_commit') AS c")
        await admin.close()
        print(f"formation ready in {ready:.1f} s under {formation.root}: monitor :"
              f"{formation.ports['monitor']}, node1 :{formation.ports['node1']}, node2 :"
              f"{formation.ports['node2']}; synchronous_standby_names = {settings['names']}, "
              f"synchronous_commit = {settings['c']}", flush=True)
        print(f"DATABASE_URL={dsn}", flush=True)
        receiver = Receiver((), fail_share=args.fail_share, seed=args.seed, timeout_seconds=0.5)
        async with serve(receiver) as url:
            os.environ[SETTING] = os.environ.get(SETTING) or Keyring.generate()
            keyring = Keyring.load(os.environ[SETTING], work)
            async with Database.open(dsn, keyring=keyring) as db:  # migrates
                receiver.secrets = (await faults.define(db, args, url),)
            h = faults.Harness(args, dsn, work, None, receiver, None)  # type: ignore[arg-type]
            for i in range(args.supervisors):
                h.procs.append(faults.Proc(i, dsn, work / f"offset-{i}"))
                h.procs[-1].offset_file.write_text("0")
                h.start(h.procs[-1])
            print(f"{args.supervisors} supervisors, lease {args.lease:g} s; {args.intervals} "
                  f"interval (every {args.every:g} s), {args.crons} cron, {args.conditions} "
                  f"condition definitions; rounds: {', '.join(args.rounds)}", flush=True)
            rounds: list[Round] = []
            for kind in args.rounds:
                await _running(h, args.settle)
                done = await inject(formation, kind, h)
                rounds.append(done)
                print(f"  {time.monotonic() - began:6.1f}s {kind}: primary {done.primary_before}"
                      f" -> {done.primary_after}; injected in {done.inject_seconds:.1f} s, "
                      f"primary and secondary again after {done.stable_seconds:.1f} s",
                      flush=True)
            await _running(h, args.settle)
            async with Database.open(dsn, migrate=False, min_size=1, max_size=1) as db:
                cutoff = await db.pool.fetchval("SELECT now()")
            await _running(h, args.lease + 10.0)  # what was due by the cutoff runs
            await asyncio.to_thread(h.drain)
            await asyncio.sleep(1.0)  # the receiver answers what was in flight
            figures, bad = await faults.measure(h, cutoff)
            ends = [r.injected for r in rounds[1:]] + [cutoff]
            for done, end in zip(rounds, ends, strict=True):  # a round ends where the next begins
                times = await admissions(dsn, done.injected - timedelta(seconds=30), end)
                measured = resumption(times, done.injected)
                if measured is not None:
                    done.resumed_seconds, done.pause_seconds = measured
    finally:
        if h is not None:
            await asyncio.to_thread(h.drain)
        await asyncio.to_thread(formation.stop)
    violated = any(bad.values()) or any(d.resumed_seconds is None for d in rounds)
    if violated or args.keep_logs:
        logs = f"logs in {work}"
    else:
        shutil.rmtree(work, ignore_errors=True)
        logs = "logs removed (kept with --keep-logs or when an invariant is violated)"
    print(f"\nsupervisor starts: {sum(p.starts for p in h.procs)}; exited on their own: "
          f"{', '.join(h.crashes) or 'none'}; {logs}")
    faults.print_counts(figures, bad)
    print("admission (seconds from the fault to the first admission after the pause; "
          "the pause):")
    for done in rounds:
        if done.resumed_seconds is None:
            print(f"  {done.kind}: admission did not resume  <-- VIOLATED")
        else:
            print(f"  {done.kind}: resumed after {done.resumed_seconds:.1f} s "
                  f"(no admission for {done.pause_seconds:.1f} s; primary "
                  f"{done.primary_before} -> {done.primary_after})")
    print(f"wall {time.monotonic() - began:.1f} s")
    print("RESULT: " + ("VIOLATED" if violated else "all invariants hold"))
    return 1 if violated else 0


async def _running(h: faults.Harness, seconds: float) -> None:
    """Let the supervisors run ``seconds``, restarting (and counting) any that exited."""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        h.reap()
        await asyncio.sleep(min(left, 0.5))
    h.reap()


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    add = parser.add_argument
    add("--rounds", type=lambda v: tuple(v.split(",")), default=ROUNDS,
        help="comma-separated rounds, in order (default: " + ",".join(ROUNDS) + ")")
    add("--settle", type=float, default=10.0, help="seconds of normal running around rounds")
    add("--seed", type=int, default=1)
    add("--supervisors", type=int, default=3)
    add("--workers", type=int, default=3, help="worker loops per supervisor")
    add("--lease", type=float, default=5.0, help="lease seconds")
    add("--intervals", type=int, default=100)
    add("--every", type=float, default=2.0, help="seconds between an interval's occurrences")
    add("--crons", type=int, default=10)
    add("--conditions", type=int, default=5)
    add("--check", action="store_true",
        help="only check that this machine can build a formation (exit 2 with the fix if not)")
    add("--keep-logs", action="store_true", help="keep the supervisors' logs")
    add("--fail-share", type=float, default=0.0, help="share of webhook requests failed")
    args = parser.parse_args(argv)
    if set(args.rounds) - set(ROUNDS):
        parser.error(f"--rounds: unknown round(s) {sorted(set(args.rounds) - set(ROUNDS))}")
    if args.supervisors < 1 or args.every < 1:
        parser.error("--supervisors >= 1 and --every >= 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Run the bench; the exit code (2 when this machine lacks pg_auto_failover)."""
    args = parse_args(argv)
    try:
        if args.check:
            requirements()
            return 0
        return asyncio.run(run(args))
    except Missing as missing:
        print(f"bench/ha.py: {missing}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
