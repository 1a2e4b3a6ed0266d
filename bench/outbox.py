"""Outbox throughput: deliveries per second through the dispatcher, against the same
local receiver hit directly by an httpx loop in the same run.

Why: issue 3 asks that the outbox cost little over the HTTP it has to do anyway.
Target: the dispatcher's rate >= 50% of the direct rate. All figures come from ONE run
against ONE server (these machines are noisy: never compare across runs).

Set-up, outside every timer:

* The receiver is ``outbox.Receiver`` (Standard Webhooks verification, dedup by
  webhook-id) served by uvicorn on 127.0.0.1 in its own OS process, wrapped with
  ``GET /stats`` and ``POST /reset`` for this script. It never fails a request here.
* One template database is seeded through the public path: an owner user, a webhook
  endpoint (``add_endpoint``), a confirmed definition with one webhook delivery, N
  manual triggers, and a ``Worker`` that runs the built-in digest agent for each and
  commits N reports, i.e. N pending deliveries. Every measured phase runs on its own
  copy (``CREATE DATABASE ... TEMPLATE``) so all start from the same N pending rows.

Phases, each repeated ``--repeats`` times, in rotation (direct x1, direct x2, 1, 2, ...):

* direct x1 / direct x2: one (or two) processes, each with one ``httpx.AsyncClient``,
  N POSTs in all (N/2 each for two) from 8 sender tasks per process, each body the
  size and shape of a real notice, signed with ``outbox.signed_headers`` and sent with
  ``client.stream`` without reading a success's body (all as the channel does). This
  is the physical
  reference: what the receiver and the HTTP stack can take on this machine.
* 1 dispatcher / 2 dispatchers: one or two OS processes, each with its own
  ``Database.open`` pool, running the supervisor's ``Dispatcher`` (limit 50,
  concurrency 8 as in ``Supervisor``; the real ``PgDeliveryStore`` and
  ``WebhookChannel``) in a loop until a pass claims nothing. Each opens its pool and
  waits on a shared "go"; the wall time runs from "go" to the last process done.

After each phase the receiver's counters are checked: N webhook-ids processed once,
no rejected signature; after a dispatcher phase every row is ``delivered`` with
attempts = 1. Reported: wall seconds, deliveries/s, CPU seconds of the receiver, of
the sending processes and of the PostgreSQL backends serving the copy, and the ratio
of each dispatcher median to the direct median with as many sending processes (and
to the single direct loop, the reference the issue names).

Usage::

    .venv/bin/python bench/outbox.py [--count 2000] [--repeats 3] [--dsn DSN]

The DSN defaults to ``DATABASE_URL``; without either, an embedded PostgreSQL is
started in a temporary home. Databases are ``bench_<uuid>_*`` and dropped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import importlib.util
import json
import multiprocessing as mp
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import httpx
import psutil

# Run as ``python bench/outbox.py``, this file's directory is first on sys.path and the
# script would shadow the ``outbox`` package: drop it, and load the sibling by path.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
_spec = importlib.util.spec_from_file_location("wk_bench_admission", _HERE / "admission.py")
assert _spec is not None and _spec.loader is not None
_admission = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = _admission  # dataclasses look their module up there
_spec.loader.exec_module(_admission)
Databases, ServerCpu, spent = _admission.Databases, _admission.ServerCpu, _admission.spent

from watchkeeper.outbox import (  # noqa: E402
    Dispatcher,
    Receiver,
    WebhookChannel,
    serve,
    signed_headers,
    webhook_body,
)
from watchkeeper.runtime.engine._agents import AgentCatalog  # noqa: E402
from watchkeeper.runtime.engine._clock import FakeClock, SystemClock  # noqa: E402
from watchkeeper.runtime.engine._delivery_store import PgDeliveryStore  # noqa: E402
from watchkeeper.runtime.engine._worker import Worker  # noqa: E402
from watchkeeper.runtime.store._db import Database  # noqa: E402
from watchkeeper.runtime.usecases import (  # noqa: E402
    add_endpoint,  # noqa: E402
    add_user,
    authenticate,
    confirm,
    propose,
    trigger_now,  # noqa: E402
)
from watchkeeper.triggers import parse_spec  # noqa: E402

TENANT = "bench"
LIMIT, CONCURRENCY = 50, 8
"""The supervisor's dispatcher settings (``Dispatcher`` defaults)."""


# ------------------------------------------------------------------ the receiver


class Instrumented:
    """``Receiver`` plus ``GET /stats`` and ``POST /reset`` (bench only)."""

    def __init__(self, receiver: Receiver) -> None:
        self.receiver = receiver

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        path = scope.get("path")
        if scope["type"] == "http" and path in ("/stats", "/reset"):
            if path == "/reset":
                self.receiver.seen.clear()
                self.receiver.rejected = 0
            r = self.receiver
            body = json.dumps({
                "processed": r.processed, "rejected": r.rejected,
                "requests": sum(x.requests for x in r.seen.values()),
                "duplicates": sum(x.answered_ok - 1 for x in r.seen.values() if x.answered_ok),
            }).encode()
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"application/json")]})
            await send({"type": "http.response.body", "body": body})
            return
        await self.receiver(scope, receive, send)


def receiver_process(secret: str, url_out: Any, stop: Any) -> None:
    """Serve the instrumented receiver until ``stop`` is set; send its URL first."""
    async def main() -> None:
        async with serve(Instrumented(Receiver((secret,)))) as url:
            url_out.send(url)
            await anyio.to_thread.run_sync(stop.wait)
    anyio.run(main)


# ------------------------------------------------------------------ seeding


async def seed(dsn: str, count: int, url: str, secret_holder: list[str]) -> None:
    """N committed reports of one definition, each with one pending webhook delivery."""
    clock = FakeClock(datetime.now(UTC).replace(microsecond=0) - timedelta(hours=2))
    async with Database.open(dsn) as db:
        owner = await authenticate(
            db, await add_user(db, clock, TENANT, "owner", zone="Europe/Paris"))
        secret_holder.append(await add_endpoint(db, clock, TENANT, "hook", url))
        spec = parse_spec({"version": 1, "trigger": {"type": "interval", "every": 86400},
                           "overrun": "allow",
                           "delivery": [{"channel": "webhook", "destination": "hook"}]})
        proposal = await propose(db, clock, tenant_id=TENANT, definition_id="notify",
                                 owner_user_id=owner.user_id, spec=spec,
                                 proposed_by="agent:bench")
        await confirm(db, clock, owner, definition_id="notify", revision=proposal.revision,
                      spec_hash=proposal.spec_hash)
        for _ in range(count):
            await trigger_now(db, clock, owner, TENANT, "notify")
            clock.advance(0.001)
        worker = Worker(db, clock, AgentCatalog(), worker_id="seed",
                        artifact_root=Path(tempfile.mkdtemp(prefix="wkbench-artifacts-")))
        ran = 0
        while await worker.run_once():
            ran += 1
            if ran % 250 == 0:  # what autovacuum would do on a live server; a table
                await db.pool.execute("ANALYZE tasks, reports")  # born empty plans badly
        pending = await db.pool.fetchval(
            "SELECT count(*) FROM deliveries WHERE status = 'pending' AND channel = 'webhook'")
        assert pending == count, f"seeded {pending} pending deliveries, wanted {count}"


# ------------------------------------------------------------------ senders


def dispatcher_process(dsn: str, name: str, ready: Any, go: Any, release: Any,
                       out: Any) -> None:
    """Run the supervisor's dispatcher until a pass claims nothing; report time and count,
    then hold the pool open until ``release`` (so its backends' CPU can be read)."""
    async def main() -> None:
        clock = SystemClock()
        async with Database.open(dsn, migrate=False) as db:
            store = PgDeliveryStore(db, clock)
            webhook = WebhookChannel(store.endpoint, now=clock.now)
            dispatcher = Dispatcher(store, {"webhook": webhook}, now=clock.now, owner=name,
                                    concurrency=CONCURRENCY)
            await db.pool.fetchval("SELECT 1")
            ready.set()
            await anyio.to_thread.run_sync(go.wait)
            started, delivered = time.perf_counter(), 0
            while (stats := await dispatcher.dispatch_once(limit=LIMIT)).claimed:
                delivered += stats.delivered
            out.send((time.perf_counter() - started, delivered))
            await webhook.aclose()
            await anyio.to_thread.run_sync(release.wait)

    anyio.run(main)


def direct_process(url: str, secret: str, count: int, body: str, ready: Any, go: Any,
                   release: Any, out: Any) -> None:
    """POST ``count`` signed notices from CONCURRENCY sender tasks, each request sent
    the way the webhook channel sends it (``client.stream``, a success's body unread);
    report time and count."""
    async def main() -> None:
        ok = 0
        async with httpx.AsyncClient(timeout=10.0) as client:
            ids = [str(uuid.uuid4()) for _ in range(count)]
            ready.set()
            await anyio.to_thread.run_sync(go.wait)
            started = time.perf_counter()

            async def sender(mine: list[str]) -> None:
                nonlocal ok
                for delivery_id in mine:
                    text = body.replace("DELIVERY", delivery_id)
                    headers = signed_headers(delivery_id, text, (secret,), datetime.now(UTC))
                    async with client.stream("POST", url, content=text.encode(),
                                             headers=headers) as response:
                        ok += response.status_code == 200

            async with anyio.create_task_group() as tg:
                for index in range(CONCURRENCY):
                    tg.start_soon(sender, ids[index::CONCURRENCY])
            out.send((time.perf_counter() - started, ok))
        await anyio.to_thread.run_sync(release.wait)

    anyio.run(main)


# ------------------------------------------------------------------ measuring


@dataclass
class Sample:
    """One measured phase."""

    phase: str
    wall: float
    delivered: int
    cpu_senders: float
    cpu_receiver: float
    cpu_postgres: float

    @property
    def rate(self) -> float:
        """Deliveries per second."""
        return self.delivered / self.wall


def cpu_of(pids: Sequence[int]) -> float:
    """User + system CPU seconds of the live processes among ``pids``."""
    total = 0.0
    for pid in pids:
        try:
            times = psutil.Process(pid).cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
    return total


def run_senders(targets: list[tuple[Any, tuple[Any, ...]]], receiver_pid: int,
                server: ServerCpu, dsn: str | None) -> tuple[float, int, float, float, float]:
    """Start the sender processes, wait until all are ready, say go, collect."""
    ctx = mp.get_context("spawn")
    go, release = ctx.Event(), ctx.Event()
    procs, pipes, readies = [], [], []
    for target, args in targets:
        ready = ctx.Event()
        parent, child = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=target, args=(*args, ready, go, release, child))
        proc.start()
        procs.append(proc)
        pipes.append(parent)
        readies.append(ready)
    for ready in readies:
        if not ready.wait(120):
            raise RuntimeError("a sender process did not get ready")
    senders = [p.pid for p in procs if p.pid is not None]
    pg_before = server.sample(dsn) if dsn else {}
    before = (cpu_of(senders), cpu_of([receiver_pid]))
    go.set()
    results = [pipe.recv() for pipe in pipes]
    after = (cpu_of(senders), cpu_of([receiver_pid]))
    pg_after = server.sample(dsn) if dsn else {}
    release.set()
    for proc in procs:
        proc.join()
    wall = max(elapsed for elapsed, _ in results)
    delivered = sum(n for _, n in results)
    return (wall, delivered, after[0] - before[0], after[1] - before[1],
            spent(pg_before, pg_after) or 0.0)


async def check(url: str, count: int, dsn: str | None) -> None:
    """The receiver processed every notice once; every row is delivered at attempt 1."""
    async with httpx.AsyncClient() as client:
        stats = (await client.get(url + "stats")).json()
        await client.post(url + "reset")
    assert stats["processed"] == count and stats["rejected"] == 0, stats
    assert stats["duplicates"] == 0 and stats["requests"] == count, stats
    if dsn is not None:
        async with Database.open(dsn, migrate=False) as db:
            rows = await db.pool.fetch(
                "SELECT status, attempts, count(*) AS n FROM deliveries "
                "WHERE channel = 'webhook' GROUP BY 1, 2")
        assert [(r["status"], r["attempts"], r["n"]) for r in rows] == [("delivered", 1, count)], \
            [dict(r) for r in rows]


async def notice_body(dsn: str) -> str:
    """A real notice body (from the seeded store) with its id replaced by a marker."""
    async with Database.open(dsn, migrate=False) as db:
        store = PgDeliveryStore(db, SystemClock())
        notices = await store.claim_due(datetime.now(UTC), 1, "probe", 0.0)
    (notice,) = notices
    return webhook_body(dataclasses.replace(notice, delivery_id="DELIVERY"))


async def bench(server: str, args: argparse.Namespace) -> None:
    """Seed, then measure the phases in rotation and print the figures."""
    databases = Databases(server)
    ctx = mp.get_context("spawn")
    stop = ctx.Event()
    url_in, url_out = ctx.Pipe(duplex=False)
    secret: list[str] = []
    # The secret is made by add_endpoint in the template; the receiver needs it first,
    # so the template is seeded against a placeholder URL, then the URL is updated.
    template = await databases.create("template")
    samples: list[Sample] = []
    receiver: Any = None
    try:
        started = time.perf_counter()
        await seed(template, args.count, "http://127.0.0.1:9/", secret)
        print(f"seeded {args.count} reports with pending webhook deliveries in "
              f"{time.perf_counter() - started:.1f} s")
        receiver = ctx.Process(target=receiver_process, args=(secret[0], url_out, stop))
        receiver.start()
        url = url_in.recv()
        async with Database.open(template, migrate=False) as db:
            await db.pool.execute("UPDATE webhook_endpoints SET url = $1", url)
        body = await notice_body(await databases.create("probe", template))
        server_cpu = await ServerCpu.of(template)
        print(f"receiver {url} (pid {receiver.pid}); notice body {len(body)} bytes; "
              f"dispatcher limit {LIMIT}, concurrency {CONCURRENCY}; direct concurrency "
              f"{CONCURRENCY}")
        for rep in range(args.repeats):
            for senders in (1, 2):
                share = [args.count // senders + (i < args.count % senders)
                         for i in range(senders)]
                wall, ok, cpu_s, cpu_r, cpu_pg = run_senders(
                    [(direct_process, (url, secret[0], n, body)) for n in share],
                    receiver.pid, server_cpu, None)
                await check(url, args.count, None)
                samples.append(Sample(f"direct x{senders}", wall, ok, cpu_s, cpu_r, cpu_pg))
            for dispatchers in (1, 2):
                copy = await databases.create(f"d{dispatchers}_{rep}", template)
                wall, ok, cpu_s, cpu_r, cpu_pg = run_senders(
                    [(dispatcher_process, (copy, f"dispatcher-{i}"))
                     for i in range(dispatchers)], receiver.pid, server_cpu, copy)
                await check(url, args.count, copy)
                samples.append(Sample(f"{dispatchers} dispatcher{'s' * (dispatchers > 1)}",
                                      wall, ok, cpu_s, cpu_r, cpu_pg))
                await databases.drop(copy)
    finally:
        stop.set()
        if receiver is not None:
            receiver.join(10)
        await databases.drop_all()
    report(samples, args)


def report(samples: list[Sample], args: argparse.Namespace) -> None:
    """Print each sample and the medians with their ratio to the direct rate."""
    print(f"\n{'phase':<14} {'wall s':>7} {'deliv/s':>8} {'cpu send':>9} {'cpu recv':>9} "
          f"{'cpu pg':>7}")
    for s in samples:
        print(f"{s.phase:<14} {s.wall:7.2f} {s.rate:8.0f} {s.cpu_senders:9.2f} "
              f"{s.cpu_receiver:9.2f} {s.cpu_postgres:7.2f}")
    def median(phase: str) -> float:
        return statistics.median(s.rate for s in samples if s.phase == phase)

    print(f"\nmedians over {args.repeats} repeat(s) of {args.count} deliveries:")
    for phase, reference in (("direct x1", "direct x1"), ("direct x2", "direct x2"),
                             ("1 dispatcher", "direct x1"), ("2 dispatchers", "direct x2")):
        rate = median(phase)
        print(f"  {phase:<14} {rate:7.0f} deliveries/s  {rate / median(reference):6.0%} of "
              f"{reference}  {rate / median('direct x1'):6.0%} of direct x1")
    print("target: dispatcher >= 50% of the direct rate (same number of sending processes)")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--count", type=int, default=2000, help="deliveries per phase")
    parser.add_argument("--repeats", type=int, default=3, help="rotations of the phases")
    parser.add_argument("--dsn", default=os.environ.get("DATABASE_URL") or None,
                        help="server DSN (default DATABASE_URL, else an embedded server)")
    args = parser.parse_args(argv)
    if args.count < 1 or args.repeats < 1:
        parser.error("--count and --repeats must be at least 1")
    return args


def main(argv: Sequence[str] | None = None) -> None:
    """Run the bench on the given server or on an embedded one."""
    from watchkeeper.runtime.store._embedded import embedded_postgres

    args = parse_args(argv)
    if args.dsn:
        asyncio.run(bench(args.dsn, args))
        return
    with tempfile.TemporaryDirectory(prefix="wkbench-") as home, \
            embedded_postgres(Path(home)) as dsn:
        asyncio.run(bench(dsn, args))


if __name__ == "__main__":
    main()
