"""Throughput and latency of the HTTP API, and what depth costs a history page.

Why: issue "The integration surface" asks for requests/s and p50/p99 latency for a
proposal and for a history page under 50 concurrent clients, and for a history page at
depth 0 and at depth 1,000,000 tasks to cost about the same (keyset pagination: within
2x). Everything is measured in ONE run against ONE server (these machines are noisy:
never compare across runs).

What is measured:

1. ``watchkeeper serve --no-supervisor`` (a real uvicorn, a subprocess) on a fresh
   database. 50 clients (httpx, one connection each) send requests back to back for
   ``--seconds`` each: (a) proposals (``POST /v1/definitions/{id}/revisions`` with an
   agent key, a new id each time), (b) history pages (``GET /v1/history?limit=50``
   as the owner, over the definitions (a) made, each with a manual occurrence and its
   task). Reported: requests/s, p50 and p99 latency, and non-2xx answers (there must
   be none).
2. Depth: 1,000,000 occurrences and tasks of one tenant are bulk-inserted (set-based
   SQL in this script, outside any timer; the rows are what admission writes: an
   occurrence per slot, a task per occurrence). Then the first page (depth 0) and the
   page whose cursor points ~1,000,000 rows back (the oldest page) are each fetched
   ``--repeat`` times through the API; reported: median of each and their ratio.

Usage::

    .venv/bin/python bench/api.py [--seconds 10] [--depth 1000000] [--dsn DSN]

The DSN defaults to ``DATABASE_URL``; without either, an embedded PostgreSQL is started
in a temporary home. The database created is ``bench_api_<hex>`` and is dropped
``WITH (FORCE)`` at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import secrets
import statistics
import sys
import tempfile
import time
from contextlib import asynccontextmanager, contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from watchkeeper.runtime.engine._clock import SystemClock  # noqa: E402
from watchkeeper.runtime.store._db import Database, server_settings  # noqa: E402
from watchkeeper.runtime.store._embedded import embedded_postgres  # noqa: E402
from watchkeeper.runtime.usecases import (  # noqa: E402
    add_user,
    create_key,
    encode_cursor,  # noqa: E402
)

CLIENTS = 50
SPEC = {"version": 1, "trigger": {"type": "cron", "expr": "0 20 * * 3", "zone": "Europe/Paris"},
        "title": "bench"}


@contextmanager
def server_dsn(given: str | None) -> Any:
    """A reachable server: the DSN given, DATABASE_URL, or an embedded one."""
    dsn = given or os.environ.get("DATABASE_URL")
    if dsn:
        yield dsn
        return
    with tempfile.TemporaryDirectory(prefix="wk-bench-") as home, embedded_postgres(Path(home)) as url:
        yield url


def with_database(dsn: str, name: str) -> str:
    parts = urlsplit(dsn)
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))


@asynccontextmanager
async def scratch_database(dsn: str) -> Any:
    name = f"bench_api_{secrets.token_hex(6)}"
    admin = await asyncpg.connect(dsn)
    await admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield with_database(dsn, name)
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


@asynccontextmanager
async def serve(dsn: str, home: Path) -> Any:
    """``watchkeeper serve --no-supervisor --port 0``; yields its base URL."""
    env = {**os.environ, "DATABASE_URL": dsn, "WATCHKEEPER_HOME": str(home)}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "watchkeeper", "serve", "--no-supervisor", "--port", "0",
        env=env, stderr=asyncio.subprocess.PIPE)
    assert process.stderr is not None
    seen = b""
    while (found := re.search(rb"serving (http://127\.0\.0\.1:\d+)", seen)) is None:
        chunk = await process.stderr.read(1024)
        if not chunk:
            raise RuntimeError(f"serve exited: {seen.decode()}")
        seen += chunk
    try:
        yield found.group(1).decode()
    finally:
        process.terminate()
        await process.wait()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def load(url: str, seconds: float, request: Any) -> dict[str, Any]:
    """``CLIENTS`` clients calling ``request(client, n)`` back to back for ``seconds``."""
    latencies: list[float] = []
    failures: list[int] = []
    deadline = time.perf_counter() + seconds

    async def client(index: int) -> None:
        async with httpx.AsyncClient(base_url=url, timeout=60,
                                     limits=httpx.Limits(max_connections=1)) as http:
            n = 0
            while time.perf_counter() < deadline:
                started = time.perf_counter()
                answer = await request(http, index, n)
                latencies.append(time.perf_counter() - started)
                if answer.status_code >= 300:
                    failures.append(answer.status_code)
                n += 1

    began = time.perf_counter()
    await asyncio.gather(*(client(i) for i in range(CLIENTS)))
    took = time.perf_counter() - began
    return {"requests": len(latencies), "per_second": len(latencies) / took,
            "p50_ms": percentile(latencies, 0.5) * 1000, "p99_ms": percentile(latencies, 0.99) * 1000,
            "failures": len(failures), "statuses": sorted(set(failures))}


async def deep_definition(db: Database, token: str) -> None:
    """The confirmed definition 'deep' of the token's user, through the use cases."""
    from watchkeeper.runtime.usecases import authenticate, confirm, propose
    from watchkeeper.triggers import parse_spec

    me = await authenticate(db, token)
    made = await propose(db, SystemClock(), tenant_id=me.tenant_id, definition_id="deep",
                         owner_user_id=me.user_id, spec=parse_spec(SPEC), proposed_by="bench")
    await confirm(db, SystemClock(), me, definition_id="deep", revision=made.revision,
                  spec_hash=made.spec_hash)


async def bulk_history(dsn: str, schema: str, tenant: str, owner: str, rows: int) -> None:
    """``rows`` occurrences and tasks of ``tenant`` under its confirmed definition 'deep',
    one slot a minute going back from now (what admission writes for each)."""
    conn = await asyncpg.connect(dsn, server_settings=server_settings(schema))
    try:
        await conn.execute("""
            INSERT INTO occurrences (tenant_id, definition_id, binding_id, slot, kind,
                definition_tenant_id, revision, scheduled_for, not_before, expires_at, zone,
                local_wall, tzdata_version, decision, reason, decided_at, decided_by)
            SELECT $1, 'deep', 'owner', to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
                   'scheduled', $1, 1, at, at, at + interval '10 minutes', 'UTC',
                   at AT TIME ZONE 'UTC', '2026a', 'admitted', 'bench', at, 'bench'
            FROM (SELECT now() - make_interval(mins => n) AS at
                  FROM generate_series(1, $2) AS n) s""", tenant, rows)
        await conn.execute("""
            INSERT INTO tasks (tenant_id, definition_tenant_id, definition_id, binding_id, slot,
                kind, revision, owner_user_id, agent, status, late_policy, scheduled_for,
                not_before, expires_at, deadline_seconds, max_attempts, admitted_at,
                finished_at, attempts)
            SELECT tenant_id, tenant_id, definition_id, binding_id, slot, kind, 1, $2, 'digest',
                   'completed', 'skip_expired', scheduled_for, not_before, expires_at, 600, 3,
                   scheduled_for, scheduled_for, 1
            FROM occurrences WHERE tenant_id = $1 AND definition_id = 'deep'""", tenant, owner)
        await conn.execute("ANALYZE")
    finally:
        await conn.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--depth", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--dsn")
    args = parser.parse_args()
    clock = SystemClock()
    with server_dsn(args.dsn) as server, tempfile.TemporaryDirectory() as home:
        async with scratch_database(server) as dsn, Database.open(dsn) as db:
            alice = await add_user(db, clock, "acme", "alice")
            agent = (await create_key(db, clock, "agent", tenant_id="acme", name="b")).token
            schema = db.schema
            print(f"cpu cores {os.cpu_count()}, {CLIENTS} clients, {args.seconds:g} s per load")
            async with serve(dsn, Path(home)) as url:
                async def propose(http: httpx.AsyncClient, index: int, n: int) -> httpx.Response:
                    return await http.post(f"/v1/definitions/p{index}-{n}/revisions",
                                           json={"spec": SPEC, "owner": "alice"},
                                           headers={"Authorization": f"Bearer {agent}"})

                proposals = await load(url, args.seconds, propose)
                print(f"propose:      {proposals['per_second']:8.1f} req/s   p50 "
                      f"{proposals['p50_ms']:6.1f} ms   p99 {proposals['p99_ms']:6.1f} ms   "
                      f"({proposals['requests']} requests, {proposals['failures']} not 2xx "
                      f"{proposals['statuses']})")
                await deep_definition(db, alice)
                await bulk_history(dsn, schema, "acme", "alice", 2000)

                async def page(http: httpx.AsyncClient, index: int, n: int) -> httpx.Response:
                    return await http.get("/v1/history", params={"limit": 50},
                                          headers={"Authorization": f"Bearer {alice}"})

                pages = await load(url, args.seconds, page)
                print(f"history page: {pages['per_second']:8.1f} req/s   p50 "
                      f"{pages['p50_ms']:6.1f} ms   p99 {pages['p99_ms']:6.1f} ms   "
                      f"({pages['requests']} requests, {pages['failures']} not 2xx "
                      f"{pages['statuses']})")
                dana = await add_user(db, clock, "deep", "dana")
                await deep_definition(db, dana)
                began = time.perf_counter()
                await bulk_history(dsn, schema, "deep", "dana", args.depth)
                print(f"inserted {args.depth} occurrences and tasks of tenant deep in "
                      f"{time.perf_counter() - began:.1f} s (not timed below)")
                await depth(url, dana, args.depth, args.repeat)


async def depth(url: str, token: str, rows: int, repeat: int) -> None:
    """Median time of the first page and of the oldest page (its cursor found by
    paging with the newest slot of the oldest page, built from the known grid)."""
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=url, timeout=120, headers=headers) as http:
        first = await http.get("/v1/history", params={"limit": 50})
        first.raise_for_status()
        # the cursor of the page that ends 60 rows before the oldest, made the way the API
        # makes its cursors (the slots lie on a one-minute grid back from the newest)
        items = first.json()["items"]
        assert len(items) == 50, first.text
        newest = datetime.fromisoformat(items[0]["scheduled_for"])
        deep_at = newest - timedelta(minutes=rows - 60)
        slot = deep_at.strftime("%Y-%m-%dT%H:%M:%SZ")
        cursor = encode_cursor((deep_at, "deep", "owner", slot, "scheduled"))
        timings: dict[str, list[float]] = {"depth 0": [], f"depth {rows - 60}": []}
        for _ in range(repeat):
            for label, params in (("depth 0", {"limit": 50}),
                                  (f"depth {rows - 60}", {"limit": 50, "cursor": cursor})):
                started = time.perf_counter()
                answer = await http.get("/v1/history", params=params)
                timings[label].append(time.perf_counter() - started)
                answer.raise_for_status()
                assert len(answer.json()["items"]) == 50, answer.text
        medians = {label: statistics.median(values) * 1000 for label, values in timings.items()}
        (shallow, deep) = medians.values()
        for label, value in medians.items():
            print(f"history page at {label:>13}: median {value:7.1f} ms over {repeat}")
        print(f"deep / shallow: {deep / shallow:.2f} (target: within 2x)")


if __name__ == "__main__":
    asyncio.run(main())
