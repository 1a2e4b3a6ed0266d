"""The database goes away while a supervisor ticks, runs and delivers: every backend
terminated (``pg_terminate_backend``), and the embedded PostgreSQL stopped and started
again. No loop dies (the default ``restart_limit`` is none), each reconnects with
backoff, readiness says unreachable meanwhile, and afterwards every slot was admitted
once, run once and delivered once."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import asyncpg
import pytest
from _helpers import confirmed, utc

from watchkeeper.runtime.engine._clock import FakeClock
from watchkeeper.runtime.engine._supervisor import Supervisor, SupervisorConfig
from watchkeeper.runtime.store import _embedded
from watchkeeper.runtime.store._db import Database
from watchkeeper.runtime.usecases import readiness

pytestmark = pytest.mark.anyio

START = utc("2026-06-01T00:00:00Z")
ROUNDS = 4


async def survive(dsn: str, tmp_path: Path, break_: Callable[[], Awaitable[None]],
                  restore: Callable[[], Awaitable[None]], *,
                  down: bool) -> tuple[Supervisor, list[str]]:
    """A 5 min interval delivered to a file; after each slot's notice the database is
    broken, a few seconds pass (the loops fail and back off), it is restored and the
    loops must recover before the next slot. Returns the supervisor and, per outage,
    readiness' database check while it lasted."""
    clock = FakeClock(START)
    checks: list[str] = []
    async with Database.open(dsn) as wk:
        await confirmed(wk, clock, {"trigger": {"type": "interval", "every": 300,
                                                "anchor": "2026-06-01T00:05:00Z"},
                                    "delivery": [{"channel": "file",
                                                  "destination": "notices.jsonl"}]})
        sup = Supervisor(wk, clock, SupervisorConfig(home=tmp_path, skew_budget=None,
                                                     supervisor_id="s", workers=1))
        with anyio.fail_after(120):
            async with anyio.create_task_group() as tg:
                await tg.start(sup.run)
                await sup.wait_idle()
                for done in range(1, ROUNDS + 1):
                    clock.set_wall(START + timedelta(minutes=5 * done))
                    await sup.wait_idle()
                    for _ in range(90):  # a claim whose reply was lost waits for its lease
                        stats = sup.statistics()
                        if stats.completed >= done and stats.deliveries >= done:
                            break
                        clock.advance(1)
                        await sup.wait_idle()
                    assert (stats.completed, stats.deliveries) == (done, done), stats
                    await break_()
                    clock.advance(1)  # every loop meets the outage at its next step
                    if down:  # nothing answers: the loops are down, backing off
                        await sup.wait_until(lambda s: len(s.dead_loops) >= 3)
                        for _ in range(24):  # two minutes down: many more failures than
                            clock.advance(5)  # the old limit of 5 a loop survived
                            await sup.wait_idle()
                        assert max(sup.statistics().restarts.values()) >= 6
                    await sup.wait_idle()
                    checks.append((await readiness(wk, clock, skew_budget=2))
                                  .checks["database"])
                    await restore()
                    for _ in range(40):  # backoff is capped at 30 s
                        if not sup.statistics().dead_loops:
                            break
                        clock.advance(1)
                        await sup.wait_idle()
                    assert not sup.statistics().dead_loops, sup.statistics()
                sup.stop()
    return sup, checks


def assert_each_slot_once(sup: Supervisor, tmp_path: Path, rows: list[asyncpg.Record]) -> None:
    slots = [f"2026-06-01T00:{5 * m:02d}:00Z" for m in range(1, ROUNDS + 1)]
    assert [(r["slot"], r["decision"], r["status"], r["runs"]) for r in rows] == [
        (slot, "admitted", "completed", 1) for slot in slots]
    notices = [json.loads(line)["slot"] for line in
               (tmp_path / "notices" / "acme" / "notices.jsonl").read_text().splitlines()]
    assert notices == slots
    stats = sup.statistics()
    assert stats.restarts and not stats.dead_loops


SLOTS = """SELECT o.slot, o.decision, t.status,
                  (SELECT count(*) FROM runs r WHERE r.task_id = t.task_id) AS runs
           FROM occurrences o JOIN tasks t USING (tenant_id, definition_id, binding_id, slot, kind)
           ORDER BY o.scheduled_for"""


async def test_every_backend_terminated_each_round(db_dsn: str, tmp_path: Path) -> None:
    """pg_terminate_backend on every connection of the supervisor's pool after each
    slot: the loops fail at their next step, back off, reconnect; nothing is lost or
    doubled."""
    terminated: list[int] = []

    async def terminate() -> None:
        admin = await asyncpg.connect(db_dsn)
        try:
            killed = await admin.fetchval(
                "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()")
        finally:
            await admin.close()
        terminated.append(killed)

    async def nothing() -> None:
        return None

    # A backend terminated just as a statement starts on it is a race asyncpg reports
    # from a protocol callback ("unexpected connection_lost() call") to the event loop's
    # handler, which production only logs; the statement itself fails and the loop
    # restarts. Collect those here instead of failing the test; anything else fails.
    loop = asyncio.get_running_loop()
    previous, unexpected = loop.get_exception_handler(), []

    def collect(_: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if "unexpected connection_lost() call" not in str(context.get("exception")):
            unexpected.append(context)

    loop.set_exception_handler(collect)
    try:
        sup, checks = await survive(db_dsn, tmp_path, terminate, nothing, down=False)
    finally:
        loop.set_exception_handler(previous)
    assert unexpected == []
    assert len(terminated) == ROUNDS and all(n >= 1 for n in terminated)
    admin = await asyncpg.connect(db_dsn)
    try:
        await admin.execute("SET search_path TO watchkeeper")
        assert_each_slot_once(sup, tmp_path, await admin.fetch(SLOTS))
    finally:
        await admin.close()
    assert len(checks) == ROUNDS  # (ok or unreachable: it races the reconnection)


async def test_the_embedded_postgresql_restarting_each_round(tmp_path: Path) -> None:
    """The embedded server is stopped after each slot (readiness: unreachable), a few
    seconds pass, it is started again on the same socket; the loops reconnect and every
    slot is still admitted, run and delivered exactly once."""
    with _embedded.embedded_postgres(tmp_path / "h") as dsn:
        layout = _embedded._Layout.of(tmp_path / "h")

        async def stop() -> None:
            running = _embedded._live_postmaster(layout)
            assert running is not None
            await anyio.to_thread.run_sync(_embedded._stop, layout, running)

        async def start() -> None:
            await anyio.to_thread.run_sync(_embedded._start, layout)

        sup, checks = await survive(dsn, tmp_path, stop, start, down=True)
        admin = await asyncpg.connect(dsn)
        try:
            await admin.execute("SET search_path TO watchkeeper")
            assert_each_slot_once(sup, tmp_path, await admin.fetch(SLOTS))
        finally:
            await admin.close()
    assert len(checks) == ROUNDS and all(c.startswith("unreachable") for c in checks), checks


async def test_run_and_serve_started_inside_an_outage_wait_and_then_admit(
        db: Database, proxy: Any, tmp_path: Path) -> None:
    """`watchkeeper run` and `watchkeeper serve`, started while the database is away (the
    proxy refuses every connection for 10 s), do not exit: serve answers /readyz 503
    with 'database: unreachable' meanwhile; once the database is back both migrate,
    sample PostgreSQL's clock, heartbeat and serve (/readyz 200), the slot that fell due
    during the outage is admitted once, and SIGTERM ends both with 0 (issue 18, item 8)."""
    import os
    import signal
    import socket
    import sys
    from datetime import UTC, datetime

    import httpx

    from watchkeeper.runtime.engine._clock import SystemClock

    now = datetime.now(UTC).replace(microsecond=0)
    due = now + timedelta(seconds=5)  # falls due during the outage
    await confirmed(db, SystemClock(), {  # type: ignore[arg-type]
        "trigger": {"type": "at", "at": due.strftime("%Y-%m-%dT%H:%M:%S"), "zone": "UTC"},
        "lateness": {"policy": "skip_expired", "late_grace": 600}})
    await proxy.go_down()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "DATABASE_URL": proxy.dsn, "WATCHKEEPER_HOME": str(tmp_path),
           "WATCHKEEPER_WORKERS": "1"}
    command = [sys.executable, "-m", "watchkeeper"]
    logs = [tmp_path / "run.log", tmp_path / "serve.log"]
    with logs[0].open("wb") as run_log, logs[1].open("wb") as serve_log:
        runner = await anyio.open_process([*command, "run"], env=env, stdout=run_log,
                                          stderr=run_log)
        server = await anyio.open_process([*command, "serve", "--port", str(port)], env=env,
                                          stdout=serve_log, stderr=serve_log)
    url = f"http://127.0.0.1:{port}/readyz"
    try:
        async with httpx.AsyncClient(timeout=5) as client:
            outage: list[tuple[int, str]] = []
            with anyio.fail_after(30):
                while not outage:
                    with contextlib.suppress(httpx.TransportError):
                        answer = await client.get(url)
                        outage.append((answer.status_code, answer.json()["checks"]["database"]))
                    await anyio.sleep(0.2)
            await anyio.sleep(max(0.0, 10 - (datetime.now(UTC) - now).total_seconds()))
            assert runner.returncode is None and server.returncode is None, [
                p.read_text() for p in logs]
            proxy.go_up()
            with anyio.fail_after(60):  # the start's backoff is capped at 30 s
                while True:
                    beats = await db.pool.fetch("SELECT status FROM supervisors")
                    admitted = await db.pool.fetchval("SELECT count(*) FROM tasks")
                    ready = await client.get(url)
                    if len(beats) == 2 and admitted and ready.status_code == 200:
                        break
                    await anyio.sleep(0.5)
        assert outage[0][0] == 503 and outage[0][1].startswith("unreachable"), outage
        rows = await db.pool.fetch("SELECT o.decision, t.status FROM occurrences o JOIN tasks t "
                                   "USING (tenant_id, definition_id, binding_id, slot, kind)")
        assert [r["decision"] for r in rows] == ["admitted"]
        assert {r["status"] for r in beats} <= {"running"}
    finally:
        for process in (runner, server):
            if process.returncode is None:
                process.send_signal(signal.SIGTERM)
        with anyio.fail_after(60):
            codes = [await runner.wait(), await server.wait()]
    assert codes == [0, 0], [p.read_text() for p in logs]
    assert "database unreachable at start" in logs[0].read_text()
