"""The outbox end to end: real PostgreSQL, a real HTTP receiver (uvicorn on 127.0.0.1)
that verifies Standard Webhooks signatures and dedups by webhook-id, injected failures,
preferences, dead letters and redelivery."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, time, timedelta
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from _helpers import TEST_KEYRING, confirmed, owner, utc
from _pgproxy import Fault, PgProxy

from watchkeeper.outbox import (
    DeliveryFailed,
    Dispatcher,
    FileChannel,
    LogChannel,
    Notice,
    Receiver,
    SignatureInvalid,
    WebhookChannel,
    serve,
    signed_headers,
    verify,
)
from watchkeeper.runtime._errors import Conflict, DatabaseUnavailable, NotFound
from watchkeeper.runtime.doors.cli._render import history_lines
from watchkeeper.runtime.engine._agents import AgentCatalog, AgentContext, AgentResult
from watchkeeper.runtime.engine._clock import FakeClock
from watchkeeper.runtime.engine._delivery_store import PgDeliveryStore
from watchkeeper.runtime.engine._worker import Worker
from watchkeeper.runtime.store._db import Database
from watchkeeper.runtime.usecases import (
    HistoryQuery,
    PreferencesInput,
    UserPrincipal,
    add_endpoint,
    get_preferences,
    history,
    parse_quiet,
    propose,
    redeliver,
    remove_endpoint,
    rotate_secret,
    set_preferences,
    trigger_now,
)
from watchkeeper.triggers import Importance, SpecError, parse_spec

pytestmark = pytest.mark.anyio


@dataclass
class World:
    """A tenant with a webhook endpoint served by a live receiver."""

    db: Database
    clock: FakeClock
    receiver: Receiver
    url: str
    secret: str
    runs: list[int]
    tmp_path: Path
    me: UserPrincipal
    clients: list[WebhookChannel] = field(default_factory=list)

    def dispatcher(self, db: Database | None = None, *, owner: str = "d1", **options: Any) -> Dispatcher:
        store = PgDeliveryStore(db or self.db, self.clock)
        webhook = WebhookChannel(store.endpoint, now=self.clock.now, timeout=0.3)
        self.clients.append(webhook)
        channels = {"webhook": webhook,
                    "log": LogChannel(), "file": FileChannel(self.tmp_path / "notices")}
        defaults: dict[str, Any] = {"base": 1.0, "cap": 10.0, "max_attempts": 25}
        return Dispatcher(store, channels, now=self.clock.now, owner=owner,
                          **(defaults | options))

    async def reports(self, count: int, *, importance: Importance = Importance.NORMAL,
                      delivery: list[dict[str, str]] | None = None) -> None:
        """``count`` committed reports of one definition, each with its deliveries."""
        me = self.me
        runs = self.runs

        class Counting:
            async def run(self, ctx: AgentContext) -> AgentResult:
                runs.append(ctx.task_id)
                return AgentResult(f"# report {ctx.occurrence.slot}\n", importance)

        catalog = AgentCatalog()
        catalog.add("counting", Counting())
        await confirmed(self.db, self.clock, {
            "trigger": {"type": "interval", "every": 86400}, "overrun": "allow",
            "agent": {"name": "counting"},
            "delivery": delivery or [{"channel": "webhook", "destination": "hook"}]},
            principal=me)
        for _ in range(count):
            await trigger_now(self.db, self.clock, me, "acme", "d1")
            self.clock.advance(0.001)
        worker = Worker(self.db, self.clock, catalog, worker_id="w", artifact_root=self.tmp_path)
        while await worker.run_once():
            pass

    async def statuses(self) -> dict[str, tuple[str, int]]:
        rows = await self.db.pool.fetch("SELECT delivery_id, status, attempts FROM deliveries")
        return {str(r["delivery_id"]): (r["status"], r["attempts"]) for r in rows}

    async def drain(self, dispatcher: Dispatcher, *, step: float = 11.0, rounds: int = 60) -> None:
        """Dispatch until nothing is pending, moving the fake clock past each backoff."""
        for _ in range(rounds):
            await dispatcher.dispatch_once(limit=500)
            if all(s in ("delivered", "dead", "suppressed") for s, _ in (await self.statuses()).values()):
                return
            self.clock.advance(step)
        raise AssertionError(f"deliveries still pending: {await self.statuses()}")


@pytest.fixture
async def world(db: Database, tmp_path: Path) -> AsyncIterator[World]:
    clock = FakeClock(datetime.now(UTC).replace(microsecond=0))
    receiver = Receiver((), now=clock.now, timeout_seconds=0.6)
    async with serve(receiver) as url:
        me = await owner(db, clock)
        secret = await add_endpoint(db, clock, "acme", "hook", url)
        receiver.secrets = (secret,)
        world = World(db, clock, receiver, url, secret, [], tmp_path, me)
        try:
            yield world
        finally:
            for client in world.clients:
                await client.aclose()


async def test_half_the_requests_fail_and_every_notice_arrives_once(world: World) -> None:
    """200 reports, 50% of requests answered 500, 429 or timed out: every delivery ends
    delivered, the receiver processes each webhook-id once, the agent ran 200 times."""
    world.receiver.fail_share, world.receiver.seed = 0.5, 7
    await world.reports(200)
    await world.drain(world.dispatcher())
    statuses = await world.statuses()
    assert len(statuses) == 200 and {s for s, _ in statuses.values()} == {"delivered"}
    assert world.receiver.processed == 200
    assert set(world.receiver.seen) == set(statuses)
    assert all(r.answered_ok == 1 for r in world.receiver.seen.values())
    assert len(world.runs) == 200 == len(set(world.runs))
    retried = [d for d, (_, attempts) in statuses.items() if attempts > 1]
    assert retried, "with 50% failures some deliveries needed several attempts"
    total_requests = sum(r.requests for r in world.receiver.seen.values())
    logged = await world.db.pool.fetchval("SELECT count(*) FROM delivery_attempts")
    assert logged == sum(a for _, a in statuses.values())
    # an attempt the receiver never saw whole is one the sender gave up on (its 0.3 s
    # timeout, real time, can pass before a busy machine delivers the body): recorded
    # as a timed-out retry, never as delivered
    timed_out = await world.db.pool.fetchval(
        "SELECT count(*) FROM delivery_attempts WHERE outcome = 'retrying' "
        "AND response_status IS NULL")
    assert total_requests <= logged <= total_requests + timed_out
    outcomes = await world.db.pool.fetch(
        "SELECT outcome, count(*) FROM delivery_attempts GROUP BY outcome ORDER BY outcome")
    assert {r["outcome"] for r in outcomes} == {"delivered", "retrying"}
    page = await history(world.db, HistoryQuery(tenant_id="acme", definition_id="d1", limit=500))
    shown = {d["delivery_id"]: (d["status"], d["attempts"])
             for e in page.entries for d in e["deliveries"] or []}
    assert len(page.entries) == 200 and shown == statuses
    line = next(x for x in history_lines(page.entries, ())
                if f"after {max(a for _, a in statuses.values())} attempt(s)" in x)
    assert "webhook delivered" in line


async def test_a_lost_delivered_mark_resends_under_the_same_id(world: World, db_dsn: str) -> None:
    """The receiver answers 200 but recording it fails (connection dropped before COMMIT):
    the next pass resends with the same webhook-id; the receiver shows one notification;
    the row ends delivered with attempts = 2; the agent ran once."""
    await world.reports(1)
    async with PgProxy(db_dsn) as proxy, Database.open(proxy.dsn, migrate=False,
                                                       keyring=TEST_KEYRING) as through:
        dispatcher = world.dispatcher(through, lease_seconds=60)
        proxy.arm(Fault.DROP_COMMIT)
        with pytest.raises(DatabaseUnavailable):
            await dispatcher.dispatch_once()
        assert [r.requests for r in world.receiver.seen.values()] == [1]
        world.clock.advance(61)  # the lease of the unrecorded attempt expires
        stats = await dispatcher.dispatch_once()
    assert stats.delivered == 1
    (record,) = world.receiver.seen.values()
    assert (record.requests, record.answered_ok, world.receiver.processed) == (2, 2, 1)
    assert list((await world.statuses()).values()) == [("delivered", 2)]
    assert world.runs == [1]


async def test_a_503_then_a_success_really_sends_twice(world: World) -> None:
    """A first 503 does not mark the notice as seen: the second attempt is sent."""
    world.receiver.fail_first = 1
    await world.reports(1)
    await world.drain(world.dispatcher())
    (record,) = world.receiver.seen.values()
    assert (record.requests, record.answered_ok) == (2, 1)
    assert list((await world.statuses()).values()) == [("delivered", 2)]


async def test_a_relay_never_sees_an_uncommitted_report(world: World, db_dsn: str) -> None:
    """A delivery row still inside an open transaction is invisible to a polling
    dispatcher, which therefore cannot finalise it; after the commit it is delivered."""
    await world.reports(1)
    row = await world.db.pool.fetchrow("DELETE FROM deliveries RETURNING *")
    import asyncpg

    from watchkeeper.runtime.store._db import server_settings

    writer = await asyncpg.connect(db_dsn, server_settings=server_settings(world.db.schema))
    try:
        tx = writer.transaction()
        await tx.start()
        await writer.execute(
            "INSERT INTO deliveries (tenant_id, delivery_id, task_id, channel, destination, "
            "status, next_attempt_at, created_at, queued_at) "
            "VALUES ($1, $2, $3, $4, $5, 'pending', $6, $6, $6)",
            row["tenant_id"], row["delivery_id"], row["task_id"], row["channel"],
            row["destination"], world.clock.now())
        dispatcher = world.dispatcher()
        assert (await dispatcher.dispatch_once()).claimed == 0
        assert world.receiver.seen == {}
        await tx.commit()
    finally:
        await writer.close()
    assert (await dispatcher.dispatch_once()).delivered == 1
    for client in world.clients:
        await client.aclose()


async def test_a_tampered_body_fails_verification(world: World) -> None:
    """Signed headers with a modified body are rejected (library HMAC), by the function and
    by the live receiver."""
    body = json.dumps({"report_ref": "report:acme/1"})
    headers = signed_headers("dlv-1", body, (world.secret,), world.clock.now())
    assert verify((world.secret,), headers, body.encode(), world.clock.now()) == "dlv-1"
    tampered = body.replace("1", "2")
    with pytest.raises(SignatureInvalid):
        verify((world.secret,), headers, tampered.encode(), world.clock.now())
    async with httpx.AsyncClient() as client:
        response = await client.post(world.url, content=tampered, headers=headers)
    assert response.status_code == 401 and world.receiver.rejected == 1
    assert world.receiver.seen == {}


async def test_dead_after_max_attempts_then_redelivered_under_the_same_id(world: World) -> None:
    """Always 500: dead after 3 attempts, visible with its last error; redeliver re-queues
    it under the same delivery id, and it arrives once the receiver recovers."""
    world.receiver.fail_share, world.receiver.failures = 1.0, ("500",)
    await world.reports(1)
    dispatcher = world.dispatcher(max_attempts=3)
    await world.drain(dispatcher)
    ((delivery_id, state),) = (await world.statuses()).items()
    assert state == ("dead", 3)
    row = await world.db.pool.fetchrow("SELECT last_error, response_status, dead_at FROM deliveries")
    assert row["response_status"] == 500 and "injected failure" in row["last_error"]
    world.receiver.fail_share = 0.0
    await redeliver(world.db, world.clock, "acme", delivery_id, "operator")
    await world.drain(dispatcher)
    assert (await world.statuses())[delivery_id] == ("delivered", 1)
    assert world.receiver.seen[delivery_id].answered_ok == 1
    assert await world.db.pool.fetchval("SELECT redeliveries FROM deliveries") == 1


async def test_a_permanent_4xx_is_dead_at_once(world: World) -> None:
    """A 404 is not retried."""
    await world.db.pool.execute("UPDATE webhook_endpoints SET url = $1", world.url + "missing")
    world.receiver.fail_share = 0.0

    async def not_found(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 404, "headers": []})
        await send({"type": "http.response.body", "body": b"no such hook"})

    async with serve(not_found) as url:
        await world.db.pool.execute("UPDATE webhook_endpoints SET url = $1", url)
        await world.reports(1)
        await world.dispatcher().dispatch_once()
    assert list((await world.statuses()).values()) == [("dead", 1)]


async def test_retry_after_is_honoured(world: World) -> None:
    """A 429 with Retry-After: 120 is not retried before 120 s have passed."""
    async def slow_down(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 429,
                    "headers": [(b"retry-after", b"120")]})
        await send({"type": "http.response.body", "body": b""})

    async with serve(slow_down) as url:
        await world.db.pool.execute("UPDATE webhook_endpoints SET url = $1", url)
        await world.reports(1)
        await world.dispatcher().dispatch_once()
    next_at = await world.db.pool.fetchval("SELECT next_attempt_at FROM deliveries")
    assert next_at >= world.clock.now() + timedelta(seconds=120)


async def test_two_dispatchers_never_send_one_row_twice(world: World, db_dsn: str) -> None:
    """Two dispatchers on two pools drain 100 deliveries concurrently: one request each."""
    await world.reports(100)
    async with Database.open(db_dsn, migrate=False, keyring=TEST_KEYRING) as other:
        first, second = world.dispatcher(owner="a"), world.dispatcher(other, owner="b")
        async with anyio.create_task_group() as tg:
            for dispatcher in (first, second):
                tg.start_soon(lambda d=dispatcher: d.dispatch_once(limit=10))
        while (await first.dispatch_once(limit=10)).claimed or (
                await second.dispatch_once(limit=10)).claimed:
            pass
    assert len(world.receiver.seen) == 100
    assert {r.requests for r in world.receiver.seen.values()} == {1}


async def test_a_rotated_secret_signs_alongside_the_old_one(world: World) -> None:
    """During the overlap both secrets sign; a receiver knowing either accepts."""
    new = await rotate_secret(world.db, world.clock, "acme", "hook", overlap=timedelta(hours=1))
    world.receiver.secrets = (new,)
    await world.reports(1)
    await world.drain(world.dispatcher())
    assert world.receiver.processed == 1
    endpoint = await PgDeliveryStore(world.db, world.clock).endpoint("acme", "hook")
    assert endpoint.secrets == (new, world.secret)
    world.clock.advance(3601)
    endpoint = await PgDeliveryStore(world.db, world.clock).endpoint("acme", "hook")
    assert endpoint.secrets == (new,)


async def test_below_the_minimum_importance_is_suppressed_but_kept(world: World) -> None:
    """'Notify me only if something important changed': a normal report is committed and
    visible, its notice suppressed with the reason."""
    await set_preferences(world.db, world.clock, "acme", "alice",
                          PreferencesInput(min_importance=Importance.HIGH))
    await world.reports(1)
    await world.dispatcher().dispatch_once()
    row = await world.db.pool.fetchrow("SELECT status, status_reason, attempts FROM deliveries")
    assert tuple(row) == ("suppressed",
                          "importance normal is below the user's minimum high", 0)
    assert world.receiver.seen == {}
    assert await world.db.pool.fetchval("SELECT count(*) FROM reports WHERE verified") == 1


async def test_a_disabled_channel_is_suppressed(world: World) -> None:
    """A user who enabled only the file channel gets no webhook notice."""
    await set_preferences(world.db, world.clock, "acme", "alice",
                          PreferencesInput(channels=["file"]))
    await world.reports(1, delivery=[{"channel": "webhook", "destination": "hook"},
                                     {"channel": "file", "destination": "n.jsonl"}])
    await world.drain(world.dispatcher())
    rows = await world.db.pool.fetch("SELECT channel, status FROM deliveries ORDER BY channel")
    assert [tuple(r) for r in rows] == [("file", "delivered"), ("webhook", "suppressed")]


async def test_quiet_hours_across_a_dst_change(db: Database, tmp_path: Path) -> None:
    """Quiet 22:00-07:00 Europe/Berlin; a notice due 2026-03-28 22:30 CET waits until
    07:00 CEST on the 29th: 05:00Z, not 06:00Z (the clocks went forward that night)."""
    clock = FakeClock(utc("2026-03-28T21:30:00Z"))
    me = await owner(db, clock, zone="Europe/Berlin")
    world = World(db, clock, Receiver(()), "", "", [], tmp_path, me)
    await set_preferences(db, clock, "acme", "alice",
                          PreferencesInput(quiet=(time(22), time(7))))
    await world.reports(1, delivery=[{"channel": "log"}])
    dispatcher = world.dispatcher()
    assert (await dispatcher.dispatch_once()).deferred == 1
    row = await db.pool.fetchrow("SELECT status, next_attempt_at, attempts FROM deliveries")
    assert tuple(row) == ("pending", utc("2026-03-29T05:00:00Z"), 0)
    clock.set_wall(utc("2026-03-29T04:59:59Z"))
    assert (await dispatcher.dispatch_once()).claimed == 0
    clock.set_wall(utc("2026-03-29T05:00:00Z"))
    assert (await dispatcher.dispatch_once()).delivered == 1


# ---------------------------------------------------------------- claims, leases, failures


class Scripted:
    """A channel that records each send and then does what ``script`` says for it:
    return a summary, raise, advance the fake clock, or wait for a gate."""

    def __init__(self, name: str, sends: list[tuple[str, str]], *, error: Exception | None = None,
                 advance: tuple[FakeClock, float] | None = None) -> None:
        self.name, self.sends, self.error, self.advance = name, sends, error, advance
        self.started, self.gate = anyio.Event(), anyio.Event()
        self.gated = False

    async def send(self, notice: Notice) -> str:
        self.sends.append((self.name, notice.delivery_id))
        self.started.set()
        if self.gated:
            await self.gate.wait()
        if self.advance is not None:
            clock, seconds = self.advance
            clock.advance(seconds)
        if self.error is not None:
            raise self.error
        return "200 OK"


async def test_a_stalled_pass_records_nothing_over_the_current_claim(world: World) -> None:
    """Two passes with the SAME owner name (two `watchkeeper tick` runs): A claims the row
    and stalls past its lease; B takes it over and delivers it; A's late 410 is dropped
    because its lease token is no longer current. The row ends delivered."""
    await world.reports(1, delivery=[{"channel": "log"}])
    store = PgDeliveryStore(world.db, world.clock)
    sends: list[tuple[str, str]] = []
    stalled = Scripted("A", sends, error=DeliveryFailed("HTTP 410 Gone", retryable=False))
    stalled.gated = True
    first = Dispatcher(store, {"log": stalled}, now=world.clock.now, owner="cli-tick")
    second = Dispatcher(store, {"log": Scripted("B", sends)}, now=world.clock.now,
                        owner="cli-tick")
    async with anyio.create_task_group() as tg:
        tg.start_soon(first.dispatch_once)
        await stalled.started.wait()
        world.clock.advance(61)  # A's lease (60 s) is over
        assert (await second.dispatch_once()).delivered == 1
        stalled.gate.set()
    assert [who for who, _ in sends] == ["A", "B"]
    assert list((await world.statuses()).values()) == [("delivered", 2)]
    log = await world.db.pool.fetch("SELECT attempt, outcome FROM delivery_attempts")
    assert [tuple(r) for r in log] == [(2, "delivered")]


async def test_no_send_starts_that_could_outlive_the_lease(world: World) -> None:
    """One pass claims 3 rows (lease 60 s, send timeout 30 s, one at a time); the first
    send takes 35 s, so the other two are released unsent (not an attempt) instead of
    being sent while another dispatcher may take them over; the next pass sends them."""
    await world.reports(3, delivery=[{"channel": "log"}])
    store = PgDeliveryStore(world.db, world.clock)
    sends: list[tuple[str, str]] = []
    slow = Scripted("slow", sends, advance=(world.clock, 35.0))
    dispatcher = Dispatcher(store, {"log": slow}, now=world.clock.now, owner="a",
                            concurrency=1, lease_seconds=60, send_timeout=30)
    stats = await dispatcher.dispatch_once()
    assert (stats.claimed, stats.delivered, stats.deferred) == (3, 1, 2)
    assert len(sends) == 1
    states = sorted((await world.statuses()).values())
    assert states == [("delivered", 1), ("pending", 0), ("pending", 0)]
    reasons = await world.db.pool.fetch("SELECT detail FROM delivery_attempts WHERE outcome = 'deferred'")
    assert all("released unsent" in r["detail"] for r in reasons) and len(reasons) == 2
    fast = Dispatcher(store, {"log": Scripted("fast", sends)}, now=world.clock.now, owner="b")
    assert (await fast.dispatch_once()).delivered == 2
    assert sorted((await world.statuses()).values()) == [("delivered", 1)] * 3


async def test_a_send_is_cut_at_the_send_timeout(world: World) -> None:
    """A channel that never returns is abandoned after send_timeout (a real 50 ms: the
    bound is on real I/O) and retried; the pass goes on."""
    await world.reports(1, delivery=[{"channel": "log"}])
    sends: list[tuple[str, str]] = []
    hanging = Scripted("hang", sends)
    hanging.gated = True  # never opened
    dispatcher = Dispatcher(PgDeliveryStore(world.db, world.clock), {"log": hanging},
                            now=world.clock.now, owner="a", send_timeout=0.05)
    assert (await dispatcher.dispatch_once()).retrying == 1
    row = await world.db.pool.fetchrow("SELECT status, last_error FROM deliveries")
    assert row["status"] == "retrying" and "longer than 0.05 s" in row["last_error"]


async def test_a_huge_retry_after_is_dead_and_the_rest_of_the_pass_is_recorded(
        world: World) -> None:
    """Retry-After: 10^12 s cannot overflow the pass: the notice is dead (it would be
    older than max_age), and the other notice of the same pass is recorded delivered."""
    await world.reports(1, delivery=[{"channel": "webhook", "destination": "hook"},
                                     {"channel": "log"}])
    sends: list[tuple[str, str]] = []
    hostile = Scripted("hostile", sends, error=DeliveryFailed(
        "HTTP 503", retryable=True, retry_after=1e12, status_code=503))
    dispatcher = Dispatcher(PgDeliveryStore(world.db, world.clock),
                            {"webhook": hostile, "log": LogChannel()}, now=world.clock.now,
                            owner="a")
    stats = await dispatcher.dispatch_once()
    assert (stats.delivered, stats.dead) == (1, 1)
    rows = await world.db.pool.fetch(
        "SELECT channel, status, response_status, last_error FROM deliveries ORDER BY channel")
    assert [(r["channel"], r["status"], r["response_status"]) for r in rows] == [
        ("log", "delivered", None), ("webhook", "dead", 503)]
    assert "older than max_age" in rows[1]["last_error"]


async def test_a_channel_bug_is_retried_not_fatal(world: World) -> None:
    """A channel raising something other than DeliveryFailed is a retryable failure with
    the error recorded; dispatch_once does not raise."""
    await world.reports(1, delivery=[{"channel": "log"}])
    buggy = Scripted("bug", [], error=KeyError("oops"))
    dispatcher = Dispatcher(PgDeliveryStore(world.db, world.clock), {"log": buggy},
                            now=world.clock.now, owner="a")
    assert (await dispatcher.dispatch_once()).retrying == 1
    assert "KeyError" in await world.db.pool.fetchval("SELECT last_error FROM deliveries")


async def test_a_redelivery_starts_a_fresh_age_and_clears_the_old_outcome(world: World) -> None:
    """Delivered, then redelivered 25 h later: the old delivered_at/response are gone and
    a transient failure is retried (max_age counts from the redelivery), not dead."""
    await world.reports(1)
    await world.drain(world.dispatcher())
    ((delivery_id, _),) = (await world.statuses()).items()
    world.clock.advance(25 * 3600)
    await redeliver(world.db, world.clock, "acme", delivery_id, "operator")
    row = await world.db.pool.fetchrow("SELECT delivered_at, response, response_status "
                                       "FROM deliveries")
    assert tuple(row) == (None, None, None)
    world.receiver.fail_first = 2  # this id already had 1 request: the 2nd gets a 503
    await world.dispatcher().dispatch_once()
    row = await world.db.pool.fetchrow("SELECT status, attempts, response_status FROM deliveries")
    assert tuple(row) == ("retrying", 1, 503)


async def test_response_status_is_the_last_attempts(world: World) -> None:
    """A 503 and then a transport error: the row shows no HTTP status, not the old 503."""
    await world.reports(1, delivery=[{"channel": "log"}])
    sends: list[tuple[str, str]] = []
    store = PgDeliveryStore(world.db, world.clock)
    for error in (DeliveryFailed("HTTP 503", retryable=True, status_code=503),
                  DeliveryFailed("transport error: refused", retryable=True)):
        dispatcher = Dispatcher(store, {"log": Scripted("x", sends, error=error)},
                                now=world.clock.now, owner="a", base=0.001, cap=0.001)
        await dispatcher.dispatch_once()
        world.clock.advance(1)
    row = await world.db.pool.fetchrow("SELECT attempts, response_status, last_error FROM deliveries")
    assert (row["attempts"], row["response_status"]) == (2, None)
    assert "refused" in row["last_error"]


@pytest.mark.parametrize(
    ("call", "field"),
    [(lambda db, clock: redeliver(db, clock, "acme", "not-a-uuid", "op"), "delivery_id"),
     (lambda db, clock: rotate_secret(db, clock, "acme", "hook", overlap=timedelta(hours=-5)),
      "--overlap"),
     (lambda db, clock: add_endpoint(db, clock, "acme", "ops:main", "http://127.0.0.1:1/"),
      "name"),
     (lambda db, clock: set_preferences(db, clock, "acme", "alice", PreferencesInput(
         quiet=parse_quiet("22:00+05:00-07:00"))), "quiet")],
)
async def test_bad_outbox_input_names_the_field_and_stores_nothing(
        world: World, call: Any, field: str) -> None:
    before = await world.db.pool.fetchval(
        "SELECT count(*) FROM webhook_secrets") + await world.db.pool.fetchval(
        "SELECT count(*) FROM notification_preferences")
    with pytest.raises(SpecError) as caught:
        await call(world.db, world.clock)
    assert caught.value.field == field
    after = await world.db.pool.fetchval(
        "SELECT count(*) FROM webhook_secrets") + await world.db.pool.fetchval(
        "SELECT count(*) FROM notification_preferences")
    assert after == before


async def test_a_spec_naming_no_endpoint_is_refused_at_proposal(world: World) -> None:
    """A webhook destination must name one of the tenant's endpoints when proposed and
    when confirmed: the error names the field and how to add it; nothing is stored."""
    spec = parse_spec({"version": 1, "trigger": {"type": "interval", "every": 86400},
                       "delivery": [{"channel": "log"},
                                    {"channel": "webhook", "destination": "nosuch"}]})
    with pytest.raises(SpecError) as caught:
        await propose(world.db, world.clock, tenant_id="acme", definition_id="d9",
                      owner_user_id="alice", spec=spec, proposed_by="agent:test")
    assert caught.value.field == "delivery.1.destination"
    assert "watchkeeper webhooks add acme nosuch" in str(caught.value)
    assert await world.db.pool.fetchval("SELECT count(*) FROM definition_revisions") == 0


async def test_every_missing_endpoint_is_named_at_once(world: World) -> None:
    """Two webhook deliveries to endpoints the tenant lacks, beside one it has: one
    error with both missing ones, by index; the existing 'hook' is not named."""
    spec = parse_spec({"version": 1, "trigger": {"type": "interval", "every": 86400},
                       "delivery": [{"channel": "webhook", "destination": "nosuch"},
                                    {"channel": "webhook", "destination": "hook"},
                                    {"channel": "webhook", "destination": "other"}]})
    with pytest.raises(SpecError) as caught:
        await propose(world.db, world.clock, tenant_id="acme", definition_id="d9",
                      owner_user_id="alice", spec=spec, proposed_by="agent:test")
    assert [(p.field, p.problem) for p in caught.value.problems] == [
        ("delivery.0.destination", "tenant acme has no webhook endpoint 'nosuch'."),
        ("delivery.2.destination", "tenant acme has no webhook endpoint 'other'.")]


async def test_an_endpoint_in_use_is_not_removed_without_force(world: World) -> None:
    await world.reports(1)
    with pytest.raises(Conflict, match="acme/d1"):
        await remove_endpoint(world.db, "acme", "hook")
    assert await world.db.pool.fetchval("SELECT count(*) FROM webhook_endpoints") == 1
    await remove_endpoint(world.db, "acme", "hook", force=True)
    assert await world.db.pool.fetchval("SELECT count(*) FROM webhook_endpoints") == 0


async def test_new_preferences_release_notices_held_by_quiet_hours(world: World) -> None:
    """Quiet hours hold a notice; the user clears them: the notice is due at once and
    goes out on the next pass, not at the old quiet hours' end."""
    now_local = world.clock.now()
    start = (now_local - timedelta(hours=1)).time().replace(second=0, microsecond=0)
    end = (now_local + timedelta(hours=2)).time().replace(second=0, microsecond=0)
    await set_preferences(world.db, world.clock, "acme", "alice",
                          PreferencesInput(quiet=(start, end)))
    await world.reports(1)
    dispatcher = world.dispatcher()
    assert (await dispatcher.dispatch_once()).deferred == 1
    held_until = await world.db.pool.fetchval("SELECT next_attempt_at FROM deliveries")
    assert held_until > world.clock.now() + timedelta(minutes=100)
    await set_preferences(world.db, world.clock, "acme", "alice", PreferencesInput())
    assert (await dispatcher.dispatch_once()).delivered == 1
    assert world.receiver.processed == 1


async def test_preferences_of_an_unknown_user_are_not_found(world: World) -> None:
    with pytest.raises(NotFound):
        await get_preferences(world.db, "acme", "nobody")


@pytest.mark.parametrize(
    ("url", "stored"),
    [("HTTPS://EXAMPLE.COM/h", "https://example.com/h"),
     ("https://exa mple.com", None), ("http://127.0.0.1:99999/x", None),
     ("ftp://example.com/h", None), ("example.com/h", None)],
)
async def test_endpoint_urls_are_validated_and_normalised(world: World, url: str,
                                                          stored: str | None) -> None:
    if stored is None:
        with pytest.raises(SpecError) as caught:
            await add_endpoint(world.db, world.clock, "acme", "other", url)
        assert caught.value.field == "url"
        assert await world.db.pool.fetchval("SELECT count(*) FROM webhook_endpoints") == 1
    else:
        await add_endpoint(world.db, world.clock, "acme", "other", url)
        assert await world.db.pool.fetchval(
            "SELECT url FROM webhook_endpoints WHERE name = 'other'") == stored


async def test_history_says_how_to_redeliver_a_dead_notice(world: World) -> None:
    world.receiver.fail_share, world.receiver.failures = 1.0, ("500",)
    await world.reports(1)
    await world.drain(world.dispatcher(max_attempts=1))
    ((delivery_id, _),) = (await world.statuses()).items()
    page = await history(world.db, HistoryQuery(tenant_id="acme", definition_id="d1"))
    assert page.entries[0].next_step is not None
    assert f"watchkeeper redeliver {delivery_id} --tenant acme" in page.entries[0].next_step


async def test_receiver_ignores_a_request_whose_sender_went_away() -> None:
    """A sender killed mid-body (found by bench/faults.py, SIGKILL of a supervisor during a
    POST): the ASGI server reports a disconnect; the receiver saw no request, so it
    neither processes nor counts a bad signature for the partial body."""
    receiver = Receiver(("whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",))
    body = '{"type":"report.committed","data":{}}'
    headers = signed_headers("cut-short", body, receiver.secrets, datetime.now(UTC))
    async with serve(receiver) as url:
        port = int(url.rstrip("/").rsplit(":", 1)[1])
        head = (f"POST / HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-length: {len(body)}\r\n"
                + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n")
        async with await anyio.connect_tcp("127.0.0.1", port) as stream:
            await stream.send((head + body[:10]).encode())
            await anyio.sleep(0.2)  # the server has the headers and part of the body
        async with httpx.AsyncClient() as client:  # the whole request, afterwards, is fine
            answer = await client.post(url, content=body.encode(), headers=headers)
    assert answer.status_code == 200
    assert (receiver.rejected, receiver.processed) == (0, 1)
    assert receiver.seen["cut-short"].requests == 1
