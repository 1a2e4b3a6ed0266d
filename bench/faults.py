"""The fault harness: several supervisor processes on one database under random faults,
then the invariants, read from the database (and the receiver's own record).

Why: issue 10 asks that watchkeeper's promises hold when things go wrong at once: no
occurrence run twice, none lost, no report under a stale lease, no effect applied
twice, no notice processed twice. This script breaks things for ``--seconds`` and
counts; it exits non-zero if any invariant is violated. Run it against your own server.

Set-up (a fresh database ``bench_faults_<hex>``, dropped ``WITH (FORCE)`` at the end):

* a webhook receiver (``outbox.Receiver`` served on 127.0.0.1 in this process) that
  fails ``--fail-share`` of requests (500, 429, or holding the request — a timeout);
  from time to time it turns slow (a held request outlasts the channel's 5 s timeout);
* definitions proposed with a 1 s minimum interval and confirmed by their owner, each
  run by the agent ``faulty`` and delivering to the receiver: ``--intervals``
  definitions every ``--every`` seconds, ``--crons`` every minute (``* * * * *``), and
  ``--conditions`` conditions polled every second on the source ``toggle``;
* ``--supervisors`` OS processes, each ``bench/_fault_supervisor.py`` (the product's
  ``Supervisor`` with a lease of ``--lease`` seconds, PostgreSQL's clock as authority,
  on a host clock whose offset the harness sets per process). The first
  ``--behind-proxy`` of them reach the database through ``tests/_pgproxy.py`` (the
  repository's ``tests/`` directory is put on ``sys.path`` for it: the proxy is a test
  helper, not part of the package).

Faults, one every ``--fault-every`` seconds on average, drawn with ``--seed``:

* ``kill``: SIGKILL a supervisor, restart it a second later;
* ``stop``: SIGSTOP a supervisor, SIGCONT it after lease + 2 s (its leases expire and
  are taken over; what it then tries to commit must be rejected);
* ``clock``: step one process's host clock by +-1 h or +-10 min, and back 5-15 s later;
* ``outage``: PostgreSQL away for 3 s: the embedded server is stopped and started again;
  an external server cannot be stopped from here, so every backend of the bench
  database is terminated (``pg_terminate_backend``) every 0.3 s for 3 s instead;
* ``lost_ack``: the proxy swallows the acknowledgement of the next COMMIT (the server
  committed; the client sees a closed connection);
* ``slow``: the receiver holds its failing requests for 6 s for 10 s.

At the end the faults stop, every supervisor is running and healthy for a settle
period (lease + 10 s), then each is drained with SIGTERM. The window's end ("cutoff")
is PostgreSQL's time when the faults stopped; due occurrences are those of the
interval and cron definitions strictly after their confirmation and at or before the
cutoff, computed here from the definitions, not read from the engine.

Usage::

    .venv/bin/python bench/faults.py [--seconds 120] [--seed 1] [--dsn DSN]

The DSN defaults to ``DATABASE_URL``; without either, an embedded PostgreSQL is
started in a temporary home. Everything listens on 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import os
import random
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg

_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]  # not `outbox`
sys.path.insert(0, str(_HERE.parent / "tests"))

from _pgproxy import Fault, PgProxy  # noqa: E402

from watchkeeper.outbox import Receiver, serve  # noqa: E402
from watchkeeper.runtime.engine._clock import SystemClock  # noqa: E402
from watchkeeper.runtime.store import _embedded  # noqa: E402
from watchkeeper.runtime.store._db import Database  # noqa: E402
from watchkeeper.runtime.store._sealing import SETTING, Keyring  # noqa: E402
from watchkeeper.runtime.usecases import add_endpoint, add_user, authenticate, confirm, propose  # noqa: E402
from watchkeeper.triggers import parse_spec  # noqa: E402

TENANT = "faults"
WORKER = _HERE / "_fault_supervisor.py"
KINDS = ("kill", "stop", "clock", "outage", "lost_ack", "slow")


def with_database(dsn: str, name: str) -> str:
    """``dsn`` naming the database ``name``."""
    parts = urlsplit(dsn)
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))


@dataclass
class Proc:
    """One supervisor process and its host-clock offset file."""

    index: int
    dsn: str
    offset_file: Path
    popen: subprocess.Popen[bytes] | None = None
    stopped: bool = False
    starts: int = 0


@dataclass
class Harness:
    """What the fault loop acts on."""

    args: argparse.Namespace
    dsn: str
    work: Path
    proxy: PgProxy
    receiver: Receiver
    embedded: Path | None
    procs: list[Proc] = field(default_factory=list)
    faults: collections.Counter[str] = field(default_factory=collections.Counter)
    pending: set[asyncio.Task[None]] = field(default_factory=set)
    crashes: list[str] = field(default_factory=list)

    def start(self, proc: Proc) -> None:
        """(Re)start ``proc``'s supervisor process."""
        proc.starts += 1
        log = open(self.work / f"supervisor-{proc.index}.log", "ab")  # noqa: SIM115
        proc.popen = subprocess.Popen(
            [sys.executable, str(WORKER), "--dsn", proc.dsn, "--home", str(self.work / "home"),
             "--offset-file", str(proc.offset_file), "--executions",
             str(self.work / "executions"), "--effects", str(self.work / "effects"),
             "--lease", str(self.args.lease), "--workers", str(self.args.workers),
             "--id", f"sup{proc.index}-{proc.starts}"],
            stdout=log, stderr=log, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        log.close()
        proc.stopped = False

    def later(self, seconds: float, action: Any) -> None:
        """Run ``action()`` (sync or async) ``seconds`` from now."""
        async def go() -> None:
            await asyncio.sleep(seconds)
            result = action()
            if asyncio.iscoroutine(result):
                await result
        task = asyncio.ensure_future(go())
        self.pending.add(task)
        task.add_done_callback(self.pending.discard)

    def reap(self) -> None:
        """Restart every supervisor that exited without the harness killing it (counted:
        a supervisor is meant to outlive every one of these faults)."""
        for proc in self.procs:
            if proc.popen is not None and proc.popen.poll() is not None:
                self.crashes.append(f"sup{proc.index}-{proc.starts} exit {proc.popen.returncode}")
                self.start(proc)

    async def inject(self, rng: random.Random) -> str:
        """One random fault; returns what it was. The same draws are made whatever the
        state, so a seed gives the same sequence of attempted faults; one aimed at a
        supervisor that is down or stopped at that moment is not injected ("none")."""
        self.reap()
        kind = rng.choice(self.args.faults)
        proc: Proc | None = self.procs[rng.randrange(len(self.procs))]
        step = rng.choice((3600, -3600, 600, -600))
        back = rng.uniform(5, 15)
        if proc.popen is None or proc.popen.poll() is not None or proc.stopped:
            proc = None
        if kind == "kill" and proc is not None:
            assert proc.popen is not None
            proc.popen.kill()
            proc.popen.wait()
            proc.popen = None
            self.later(1.0, lambda p=proc: self.start(p))
        elif kind == "stop" and proc is not None:
            assert proc.popen is not None
            proc.popen.send_signal(signal.SIGSTOP)
            proc.stopped = True
            self.later(self.args.lease + 2.0, lambda p=proc: self.cont(p))
        elif kind == "clock" and proc is not None:
            proc.offset_file.write_text(str(step))
            self.later(back, lambda p=proc: p.offset_file.write_text("0"))
            kind = f"clock {step:+d}s"
        elif kind == "outage":
            await self.outage(3.0)
        elif kind == "lost_ack":
            self.proxy.arm(Fault.DROP_ACK)
        elif kind == "slow":
            self.receiver.timeout_seconds = 6.0
            self.later(10.0, lambda: setattr(self.receiver, "timeout_seconds", 0.5))
        else:
            return "none"
        self.faults[kind.split()[0]] += 1
        return kind

    def cont(self, proc: Proc) -> None:
        """SIGCONT a stopped supervisor."""
        if proc.popen is not None and proc.popen.poll() is None and proc.stopped:
            proc.popen.send_signal(signal.SIGCONT)
        proc.stopped = False

    async def outage(self, seconds: float) -> None:
        """PostgreSQL away for ``seconds`` (see the module docstring)."""
        if self.embedded is not None:
            layout = _embedded._Layout.of(self.embedded)
            running = _embedded._live_postmaster(layout)
            if running is not None:
                await asyncio.to_thread(_embedded._stop, layout, running)
                await asyncio.sleep(seconds)
                await asyncio.to_thread(_embedded._start, layout)
            return
        admin = await asyncpg.connect(self.args.server)
        try:
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline:
                await admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = $1 AND pid <> pg_backend_pid()", self.args.database)
                await asyncio.sleep(0.3)
        finally:
            await admin.close()

    async def settle(self) -> None:
        """No fault left: every process running, continued, on a true clock."""
        for task in list(self.pending):
            task.cancel()
        self.proxy.disarm()
        self.receiver.timeout_seconds = 0.5
        self.reap()
        for proc in self.procs:
            proc.offset_file.write_text("0")
            if proc.popen is None or proc.popen.poll() is not None:
                self.start(proc)
            else:
                self.cont(proc)

    def drain(self) -> None:
        """SIGTERM every supervisor and wait for it (SIGKILL after 30 s)."""
        for proc in self.procs:
            if proc.popen is not None and proc.popen.poll() is None:
                proc.popen.send_signal(signal.SIGCONT)
                proc.popen.terminate()
        for proc in self.procs:
            if proc.popen is not None:
                try:
                    proc.popen.wait(30)
                except subprocess.TimeoutExpired:
                    proc.popen.kill()
                    proc.popen.wait()


async def define(db: Database, args: argparse.Namespace, url: str) -> str:
    """The owner, the endpoint and every definition, confirmed; returns the secret."""
    clock = SystemClock()
    owner = await authenticate(db, await add_user(db, clock, TENANT, "owner"))
    secret = await add_endpoint(db, clock, TENANT, "hook", url)
    common = {"version": 1, "agent": {"name": "faulty"}, "title": "fault harness",
              "delivery": [{"channel": "webhook", "destination": "hook"}]}
    triggers: list[tuple[str, dict[str, Any]]] = []
    triggers += [(f"i{n:03d}", {"type": "interval", "every": args.every})
                 for n in range(args.intervals)]
    triggers += [(f"c{n:03d}", {"type": "cron", "expr": "* * * * *", "zone": "UTC"})
                 for n in range(args.crons)]
    triggers += [(f"k{n:03d}", {"type": "condition", "mode": "every_edge",
                                "source": {"name": "toggle", "version": "1"}, "poll_every": 1,
                                "predicate": {"subject": "X", "op": "<=",
                                              "threshold": "10 USD/share"}})
                 for n in range(args.conditions)]
    for definition_id, trigger in triggers:
        spec = parse_spec({**common, "trigger": trigger}, min_interval=timedelta(seconds=1))
        proposal = await propose(db, clock, tenant_id=TENANT, definition_id=definition_id,
                                 owner_user_id=owner.user_id, spec=spec,
                                 proposed_by="agent:faults")
        await confirm(db, clock, owner, definition_id=definition_id,
                      revision=proposal.revision, spec_hash=proposal.spec_hash)
    return secret


DUE = """
WITH d AS (
    SELECT definition_id, effective_since AS since,
           CASE WHEN definition_id LIKE 'i%' THEN $2::float8 ELSE 60 END AS every
    FROM definitions WHERE tenant_id = $1 AND definition_id ~ '^[ic]'
), slots AS (
    SELECT d.definition_id, to_timestamp(n * d.every) AS at
    FROM d, generate_series(floor(extract(epoch FROM d.since) / d.every)::bigint + 1,
                            floor(extract(epoch FROM $3::timestamptz) / d.every)::bigint) AS n
)
SELECT count(*) AS due,
       count(*) FILTER (WHERE EXISTS (
           SELECT 1 FROM occurrences o WHERE o.tenant_id = $1
           AND o.definition_id = slots.definition_id AND o.kind = 'scheduled'
           AND o.scheduled_for = slots.at)) AS occurrences,
       count(*) FILTER (WHERE EXISTS (
           SELECT 1 FROM schedule_events e WHERE e.tenant_id = $1
           AND e.definition_id = slots.definition_id AND slots.at BETWEEN e.first_at AND e.last_at
       )) AS ranged,
       count(*) FILTER (WHERE NOT EXISTS (
           SELECT 1 FROM occurrences o WHERE o.tenant_id = $1
           AND o.definition_id = slots.definition_id AND o.kind = 'scheduled'
           AND o.scheduled_for = slots.at) AND NOT EXISTS (
           SELECT 1 FROM schedule_events e WHERE e.tenant_id = $1
           AND e.definition_id = slots.definition_id
           AND slots.at BETWEEN e.first_at AND e.last_at)) AS lost
FROM slots
"""

FIGURES = {
    "occurrences recorded (scheduled, at or before the cutoff)":
        "SELECT count(*) FROM occurrences WHERE kind = 'scheduled' AND scheduled_for <= $1",
    "occurrences recorded (conditions, all)":
        "SELECT count(*) FROM occurrences WHERE kind = 'condition'",
    "tasks": "SELECT count(*) FROM tasks",
    "runs": "SELECT count(*) FROM runs",
    "reports": "SELECT count(*) FROM reports",
    "deliveries delivered": "SELECT count(*) FROM deliveries WHERE status = 'delivered'",
}

INVARIANTS = {
    "occurrence keys with more than one task": """
        SELECT count(*) FROM (SELECT 1 FROM tasks
            GROUP BY tenant_id, definition_id, binding_id, slot, kind HAVING count(*) > 1) x""",
    "occurrences admitted without a task": """
        SELECT count(*) FROM occurrences o WHERE o.decision = 'admitted' AND NOT EXISTS (
            SELECT 1 FROM tasks t WHERE (t.tenant_id, t.definition_id, t.binding_id, t.slot,
            t.kind) = (o.tenant_id, o.definition_id, o.binding_id, o.slot, o.kind))""",
    "reports under a stale token": """
        SELECT count(*) FROM reports r JOIN runs u USING (tenant_id, run_id)
        JOIN tasks t ON t.tenant_id = r.tenant_id AND t.task_id = r.task_id
        WHERE u.task_id <> r.task_id OR u.outcome <> 'succeeded'
           OR (t.lease_token IS NOT NULL AND t.lease_token <> u.lease_token)
           OR u.attempt <> (SELECT max(attempt) FROM runs v
                            WHERE v.tenant_id = r.tenant_id AND v.task_id = r.task_id)""",
    "rejected_stale runs with a report": """
        SELECT count(*) FROM runs u JOIN reports r USING (tenant_id, run_id)
        WHERE u.outcome = 'rejected_stale'""",
    "deliveries without a committed report": """
        SELECT count(*) FROM deliveries d WHERE NOT EXISTS (
            SELECT 1 FROM reports r WHERE r.tenant_id = d.tenant_id AND r.task_id = d.task_id)""",
    "effects recorded done more than once": """
        SELECT count(*) FROM (SELECT 1 FROM effects WHERE status = 'done'
            GROUP BY tenant_id, effect_key HAVING count(*) > 1) x""",
}


async def measure(h: Harness, cutoff: Any) -> tuple[dict[str, int], dict[str, int]]:
    """The figures and the invariant counts (see the module docstring)."""
    figures: dict[str, int] = {}
    bad: dict[str, int] = {}
    async with Database.open(h.dsn, migrate=False) as db:
        row = await db.pool.fetchrow(DUE, TENANT, float(h.args.every), cutoff)
        figures["occurrences due (interval + cron, computed)"] = row["due"]
        figures["due slots decided as an occurrence (one row each)"] = row["occurrences"]
        figures["due slots decided within a recorded range (schedule_events)"] = row["ranged"]
        for name, sql in FIGURES.items():
            figures[name] = await db.pool.fetchval(sql, *([cutoff] if "$1" in sql else []))
        bad["due occurrences with no decision (lost)"] = row["lost"]
        for name, sql in INVARIANTS.items():
            bad[name] = await db.pool.fetchval(sql)
        runs = {(r["task_id"], r["attempt"]): r["lease_token"]
                for r in await db.pool.fetch("SELECT task_id, attempt, lease_token FROM runs")}
        outcomes = await db.pool.fetch("SELECT status, count(*) AS n FROM tasks GROUP BY 1 ORDER BY 1")
        decisions = await db.pool.fetch(
            "SELECT decision, count(*) AS n FROM occurrences GROUP BY 1 ORDER BY 1")
        events = await db.pool.fetch(
            # slots per kind; clock_uncertain marks an episode, not slots: count its rows
            "SELECT kind, sum(CASE WHEN kind = 'clock_uncertain' THEN 1 ELSE count END) AS n "
            "FROM schedule_events GROUP BY 1 ORDER BY 1")
        run_outcomes = await db.pool.fetch(
            "SELECT outcome, count(*) AS n FROM runs GROUP BY 1 ORDER BY 1")
    executions = [line.split() for line in _lines(h.work / "executions")]
    keyed = collections.Counter((int(t), int(a)) for t, a, *_ in executions)
    figures["agent executions"] = len(executions)
    bad["agent executions without a recorded attempt"] = sum(
        1 for t, a, tok, *_ in executions
        if (int(t), int(a)) not in runs or (tok != "None" and int(tok) != runs[(int(t), int(a))]))
    bad["attempts executed more than once"] = sum(1 for n in keyed.values() if n > 1)
    effects = collections.Counter(_lines(h.work / "effects"))
    figures["effects applied (provider's record)"] = sum(effects.values())
    bad["effects applied twice (provider's record)"] = sum(1 for n in effects.values() if n > 1)
    r = h.receiver
    ok = [rec for rec in r.seen.values() if rec.answered_ok]
    figures["webhook-ids processed by the receiver"] = r.processed
    figures["webhook requests (all answers)"] = sum(rec.requests for rec in r.seen.values())
    figures["webhook-ids re-sent after a 200 (deduplicated by the receiver)"] = sum(
        1 for rec in ok if rec.answered_ok > 1)
    bad["webhook-ids processed twice by the receiver"] = r.processed - len({id(x) for x in ok})
    per_task = collections.Counter(
        json.dumps([rec.payload["data"].get(k) for k in ("tenant_id", "task_id")])
        for rec in ok if rec.payload)
    bad["reports notified under two webhook-ids"] = sum(1 for n in per_task.values() if n > 1)
    bad["signatures rejected by the receiver"] = r.rejected
    bad["supervisor processes that exited on their own"] = len(h.crashes)
    figures["_tasks"] = {x["status"]: x["n"] for x in outcomes}  # type: ignore[assignment]
    figures["_decisions"] = {x["decision"]: x["n"] for x in decisions}  # type: ignore[assignment]
    figures["_schedule_events"] = {x["kind"]: x["n"] for x in events}  # type: ignore[assignment]
    figures["_runs"] = {x["outcome"]: x["n"] for x in run_outcomes}  # type: ignore[assignment]
    return figures, bad


def print_counts(figures: dict[str, int], bad: dict[str, int]) -> None:
    """Print what :func:`measure` counted: the status breakdowns (``_decisions``,
    ``_schedule_events``, ``_tasks``, ``_runs``, removed from ``figures``), the other
    figures, then each invariant (each must be 0; a violated one is marked)."""
    for name in ("_decisions", "_schedule_events", "_tasks", "_runs"):
        print(f"{name[1:]}: {figures.pop(name)}")
    print("\nfigures:")
    for name, value in figures.items():
        print(f"  {value:>8}  {name}")
    print("invariants (each must be 0):")
    for name, value in bad.items():
        print(f"  {value:>8}  {name}{'  <-- VIOLATED' if value else ''}")


def _lines(path: Path) -> list[str]:
    return path.read_text().split("\n")[:-1] if path.exists() else []


async def run(server: str, args: argparse.Namespace, embedded: Path | None) -> int:
    """Set up, inject faults for ``--seconds``, settle, drain, measure, print."""
    args.server = server
    args.database = f"bench_faults_{secrets.token_hex(6)}"
    admin = await asyncpg.connect(server)
    await admin.execute(f'CREATE DATABASE "{args.database}"')
    dsn = with_database(server, args.database)
    work = Path(tempfile.mkdtemp(prefix="wk-faults-"))
    (work / "home").mkdir()
    rng = random.Random(args.seed)
    receiver = Receiver((), fail_share=args.fail_share, seed=args.seed, timeout_seconds=0.5)
    began = time.monotonic()
    try:
        async with serve(receiver) as url, PgProxy(dsn) as proxy:
            # one key for the run: the supervisors inherit it through the environment
            os.environ[SETTING] = os.environ.get(SETTING) or Keyring.generate()
            keyring = Keyring.load(os.environ[SETTING], work)
            async with Database.open(dsn, keyring=keyring) as db:  # migrates
                receiver.secrets = (await define(db, args, url),)
            h = Harness(args, dsn, work, proxy, receiver, embedded)
            for i in range(args.supervisors):
                h.procs.append(Proc(i, proxy.dsn if i < args.behind_proxy else dsn,
                                    work / f"offset-{i}"))
                h.procs[-1].offset_file.write_text("0")
                h.start(h.procs[-1])
            outage = ("embedded server stopped and started" if embedded is not None
                      else "every backend of the bench database terminated")
            print(f"database {args.database}; {args.supervisors} supervisors "
                  f"({args.behind_proxy} behind the lost-ACK proxy), lease {args.lease:g} s; "
                  f"{args.intervals} interval (every {args.every:g} s), {args.crons} cron, "
                  f"{args.conditions} condition definitions; outage = {outage}; "
                  f"seed {args.seed}", flush=True)
            deadline = time.monotonic() + args.seconds
            while (left := deadline - time.monotonic()) > 0:
                await asyncio.sleep(min(left, rng.expovariate(1 / args.fault_every)))
                if time.monotonic() < deadline:
                    what = await h.inject(rng)
                    if args.verbose:
                        print(f"  {time.monotonic() - began:6.1f}s {what}", flush=True)
            async with Database.open(dsn, migrate=False) as db:
                cutoff = await db.pool.fetchval("SELECT now()")
            await h.settle()
            settle = args.lease + 10.0
            await asyncio.sleep(settle)
            await asyncio.to_thread(h.drain)
            await asyncio.sleep(1.0)  # the receiver answers what was in flight
            figures, bad = await measure(h, cutoff)
            stats = proxy.statistics()
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{args.database}" WITH (FORCE)')
        await admin.close()
    print(f"\nfaults injected ({args.seconds:g} s, then {settle:g} s settle): "
          + ", ".join(f"{k} {v}" for k, v in sorted(h.faults.items()))
          + f"; proxy: {stats.connections} connections, {stats.commits} COMMITs, "
            f"{stats.faults} acknowledgements dropped")
    if h.receiver.rejected:
        print(f"receiver's last rejection: {h.receiver.last_rejection}")
    print(f"supervisor starts: {sum(p.starts for p in h.procs)}; exited on their own: "
          f"{', '.join(h.crashes) or 'none'}; logs in {work}")
    print_counts(figures, bad)
    print(f"wall {time.monotonic() - began:.1f} s")
    violated = any(bad.values())
    print("RESULT: " + ("VIOLATED" if violated else "all invariants hold"))
    return 1 if violated else 0


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    add = parser.add_argument
    add("--seconds", type=float, default=120.0, help="how long faults are injected")
    add("--seed", type=int, default=1)
    add("--dsn", default=os.environ.get("DATABASE_URL") or None,
        help="server DSN (default DATABASE_URL, else an embedded server)")
    add("--supervisors", type=int, default=3)
    add("--behind-proxy", type=int, default=1, help="supervisors reaching PostgreSQL via the proxy")
    add("--workers", type=int, default=3, help="worker loops per supervisor")
    add("--lease", type=float, default=5.0, help="lease seconds")
    add("--intervals", type=int, default=200)
    add("--every", type=float, default=1.0, help="seconds between an interval's occurrences")
    add("--crons", type=int, default=20)
    add("--conditions", type=int, default=10)
    add("--fault-every", type=float, default=4.0, help="mean seconds between faults")
    add("--fail-share", type=float, default=0.2, help="share of webhook requests failed")
    add("--faults", type=lambda v: tuple(v.split(",")), default=KINDS,
        help="comma-separated fault kinds to draw from (default all: " + ",".join(KINDS) + ")")
    add("--verbose", action="store_true", help="print each fault")
    args = parser.parse_args(argv)
    if set(args.faults) - set(KINDS):
        parser.error(f"--faults: unknown kind(s) {sorted(set(args.faults) - set(KINDS))}")
    if args.supervisors < 1 or args.seconds <= 0 or args.every < 1:
        parser.error("--supervisors >= 1, --seconds > 0 and --every >= 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Run the harness on the given server or on an embedded one; the exit code."""
    args = parse_args(argv)
    if args.dsn:
        return asyncio.run(run(args.dsn, args, None))
    with tempfile.TemporaryDirectory(prefix="wk-faults-pg-") as home, \
            _embedded.embedded_postgres(Path(home)) as dsn:
        return asyncio.run(run(dsn, args, Path(home)))


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
