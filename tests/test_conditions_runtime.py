"""Conditional triggers in the runtime, on real PostgreSQL: the poll claim, the read
outside any transaction, the admission transaction (fence, state, receipt, task), the
polling budget, lost COMMIT acknowledgements and restarts (DESIGN "Conditions")."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

import anyio
import pytest
from _helpers import confirmed, definition, occurrences, owner, tasks, utc
from _pgproxy import Fault, PgProxy

from watchkeeper.runtime._errors import DatabaseUnavailable
from watchkeeper.runtime.engine import _poller as poller_module
from watchkeeper.runtime.engine._agents import AgentCatalog
from watchkeeper.runtime.engine._clock import FakeClock
from watchkeeper.runtime.engine._poller import poll_once
from watchkeeper.runtime.engine._worker import Worker
from watchkeeper.runtime.store._db import Database
from watchkeeper.runtime.usecases import cancel, confirm, pause, propose, resume
from watchkeeper.sources import CallableSource, SourceRegistry
from watchkeeper.triggers import Observation, parse_spec

pytestmark = pytest.mark.anyio

HOUR = 3600.0


def condition(predicate: dict[str, Any], *, mode: str = "every_edge", poll: str = "PT1H",
              cooldown: str | None = None, source: str = "prices", version: str = "1",
              **extra: Any) -> dict[str, Any]:
    """A condition spec polling ``source`` every ``poll``."""
    trigger: dict[str, Any] = {"type": "condition", "mode": mode,
                               "source": {"name": source, "version": version},
                               "poll_every": poll, "predicate": predicate}
    if cooldown is not None:
        trigger["cooldown"] = cooldown
    return {"title": "price watch", "trigger": trigger, "delivery": [], **extra}


class Script:
    """A callable source answering from a script of values per poll instant."""

    def __init__(self, values: dict[datetime, Any] | None = None, default: Any = None) -> None:
        self.values = values or {}
        self.default = default
        self.calls: list[tuple[str, datetime]] = []

    def __call__(self, subject: str, at: datetime) -> Any:
        self.calls.append((subject, at))
        return self.values.get(at, self.default)


def registry_of(fn: Callable[[str, datetime], Any], *, unit: str = "USD/share",
                currency: str | None = "USD", name: str = "prices",
                version: str = "1", clock: FakeClock) -> SourceRegistry:
    return SourceRegistry([CallableSource(name, version, fn, unit=unit, currency=currency,
                                          now=clock.now)])


async def polls(db: Database, definition_id: str = "d1") -> list[dict[str, Any]]:
    rows = await db.pool.fetch("SELECT * FROM condition_polls WHERE definition_id = $1 "
                               "ORDER BY scheduled_for", definition_id)
    return [dict(r) for r in rows]


async def step_hours(db: Database, clock: FakeClock, sources: SourceRegistry,
                     hours: int, worker: Worker | None = None) -> list[Any]:
    """Advance one hour at a time, polling at each (and running what was admitted, when
    a worker is given); return every poll event."""
    events = []
    for _ in range(hours):
        clock.advance(HOUR)
        events += (await poll_once(db, clock, sources, actor="test")).events
        while worker is not None and await worker.run_once() is not None:
            pass
    return events


LE_10 = {"subject": "AAPL", "op": "<=", "threshold": "10 USD/share"}


async def refuse_receipts_of(db: Database, definition_id: str) -> None:
    """Make the database refuse every observation receipt of ``definition_id`` (a real
    trigger raising in PostgreSQL, as a constraint or a full disk would)."""
    await db.pool.execute(f"""
        CREATE FUNCTION refuse_receipts() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
          IF NEW.definition_id = '{definition_id}' THEN RAISE EXCEPTION 'receipt refused'; END IF;
          RETURN NEW;
        END $$;
        CREATE TRIGGER refuse_receipts BEFORE INSERT ON observation_receipts
          FOR EACH ROW EXECUTE FUNCTION refuse_receipts();""")


async def by_tenant(db: Database, query: str) -> dict[str, list[tuple[Any, ...]]]:
    """The rows ``query`` returns for tenants acme and globex (every column but
    tenant_id), each tenant's sorted: two tenants that lived the same polls compare
    equal."""
    out: dict[str, list[tuple[Any, ...]]] = {"acme": [], "globex": []}
    for r in await db.pool.fetch(query):
        out[r["tenant_id"]].append(tuple(v for k, v in r.items() if k != "tenant_id"))
    return {k: sorted(v, key=repr) for k, v in out.items()}


async def test_first_match_fires_once_and_completes(db: Database, clock: FakeClock) -> None:
    values = {clock.now() + timedelta(hours=h): v for h, v in
              [(1, 12), (2, 11), (3, 9.5), (4, 8), (5, 12), (6, 7)]}
    sources = registry_of(Script(values), clock=clock)
    await confirmed(db, clock, condition(LE_10, mode="first_match"))
    events = await step_hours(db, clock, sources, 6)
    assert [(e.verdict, e.action) for e in events] == [
        ("false", "none"), ("false", "none"), ("true", "fired")]
    fired = events[2]
    assert fired.at == utc("2026-06-01T03:00Z") and fired.task_id is not None
    rows = await tasks(db)
    assert [r["task_id"] for r in rows] == [fired.task_id]
    trigger = rows[0]["params"]["trigger"]
    assert trigger["observations"][0]["value"] == "9.5"
    assert trigger["observations"][0]["unit"] == "USD/share"
    assert (await definition(db))["status"] == "completed"
    state = await db.pool.fetchrow("SELECT * FROM condition_state")
    assert state["latched"] is True
    occurrence = (await occurrences(db))[0]
    assert (occurrence["kind"], occurrence["decision"]) == ("condition", "admitted")
    assert occurrence["reason"] == ("first true: first_match fires; "
                                    "true: AAPL 9.5 USD/share <= 10 USD/share")


async def test_every_edge_through_the_store(db: Database, clock: FakeClock,
                                            tmp_path: Any) -> None:
    """F,T,U,T,F,T,T: the unknown neither fires nor re-arms; two fires in all, each a
    task whose params carry the observation."""
    script = [11, 9, None, 9, 11, 9, 9]
    values = {clock.now() + timedelta(hours=h + 1): v for h, v in enumerate(script)}
    sources = registry_of(Script(values), clock=clock)
    await confirmed(db, clock, condition(LE_10))
    worker = Worker(db, clock, AgentCatalog(), worker_id="w", artifact_root=tmp_path)
    events = await step_hours(db, clock, sources, len(script), worker)
    assert [(e.verdict, e.action) for e in events] == [
        ("false", "none"), ("true", "fired"), ("unknown", "none"), ("true", "none"),
        ("false", "none"), ("true", "fired"), ("true", "none")]
    rows = await tasks(db)
    assert [r["slot"] for r in rows] == ["2026-06-01T02:00:00Z", "2026-06-01T06:00:00Z"]
    assert {r["kind"] for r in rows} == {"condition"}
    stored = await polls(db)
    assert [p["verdict"] for p in stored] == [e.verdict for e in events]
    receipts = await db.pool.fetch("SELECT slot, value, status, verdict FROM observation_receipts "
                                   "ORDER BY slot")
    assert [(r["value"], r["status"]) for r in receipts][:3] == [
        (Decimal("11"), "ok"), (Decimal("9"), "ok"), (None, "missing")]


async def test_an_edge_during_an_overrun_stays_armed(db: Database, clock: FakeClock,
                                                     tmp_path: Any) -> None:
    """overrun = skip: an edge while the previous fire's task has not finished is
    recorded skipped_overrun and is not consumed; the next true poll after the task
    finished fires (the edge was never delivered)."""
    script = [9, 11, 9, 9, 9]
    values = {clock.now() + timedelta(hours=h + 1): v for h, v in enumerate(script)}
    sources = registry_of(Script(values), clock=clock)
    await confirmed(db, clock, condition(LE_10))
    events = await step_hours(db, clock, sources, 3)  # no worker: task 1 still queued
    worker = Worker(db, clock, AgentCatalog(), worker_id="w", artifact_root=tmp_path)
    while await worker.run_once() is not None:
        pass
    events += await step_hours(db, clock, sources, 2, worker)
    assert [(e.verdict, e.action) for e in events] == [
        ("true", "fired"), ("false", "none"), ("true", "skipped_overrun"), ("true", "fired"),
        ("true", "none")]
    assert "overrun" in events[2].reason
    assert len(await tasks(db)) == 2


async def test_cooldown_suppresses_and_records(db: Database, clock: FakeClock,
                                               tmp_path: Any) -> None:
    """Cooldown 10 min, polls every minute: edges at minutes 1 and 3 give one fire and
    one suppressed_cooldown; the edge at minute 12 fires."""
    script = {1: 9, 2: 11, 3: 9, 4: 11, 12: 9}
    values = {clock.now() + timedelta(minutes=m): script.get(m, 11) for m in range(1, 13)}
    sources = registry_of(Script(values), clock=clock)
    await confirmed(db, clock, condition(LE_10, poll="PT1M", cooldown="PT10M"))
    worker = Worker(db, clock, AgentCatalog(), worker_id="w", artifact_root=tmp_path)
    events = []
    for _ in range(12):
        clock.advance(60)
        events += (await poll_once(db, clock, sources, actor="test")).events
        while await worker.run_once() is not None:
            pass
    actions = {e.at.minute: e.action for e in events if e.action != "none"}
    assert actions == {1: "fired", 3: "suppressed_cooldown", 12: "fired"}
    assert len(await tasks(db)) == 2


async def test_racing_pollers_poll_each_slot_once(db: Database, db_dsn: str,
                                                  clock: FakeClock) -> None:
    """Two supervisors poll the same due definitions at once: one poll per slot and
    one task per fire, whoever wins."""
    sources = registry_of(Script(default=9), clock=clock)
    me = await owner(db, clock)
    for n in range(20):
        await confirmed(db, clock, condition(LE_10, mode="first_match"), definition_id=f"c{n}",
                        principal=me)
    clock.advance(HOUR)
    async with Database.open(db_dsn, migrate=False, max_size=4) as other:
        results: list[Any] = []

        async def poller(database: Database, name: str) -> None:
            results.append(await poll_once(database, clock, sources, actor=name, limit=7))

        for _ in range(3):
            async with anyio.create_task_group() as tg:
                tg.start_soon(poller, db, "a")
                tg.start_soon(poller, other, "b")
    fired = [e for r in results for e in r.events if e.action == "fired"]
    assert sorted(e.definition_id for e in fired) == sorted(f"c{n}" for n in range(20))
    count = await db.pool.fetchval("SELECT count(*) FROM condition_polls")
    assert count == 20
    assert await db.pool.fetchval("SELECT count(*) FROM tasks") == 20


async def test_reconfirm_during_the_read_is_fenced_out(db: Database, clock: FakeClock) -> None:
    """The source is read outside any transaction; a revision confirmed meanwhile
    fences the poll out (nothing admitted, the state untouched); the next poll fires
    under the new revision."""
    me = await owner(db, clock)
    changed = False

    async def read(subject: str, at: datetime) -> Any:
        nonlocal changed
        if not changed:
            changed = True
            spec = parse_spec({"version": 1, **condition(
                {"subject": "AAPL", "op": "<=", "threshold": "12 USD/share"},
                mode="first_match")})
            proposal = await propose(db, clock, tenant_id="acme", definition_id="d1",
                                     owner_user_id="alice", spec=spec, proposed_by="agent:test",
                                     based_on=1)
            await confirm(db, clock, me, definition_id="d1", revision=proposal.revision,
                          spec_hash=proposal.spec_hash)
        return 9

    sources = registry_of(read, clock=clock)
    await confirmed(db, clock, condition(LE_10, mode="first_match"), principal=me)
    clock.advance(HOUR)
    first = (await poll_once(db, clock, sources, actor="test")).events
    assert [(e.action, e.revision) for e in first] == [("fenced_out", 1)]
    assert "fence" in first[0].reason
    assert await tasks(db) == []
    assert await db.pool.fetchval("SELECT count(*) FROM condition_state") == 0
    clock.advance(HOUR)
    second = (await poll_once(db, clock, sources, actor="test")).events
    assert [(e.action, e.revision) for e in second] == [("fired", 2)]
    assert [r["revision"] for r in await tasks(db)] == [2]


async def test_new_predicate_starts_fresh_and_same_predicate_keeps_the_latch(
        db: Database, clock: FakeClock, tmp_path: Any) -> None:
    """A first_match latch lives on the condition state, not in prunable history: it
    survives deleting every poll, receipt and occurrence, and a revision that keeps the
    source, predicate and mode keeps it. A revision with a changed threshold starts
    fresh: its first true fires, tagged with the new revision."""
    sources = registry_of(Script(default=9), clock=clock)
    me = await owner(db, clock)
    await confirmed(db, clock, condition(LE_10, mode="first_match"), principal=me)
    worker = Worker(db, clock, AgentCatalog(), worker_id="w", artifact_root=tmp_path)
    assert [e.action for e in await step_hours(db, clock, sources, 1, worker)] == ["fired"]
    async with db.transaction() as tx:  # prune every history row (tasks stay: reports)
        await tx.raw.execute("DELETE FROM observation_receipts")
        await tx.raw.execute("DELETE FROM condition_polls")

    async def reconfirm(spec: dict[str, Any], based_on: int) -> None:
        parsed = parse_spec({"version": 1, **spec})
        proposal = await propose(db, clock, tenant_id="acme", definition_id="d1",
                                 owner_user_id="alice", spec=parsed, proposed_by="agent:test",
                                 based_on=based_on)
        await confirm(db, clock, me, definition_id="d1", revision=proposal.revision,
                      spec_hash=proposal.spec_hash)

    await reconfirm(condition(LE_10, mode="first_match", poll="PT2H"), 1)  # same predicate
    clock.advance(2 * HOUR)
    kept = (await poll_once(db, clock, sources, actor="t")).events
    assert [(e.action, e.revision) for e in kept] == [("none", 2)]
    assert "latched" in kept[0].reason
    assert (await definition(db))["status"] == "completed"  # latched: it polls no more
    await reconfirm(condition({**LE_10, "threshold": "9.5 USD/share"}, mode="first_match"), 2)
    clock.advance(HOUR)
    fresh = (await poll_once(db, clock, sources, actor="t")).events
    assert [(e.action, e.revision) for e in fresh] == [("fired", 3)]
    assert [r["revision"] for r in await tasks(db)] == [1, 3]


async def test_poll_budget_counts_unknown_polls_and_never_refunds(
        db: Database, clock: FakeClock) -> None:
    """max_polls_per_period = 3 a day: three polls that return unknown use it up; the
    fourth is denied_poll_budget and reads nothing; the next day has three again."""
    script = Script(default=None)  # every read is missing -> unknown
    sources = registry_of(script, clock=clock)
    await confirmed(db, clock, condition(
        LE_10, limits={"max_polls_per_period": 3, "period": "day"}))
    events = await step_hours(db, clock, sources, 5)
    assert [e.action for e in events] == ["none", "none", "none", "denied_poll_budget",
                                          "denied_poll_budget"]
    assert [e.verdict for e in events[:3]] == ["unknown"] * 3
    assert len(script.calls) == 3
    assert "polling budget exhausted: 3 of 3" in events[3].reason
    ledger = await db.pool.fetch("SELECT period_start, used, poll_limit FROM poll_budget_ledger")
    assert [(r["period_start"], r["used"], r["poll_limit"]) for r in ledger] == [
        (utc("2026-06-01T00:00Z"), 3, 3)]
    clock.set_wall(utc("2026-06-02T00:30Z"))
    script.default = 9
    next_day = await step_hours(db, clock, sources, 1)
    assert [(e.at, e.action) for e in next_day] == [(utc("2026-06-02T01:00Z"), "fired")]


@pytest.mark.parametrize(("unit", "currency", "value", "as_of_hours_ago", "why"), [
    ("USD/share", "USD", None, 0, "is missing"),
    ("USD/share", "USD", 9, 30, "older than its freshness"),
    ("EUR/share", "EUR", 9, 0, "does not compare"),
    ("meter", None, 9, 0, "does not compare"),
    ("kilogram", None, 9, 0, "does not compare"),
])
async def test_unknown_readings_never_fire_or_rearm(
        db: Database, clock: FakeClock, unit: str, currency: str | None, value: Any,
        as_of_hours_ago: int, why: str) -> None:
    """After a fire, readings that cannot be judged (missing, stale, another currency,
    another dimension) are unknown: no fire, and they do not re-arm the edge, so the
    true that follows them does not fire either."""
    clean = registry_of(Script(default=9), clock=clock)
    await confirmed(db, clock, condition({**LE_10, "freshness": "P1D"}))
    first = await step_hours(db, clock, clean, 1)
    assert [e.action for e in first] == ["fired"]

    def bad(subject: str, at: datetime) -> Any:
        return (value, at - timedelta(hours=as_of_hours_ago))

    odd = SourceRegistry([CallableSource("prices", "1", bad, unit=unit, currency=currency,
                                         now=clock.now)])
    middle = await step_hours(db, clock, odd, 3)
    assert [(e.verdict, e.action) for e in middle] == [("unknown", "none")] * 3
    assert why in middle[0].reason
    last = await step_hours(db, clock, clean, 1)
    assert [(e.verdict, e.action) for e in last] == [("true", "none")]
    assert len(await tasks(db)) == 1


async def test_source_version_mismatch_is_unknown(db: Database, clock: FakeClock) -> None:
    """A definition confirmed with source version 1 never reads version 2's numbers."""
    sources = registry_of(Script(default=9), clock=clock, version="2")
    await confirmed(db, clock, condition(LE_10))
    events = await step_hours(db, clock, sources, 1)
    assert [(e.verdict, e.action) for e in events] == [("unknown", "none")]
    assert "version 2" in events[0].reason and "version 1" in events[0].reason
    receipt = await db.pool.fetchrow("SELECT status, source_version FROM observation_receipts")
    assert (receipt["status"], receipt["source_version"]) == ("failed", "2")


async def test_the_report_says_why_it_ran(db: Database, clock: FakeClock, tmp_path: Any) -> None:
    """The digest agent's report of a condition's task names the observation that fired
    it: value, unit, as_of and source version."""
    as_of = utc("2026-06-01T00:30Z")
    sources = registry_of(lambda s, at: ("9.75", as_of), clock=clock)
    await confirmed(db, clock, condition(LE_10, mode="first_match"))
    await step_hours(db, clock, sources, 1)
    worker = Worker(db, clock, AgentCatalog(), worker_id="w", artifact_root=tmp_path)
    outcome = await worker.run_once()
    assert outcome is not None and outcome.status == "completed"
    report = await db.pool.fetchval("SELECT content_md FROM reports")
    assert "## Why it ran" in report
    assert ("AAPL = 9.75 USD/share as of 2026-06-01T00:30:00Z (<= 10 USD/share: true; "
            "source prices version 1") in report


async def test_paused_condition_does_not_poll(db: Database, clock: FakeClock) -> None:
    """Pause stops polling (and consumes no budget); resume polls from now on."""
    script = Script(default=11)
    sources = registry_of(script, clock=clock)
    me = await confirmed(db, clock, condition(LE_10))
    await pause(db, clock, me, "acme", "d1")
    assert await step_hours(db, clock, sources, 3) == []
    assert script.calls == []
    await resume(db, clock, me, "acme", "d1")
    events = await step_hours(db, clock, sources, 1)
    assert [e.at for e in events] == [utc("2026-06-01T04:00Z")]


async def test_missed_polls_are_counted_not_replayed(db: Database, clock: FakeClock) -> None:
    """A poller down for 5 hours polls once (the latest slot): a condition is about now.
    The poll row counts the 5 it superseded (00:00, the confirmation instant, to 04:00)."""
    script = Script(default=11)
    sources = registry_of(script, clock=clock)
    await confirmed(db, clock, condition(LE_10))
    clock.advance(5 * HOUR + 60)
    events = (await poll_once(db, clock, sources, actor="t")).events
    assert [e.at for e in events] == [utc("2026-06-01T05:00Z")]
    assert [p["superseded"] for p in await polls(db)] == [5]
    assert len(script.calls) == 1


@pytest.mark.parametrize("fault", [Fault.DROP_ACK, Fault.DROP_COMMIT])
async def test_lost_commit_after_a_first_match_admission(
        db: Database, proxied_db: Database, proxy: PgProxy, clock: FakeClock,
        fault: Fault) -> None:
    """The admission transaction's COMMIT acknowledgement is lost (DROP_ACK: the server
    committed; DROP_COMMIT: it never arrived) while it decides three first_match polls.
    The poller settles the old session and reads each poll back by its key: one task
    each, the latches set, the definitions completed; the next polls fire nothing."""
    sources = registry_of(Script(default=9), clock=clock)
    me = await owner(db, clock)
    for name in ("d1", "d2", "d3"):
        await confirmed(db, clock, condition(LE_10, mode="first_match"), definition_id=name,
                        principal=me)
    clock.advance(HOUR)
    proxy.arm(fault, after=1)  # the claim commits; the admission's COMMIT is broken
    events = (await poll_once(proxied_db, clock, sources, actor="t")).events
    assert proxy.statistics().faults == 1
    assert [(e.definition_id, e.action, e.recovered) for e in events] == [
        (name, "fired", fault is Fault.DROP_ACK) for name in ("d1", "d2", "d3")]
    rows = await db.pool.fetch("SELECT definition_id, task_id FROM tasks ORDER BY definition_id")
    assert [(r["definition_id"], r["task_id"]) for r in rows] == [
        (e.definition_id, e.task_id) for e in events]
    latched = await db.pool.fetch("SELECT latched FROM condition_state")
    assert [r["latched"] for r in latched] == [True] * 3
    statuses = await db.pool.fetch("SELECT status FROM definitions")
    assert {r["status"] for r in statuses} == {"completed"}
    assert await step_hours(db, clock, sources, 3) == []
    assert await db.pool.fetchval("SELECT count(*) FROM tasks") == 3
    assert await db.pool.fetchval("SELECT count(*) FROM observation_receipts") == 3


async def test_supervisor_polls_and_runs(db: Database, clock: FakeClock, tmp_path: Any) -> None:
    """The supervisor's poll loop polls on the condition's grid under the fake clock;
    its workers run what fired."""
    from watchkeeper.runtime.engine._supervisor import Supervisor, SupervisorConfig

    values = {clock.now() + timedelta(minutes=m): v for m, v in [(1, 11), (2, 9), (3, 9)]}
    sources = registry_of(Script(values, default=11), clock=clock)
    await confirmed(db, clock, condition(LE_10, poll="PT1M"))
    config = SupervisorConfig(home=tmp_path, skew_budget=None, tick_seconds=1.0, workers=1)
    supervisor = Supervisor(db, clock, config, sources=sources)
    async with anyio.create_task_group() as tg:
        await tg.start(supervisor.run)
        for _ in range(4 * 60):
            await supervisor.wait_idle()
            clock.advance(1)
        stats = await supervisor.wait_idle()
        supervisor.stop()
    # polls at 00:00 (the confirmation instant) to 00:04; the 00:02 edge fires
    assert (stats.polls, stats.fires, stats.completed) == (5, 1, 1)
    assert [r["slot"] for r in await tasks(db)] == ["2026-06-01T00:02:00Z"]


@pytest.mark.parametrize(("answer", "why"), [
    (lambda at: Observation("prices", "1", "AAPL", "x", Decimal(9), "USD/share", "USD",
                            at.replace(tzinfo=None), at), "not an aware datetime"),
    (lambda at: Observation("prices", "1", "AAPL", "x", 9.0, "USD/share", "USD", at, at),  # type: ignore[arg-type]
     "not a Decimal in range"),
    (lambda at: Observation("prices", "1", "AAPL", "x", Decimal("0E-99999"), "USD/share",
                            "USD", at, at), "not a Decimal in range"),
    (lambda at: {"value": 9}, "a dict, not an Observation"),
    (lambda at: Observation("prices", "1", "AAPL", None, Decimal(9), "USD/share", "USD",  # type: ignore[arg-type]
                            at, at), "observation_id: not a string"),
])
async def test_an_unsound_answer_is_failed_and_the_batch_goes_on(
        db: Database, clock: FakeClock, answer: Any, why: str) -> None:
    """A source that returns a naive as_of, a float, an unstorable zero or not an
    Observation at all: that poll is unknown (status failed, with the reason); the
    other definitions of the same pass are decided as usual."""
    class Raw:  # a custom Source: its answer is taken as it is
        name, version = "prices", "1"

        async def read(self, subject: str, at: datetime) -> Any:
            return answer(at)

    sources = SourceRegistry([
        Raw(),
        CallableSource("good", "1", lambda s, at: 9, unit="USD/share", currency="USD",
                       now=clock.now)])
    me = await owner(db, clock)
    await confirmed(db, clock, condition(LE_10), definition_id="bad", principal=me)
    await confirmed(db, clock, condition(LE_10, source="good"), definition_id="fine",
                    principal=me)
    events = await step_hours(db, clock, sources, 1)
    by_definition = {e.definition_id: e for e in events}
    assert (by_definition["bad"].verdict, by_definition["bad"].action) == ("unknown", "none")
    assert why in by_definition["bad"].reason
    assert by_definition["fine"].action == "fired"
    receipt = await db.pool.fetchrow("SELECT status, value FROM observation_receipts "
                                     "WHERE definition_id = 'bad'")
    assert (receipt["status"], receipt["value"]) == ("failed", None)


async def test_a_hanging_source_times_out(db: Database, clock: FakeClock) -> None:
    """A read that never answers is timed_out after read_timeout (real) seconds."""
    async def never(subject: str, at: datetime) -> Any:
        await anyio.sleep_forever()

    sources = registry_of(never, clock=clock)
    await confirmed(db, clock, condition(LE_10))
    clock.advance(HOUR)
    with anyio.fail_after(10):
        events = (await poll_once(db, clock, sources, actor="t", read_timeout=0.2)).events
    assert [(e.verdict, e.action) for e in events] == [("unknown", "none")]
    assert "did not answer within 0.2 s" in events[0].reason


async def test_the_last_poll_before_the_ends_still_fires(db: Database, clock: FakeClock) -> None:
    """ends.after = 3: the claim of the third poll completes the definition; that poll
    is still decided (its true fires), not fenced out."""
    values = {clock.now() + timedelta(hours=h): v for h, v in [(0, 11), (1, 11), (2, 9)]}
    sources = registry_of(Script(values), clock=clock)
    await confirmed(db, clock, condition(LE_10, ends={"after": 3}))
    events = (await poll_once(db, clock, sources, actor="t")).events
    events += await step_hours(db, clock, sources, 3)
    assert [(e.at, e.action) for e in events] == [
        (utc("2026-06-01T00:00Z"), "none"), (utc("2026-06-01T01:00Z"), "none"),
        (utc("2026-06-01T02:00Z"), "fired")]
    assert (await definition(db))["status"] == "completed"


async def test_a_slow_read_overtaken_by_a_later_poll_changes_nothing(
        db: Database, db_dsn: str, clock: FakeClock, tmp_path: Any) -> None:
    """Poller A reads the 00:01 slot slowly (false); poller B polls 00:02 (true) and
    fires meanwhile. When A decides 00:01 afterwards it must not store 'false' over
    B's 'true' — that would re-arm the edge and fire again at 00:03."""
    release, reading = anyio.Event(), anyio.Event()

    async def read(subject: str, at: datetime) -> Any:
        if at.minute == 1:
            reading.set()
            await release.wait()
            return 11
        return 9

    sources = registry_of(read, clock=clock)
    await confirmed(db, clock, condition(LE_10, poll="PT1M"))
    worker = Worker(db, clock, AgentCatalog(), worker_id="w", artifact_root=tmp_path)
    clock.advance(60)
    async with Database.open(db_dsn, migrate=False, max_size=2) as other:
        slow: list[Any] = []

        async def poller_a() -> None:
            slow.extend((await poll_once(db, clock, sources, actor="a")).events)

        async with anyio.create_task_group() as tg:
            tg.start_soon(poller_a)
            await reading.wait()  # A has claimed 00:01 and is waiting in its read
            clock.advance(60)
            fast = (await poll_once(other, clock, sources, actor="b")).events
            release.set()
    while await worker.run_once() is not None:
        pass
    clock.advance(60)
    later = (await poll_once(db, clock, sources, actor="c")).events
    assert [(e.at.minute, e.action) for e in fast] == [(2, "fired")]
    assert [(e.at.minute, e.action) for e in slow] == [(1, "superseded")]
    assert [(e.at.minute, e.verdict, e.action) for e in later] == [(3, "true", "none")]
    assert len(await tasks(db)) == 1


async def test_live_pollers_never_touch_a_replay_tenant(db: Database, clock: FakeClock) -> None:
    """A '_replay-' tenant's definitions run on a virtual clock: a live poller (no
    tenant) skips them; only a poller scoped to that tenant polls them."""
    from watchkeeper.runtime.usecases import add_user, authenticate

    tenant = "_replay-test"
    me = await authenticate(db, await add_user(db, clock, tenant, "replay", replay=True))
    spec = parse_spec({"version": 1, **condition(LE_10)})
    proposal = await propose(db, clock, tenant_id=tenant, definition_id="d1",
                             owner_user_id="replay", spec=spec, proposed_by="t", replay=True)
    await confirm(db, clock, me, definition_id="d1", revision=proposal.revision,
                  spec_hash=proposal.spec_hash)
    sources = registry_of(Script(default=9), clock=clock)
    clock.advance(HOUR)
    assert (await poll_once(db, clock, sources, actor="live")).events == []
    scoped = (await poll_once(db, clock, sources, actor="replay", tenant_id=tenant)).events
    assert [e.action for e in scoped] == ["fired"]
    worker = Worker(db, clock, AgentCatalog(), worker_id="live", artifact_root=Any)  # type: ignore[arg-type]
    assert await worker.claim() is None  # the replay's task is not a live worker's


async def test_a_poll_the_store_refuses_is_recorded_failed(db: Database, clock: FakeClock) -> None:
    """The database refuses one poll's receipt (a real trigger raising in PostgreSQL):
    that poll is recorded 'failed' with the reason, the others of its transaction are
    decided one by one, and the poller goes on."""
    await refuse_receipts_of(db, "boom")
    sources = registry_of(Script(default=9), clock=clock)
    me = await owner(db, clock)
    for name in ("a", "boom", "c"):
        await confirmed(db, clock, condition(LE_10), definition_id=name, principal=me)
    events = await step_hours(db, clock, sources, 1)
    assert {e.definition_id: e.action for e in events} == {
        "a": "fired", "boom": "failed", "c": "fired"}
    assert "receipt refused" in next(e.reason for e in events if e.definition_id == "boom")
    stored = await db.pool.fetch("SELECT definition_id, status, action FROM condition_polls "
                                 "ORDER BY definition_id")
    assert [tuple(r) for r in stored] == [("a", "decided", "fired"),
                                          ("boom", "decided", "failed"),
                                          ("c", "decided", "fired")]
    assert sorted(r["definition_id"] for r in await db.pool.fetch(
        "SELECT definition_id FROM tasks")) == ["a", "c"]


async def test_a_stored_spec_that_no_longer_parses_fails_alone(db: Database,
                                                               clock: FakeClock) -> None:
    """A revision stored under an older, laxer watchkeeper that this one refuses: that
    definition is stopped (status failed, an event says why); the others are polled."""
    sources = registry_of(Script(default=9), clock=clock)
    me = await owner(db, clock)
    for name in ("a", "old", "c"):
        await confirmed(db, clock, condition(LE_10), definition_id=name, principal=me)
    await db.pool.execute(
        "UPDATE definition_revisions SET spec = jsonb_set(spec, "
        "'{trigger,predicate,threshold}', '\"ten USD\"'), spec_hash = 'stored-by-an-older-"
        "version' WHERE definition_id = 'old'")
    events = await step_hours(db, clock, sources, 1)
    assert sorted(e.definition_id for e in events) == ["a", "c"]
    assert (await definition(db, "old"))["status"] == "failed"
    reason = await db.pool.fetchval("SELECT reason FROM schedule_events WHERE "
                                    "definition_id = 'old' AND kind = 'planning_failed'")
    assert "cannot be polled" in reason and "threshold" in reason


async def test_a_poller_claims_only_conditions_whose_source_it_has(
        db: Database, clock: FakeClock) -> None:
    """A tick without the source leaves the poll to a poller that has it: no unknown
    poll, no budget spent, and the reading still fires."""
    await confirmed(db, clock, condition(LE_10, limits={"max_polls_per_period": 5}))
    clock.advance(HOUR)
    assert (await poll_once(db, clock, SourceRegistry(), actor="other")).events == []
    assert await db.pool.fetchval("SELECT count(*) FROM poll_budget_ledger") == 0
    events = (await poll_once(db, clock, registry_of(Script(default=9), clock=clock),
                              actor="has-it")).events
    assert [e.action for e in events] == ["fired"]


async def test_a_year_long_duration_is_stored_and_confirmed(db: Database,
                                                            clock: FakeClock) -> None:
    """400 days of freshness and cooldown round-trip through the store (pydantic would
    write 'P1Y35D', which a spec refuses)."""
    await confirmed(db, clock, condition({**LE_10, "freshness": "P400D"}, cooldown="P400D"))
    stored = await db.pool.fetchval("SELECT spec FROM definition_revisions")
    stored = json.loads(stored) if isinstance(stored, str) else stored
    assert stored["trigger"]["cooldown"] == 400 * 86400
    assert stored["trigger"]["predicate"]["freshness"] == 400 * 86400
    events = await step_hours(db, clock, registry_of(Script(default=9), clock=clock), 1)
    assert [e.action for e in events] == ["fired"]


async def test_a_long_subject_reads_with_the_shipped_sources(db: Database,
                                                             clock: FakeClock) -> None:
    subject = "fund/" + "x" * 250
    sources = registry_of(Script(default=9), clock=clock)
    await confirmed(db, clock, condition({**LE_10, "subject": subject}))
    events = await step_hours(db, clock, sources, 1)
    assert [e.action for e in events] == ["fired"]


async def test_two_pollers_with_the_same_definitions_never_deadlock(
        db: Database, db_dsn: str, clock: FakeClock) -> None:
    """Two supervisors decide chunks holding the same two definitions, claimed in
    opposite orders (different poll cadences); a slow receipt insert (a real trigger
    sleeping in PostgreSQL) widens the window. Chunks are decided in key order, so both
    finish and every poll is decided."""
    await db.pool.execute("""
        CREATE FUNCTION slow_receipt() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN PERFORM pg_sleep(0.5); RETURN NEW; END $$;
        CREATE TRIGGER slow_receipt BEFORE INSERT ON observation_receipts
          FOR EACH ROW EXECUTE FUNCTION slow_receipt();""")
    me = await owner(db, clock)
    await confirmed(db, clock, condition(LE_10, poll="PT2M"), definition_id="a", principal=me)
    await confirmed(db, clock, condition(LE_10, poll="PT1M"), definition_id="b", principal=me)
    gates = {"first": anyio.Event(), "second": anyio.Event()}
    entered = {"first": anyio.Event(), "second": anyio.Event()}
    clock.advance(120)
    first = clock.now()

    async def read(subject: str, at: datetime) -> Any:
        which = "first" if at == first else "second"
        entered[which].set()  # this poller has claimed its polls and is reading
        await gates[which].wait()
        return 11

    sources = registry_of(read, clock=clock)
    results: dict[str, Any] = {}
    async with Database.open(db_dsn, migrate=False, max_size=4) as other:
        async def run(name: str, database: Database) -> None:
            results[name] = (await poll_once(database, clock, sources, actor=name)).events

        async with anyio.create_task_group() as tg:
            tg.start_soon(run, "A", db)
            await entered["first"].wait()
            clock.advance(120)
            tg.start_soon(run, "B", other)
            await entered["second"].wait()
            gates["first"].set()
            gates["second"].set()
    assert sorted(e.definition_id for e in results["A"]) == ["a", "b"]
    assert sorted(e.definition_id for e in results["B"]) == ["a", "b"]
    statuses = await db.pool.fetch("SELECT status FROM condition_polls")
    assert {r["status"] for r in statuses} == {"decided"}


async def test_one_read_per_subject_and_poll_instant(db: Database, clock: FakeClock) -> None:
    """Seven definitions over two subjects, claimed three at a time: each subject is
    read once per poll instant (passes of one instant share the read), and every poll
    stores the reading of its own subject."""
    script = Script(default=9)
    sources = registry_of(script, clock=clock)
    me = await owner(db, clock)
    for n in range(7):
        subject = "AAPL" if n % 2 == 0 else "MSFT"
        await confirmed(db, clock, condition({**LE_10, "subject": subject}),
                        definition_id=f"d{n}", principal=me)
    for hour in (1, 2):
        clock.advance(HOUR)
        events = []
        while (report := await poll_once(db, clock, sources, actor="t", limit=3)).claimed:
            events += report.events
        assert sorted(e.definition_id for e in events) == [f"d{n}" for n in range(7)]
        at = utc(f"2026-06-01T0{hour}:00Z")
        assert sorted(s for s, t in script.calls if t == at) == ["AAPL", "MSFT"]
    receipts = await db.pool.fetch("SELECT definition_id, subject FROM observation_receipts")
    assert {(r["definition_id"], r["subject"]) for r in receipts} == {
        (f"d{n}", "AAPL" if n % 2 == 0 else "MSFT") for n in range(7)}
    assert len(receipts) == 14


async def test_definitions_of_one_spec_share_an_evaluation_per_instant_only(
        db: Database, clock: FakeClock) -> None:
    """Seven definitions of one spec (one spec_hash), claimed three at a time, over five
    poll instants whose readings alternate 9 and 11 against ``<= 10``: passes of one
    instant share the evaluation of its reading, yet every poll's verdict and receipt are
    those of its own instant's reading (an evaluation kept from an earlier instant, or
    from readings no longer kept, is never reused). The first edge fires; the later
    ones meet its task still pending (no worker here) and are skipped as overruns."""
    hours = [utc(f"2026-06-01T0{h}:00Z") for h in range(1, 6)]
    script = Script({at: 9 if n % 2 == 0 else 11 for n, at in enumerate(hours)})
    sources = registry_of(script, clock=clock)
    me = await owner(db, clock)
    for n in range(7):
        await confirmed(db, clock, condition(LE_10), definition_id=f"d{n}", principal=me)
    for _ in hours:
        clock.advance(HOUR)
        while (await poll_once(db, clock, sources, actor="t", limit=3)).claimed:
            pass
    rows = await db.pool.fetch(
        "SELECT p.definition_id, p.scheduled_for, p.verdict, p.action, r.value "
        "FROM condition_polls p JOIN observation_receipts r USING (tenant_id, definition_id, "
        "binding_id, slot) ORDER BY p.scheduled_for, p.definition_id")
    assert len(rows) == 7 * len(hours)
    for row in rows:
        n = hours.index(row["scheduled_for"])
        reading = 9 if n % 2 == 0 else 11
        assert row["value"] == Decimal(reading)
        assert row["verdict"] == ("true" if reading <= 10 else "false")
        assert row["action"] == ("none" if reading > 10 else "fired" if n == 0
                                 else "skipped_overrun")
    assert await db.pool.fetchval("SELECT count(*) FROM tasks") == 7


async def test_a_quiet_poll_decided_at_its_claim_is_stored_as_step_3_stores_it(
        db: Database, clock: FakeClock, tmp_path: Any) -> None:
    """The same nine definitions in two tenants, over seven poll instants whose readings
    go 11, 11, 9, 9, None, 11, 9 (false, false, true, true, unknown, false, true), in three
    modes (every_edge, every_edge with a 2 h cooldown, first_match). acme's are polled in
    one pass an instant, so step 3 decides every poll; globex's one definition a pass, so
    all but the first pass of an instant find the reading kept and decide their quiet polls
    at the claim. Every poll, receipt, condition state, occurrence and task is the same in
    both tenants, and so are the events; each subject is read once per instant and tenant
    registry."""
    hours = [utc(f"2026-06-01T0{h}:00Z") for h in range(1, 8)]
    values = dict(zip(hours, [11, 11, 9, 9, None, 11, 9], strict=True))
    modes = [{"mode": "every_edge"}, {"mode": "every_edge", "cooldown": "PT2H"},
             {"mode": "first_match"}]
    registries, events = {}, {}
    for tenant in ("acme", "globex"):
        me = await owner(db, clock, tenant)
        for n in range(9):
            subject = ("AAPL", "MSFT", "IBM")[n % 3]
            await confirmed(db, clock, condition({**LE_10, "subject": subject},
                                                 **modes[n // 3]),
                            definition_id=f"d{n}", principal=me)
        script = Script(values)
        registries[tenant] = (script, registry_of(script, clock=clock))
        events[tenant] = []
    worker = Worker(db, clock, AgentCatalog(), worker_id="w", artifact_root=tmp_path)
    for _ in hours:
        clock.advance(HOUR)
        for tenant, limit in (("acme", 100), ("globex", 1)):
            sources = registries[tenant][1]
            while (report := await poll_once(db, clock, sources, actor="t", limit=limit,
                                             tenant_id=tenant)).claimed:
                events[tenant] += [(e.definition_id, e.at, e.verdict, e.action, e.reason,
                                    e.task_id is not None) for e in report.events]
        while await worker.run_once() is not None:
            pass
    assert sorted(events["acme"]) == sorted(events["globex"])
    assert len(events["acme"]) == 9 * 7 - 3 * 4  # the first_match ones complete at 03:00
    for script, _ in registries.values():
        assert sorted(script.calls) == sorted((s, at) for s in ("AAPL", "MSFT", "IBM")
                                              for at in hours)

    for query in (
            "SELECT tenant_id, definition_id, slot, scheduled_for, revision, condition_key, "
            "superseded, status, verdict, action, reason, task_id IS NOT NULL, claimed_at, "
            "decided_at, read_at FROM condition_polls",
            "SELECT tenant_id, definition_id, slot, subject, value, status, verdict, as_of "
            "FROM observation_receipts",
            "SELECT tenant_id, definition_id, last_definite, latched, last_fired_at, "
            "decided_through, updated_at FROM condition_state",
            "SELECT tenant_id, definition_id, slot, decision, reason FROM occurrences",
            "SELECT tenant_id, definition_id, slot, status FROM tasks",
            "SELECT tenant_id, definition_id, status, next_due_at, cursor_at FROM definitions"):
        both = await by_tenant(db, query)
        assert both["acme"] == both["globex"], query
        assert both["acme"], query
    statuses = await db.pool.fetch("SELECT DISTINCT status FROM condition_polls")
    assert [r["status"] for r in statuses] == ["decided"]
    fired = await db.pool.fetchval("SELECT count(*) FROM tasks WHERE tenant_id = 'globex'")
    # every_edge: 03:00 and 07:00 (after an unknown and a false); with the cooldown too
    # (4 h apart); first_match: 03:00, then complete
    assert fired == 3 * 2 + 3 * 2 + 3


async def test_a_poll_the_store_refuses_at_its_claim_is_recorded_failed_all_the_same(
        db: Database, clock: FakeClock) -> None:
    """The database refuses the receipt of a quiet poll that would be decided at its claim
    (its reading kept from the instant's first pass): the claim's one statement fails, so
    the claim is made again without deciding anything in it, and step 3 records that
    poll 'failed' as it would have without the shortcut; the pass does not raise (a
    StoreError out of poll_once ends the supervisor's poll loop), and the next passes of
    the instant go on deciding their quiet polls at the claim."""
    await refuse_receipts_of(db, "boom")
    script = Script(default=11)
    sources = registry_of(script, clock=clock)
    me = await owner(db, clock)
    for name in ("a", "boom", "c"):
        await confirmed(db, clock, condition(LE_10), definition_id=name, principal=me)
    clock.advance(HOUR)
    passes = []
    while (report := await poll_once(db, clock, sources, actor="t", limit=1)).claimed:
        passes.append([(e.definition_id, e.verdict, e.action) for e in report.events])
    assert passes == [[("a", "false", "none")], [("boom", "false", "failed")],
                      [("c", "false", "none")]]
    at = utc("2026-06-01T01:00Z")
    assert script.calls == [("AAPL", at)]
    rows = await db.pool.fetch(
        "SELECT definition_id, slot, scheduled_for, superseded, status, read_at, verdict, "
        "action, reason, task_id, claimed_at, decided_at "
        "FROM condition_polls ORDER BY definition_id")
    none = "false: AAPL 11 USD/share <= 10 USD/share (false: re-armed)"
    assert [tuple(r) for r in rows] == [
        (name, "2026-06-01T01:00:00Z", at, 1, "decided", at, "false", action, reason, None,
         at, at)
        for name, action, reason in (
            ("a", "none", none),
            ("boom", "failed", "the store refused this poll's decision (condition_polls_decide: "
                               "receipt refused); nothing admitted"),
            ("c", "none", none))]
    receipts = await db.pool.fetch(
        "SELECT definition_id, slot, subject, value, status, verdict FROM observation_receipts "
        "ORDER BY definition_id")
    assert [tuple(r) for r in receipts] == [
        (name, "2026-06-01T01:00:00Z", "AAPL", Decimal(11), "ok", "false") for name in "ac"]
    states = await db.pool.fetch(
        "SELECT definition_id, revision, last_definite, latched, last_fired_at, "
        "decided_through, updated_at FROM condition_state ORDER BY definition_id")
    assert [tuple(r) for r in states] == [(name, 1, False, False, None, at, at)
                                          for name in "ac"]
    assert await db.pool.fetchval("SELECT count(*) FROM occurrences") == 0
    assert await db.pool.fetchval("SELECT count(*) FROM tasks") == 0


async def test_the_events_of_a_pass_decided_at_its_claim_are_in_definition_order(
        db: Database, clock: FakeClock) -> None:
    """A pass whose every poll is decided at its claim reports its events in (tenant,
    definition) order, as a pass that decides them in step 3 does — not in the claim's
    order (next_due_at first): 'm' and 'z' poll every 30 minutes and missed 00:30, 'a'
    polls hourly; at 01:00 the first pass (limit 1) claims 'm' and reads AAPL, the
    second finds the reading kept and decides 'z' and 'a' at their claim."""
    sources = registry_of(Script(default=11), clock=clock)
    me = await owner(db, clock)
    for name, every in (("m", "PT30M"), ("z", "PT30M"), ("a", "PT1H")):
        await confirmed(db, clock, condition(LE_10, poll=every), definition_id=name,
                        principal=me)
    first = (await poll_once(db, clock, sources, actor="t")).events
    assert [(e.definition_id, e.action) for e in first] == [("a", "none"), ("m", "none"),
                                                           ("z", "none")]
    clock.advance(HOUR)
    due = await db.pool.fetch("SELECT definition_id, next_due_at FROM definitions "
                              "ORDER BY next_due_at, definition_id")
    assert [(r["definition_id"], r["next_due_at"].minute) for r in due] == [
        ("m", 30), ("z", 30), ("a", 0)]
    one = (await poll_once(db, clock, sources, actor="t", limit=1)).events
    assert [(e.definition_id, e.action) for e in one] == [("m", "none")]
    two = await poll_once(db, clock, sources, actor="t")
    assert [(e.definition_id, e.at, e.action) for e in two.events] == [
        ("a", utc("2026-06-01T01:00Z"), "none"), ("z", utc("2026-06-01T01:00Z"), "none")]
    assert await db.pool.fetchval(
        "SELECT count(*) FROM condition_polls WHERE claimed_at = decided_at") == 6


@pytest.mark.parametrize("fault", [Fault.DROP_ACK, Fault.DROP_COMMIT])
async def test_a_lost_commit_of_a_claim_that_decides_quiet_polls(
        db: Database, proxied_db: Database, proxy: PgProxy, clock: FakeClock,
        fault: Fault) -> None:
    """The COMMIT of a claim that decides its quiet polls (their reading kept from the
    instant's first pass) loses its acknowledgement: the pass raises CommitOutcomeUnknown
    (the loop's backoff), and whether the server committed (DROP_ACK) or not
    (DROP_COMMIT) the next pass leaves exactly what a pass without the fault stores —
    each poll once, decided, with its receipt, state and one charge of its budget."""
    script = Script(default=11)
    sources = registry_of(script, clock=clock)
    me = await owner(db, clock)
    for name in ("a", "b", "c"):
        await confirmed(db, clock, condition(LE_10, limits={"max_polls_per_period": 5}),
                        definition_id=name, principal=me)
    clock.advance(HOUR)
    first = (await poll_once(db, clock, sources, actor="t", limit=1)).events
    assert [(e.definition_id, e.action) for e in first] == [("a", "none")]
    proxy.arm(fault)  # the next COMMIT through the proxy: the second pass's claim
    with pytest.raises(DatabaseUnavailable):
        await poll_once(proxied_db, clock, sources, actor="t")
    assert proxy.statistics().faults == 1
    again = (await poll_once(db, clock, sources, actor="t")).events
    assert [(e.definition_id, e.action) for e in again] == (
        [] if fault is Fault.DROP_ACK else [("b", "none"), ("c", "none")])
    assert (await poll_once(db, clock, sources, actor="t")).claimed == 0
    at = utc("2026-06-01T01:00Z")
    assert script.calls == [("AAPL", at)]
    rows = await db.pool.fetch(
        "SELECT definition_id, slot, superseded, status, read_at, verdict, action, task_id, "
        "claimed_at, decided_at FROM condition_polls ORDER BY definition_id")
    assert [tuple(r) for r in rows] == [
        (name, "2026-06-01T01:00:00Z", 1, "decided", at, "false", "none", None, at, at)
        for name in "abc"]
    receipts = await db.pool.fetch(
        "SELECT definition_id, subject, value, verdict FROM observation_receipts "
        "ORDER BY definition_id")
    assert [tuple(r) for r in receipts] == [(name, "AAPL", Decimal(11), "false")
                                            for name in "abc"]
    states = await db.pool.fetch(
        "SELECT definition_id, last_definite, latched, decided_through FROM condition_state "
        "ORDER BY definition_id")
    assert [tuple(r) for r in states] == [(name, False, False, at) for name in "abc"]
    used = await db.pool.fetch("SELECT definition_id, used FROM poll_budget_ledger "
                               "ORDER BY definition_id")
    assert [tuple(r) for r in used] == [(name, 1) for name in "abc"]
    due = await db.pool.fetch("SELECT DISTINCT next_due_at FROM definitions")
    assert [r["next_due_at"] for r in due] == [utc("2026-06-01T02:00Z")]


async def test_a_poll_decided_at_its_claim_overtakes_an_older_one_still_reading(
        db: Database, db_dsn: str, clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> None:
    """Supervisor A claims 00:01 of 'c' and 'd' and hangs in its read (true). Supervisor
    B (its own registry) polls 00:02 one definition a pass: 'c' reads AAPL (false) and is
    decided in step 3; 'd' finds the reading kept and is decided at its claim (quiet:
    false) while A's 00:01 of 'd' is still 'reading'. A then decides 00:01: both polls are
    superseded (B's decided first; the true reading fires nothing and stores no state),
    and 00:03 (true) is an edge for both, after the false."""
    release, reading = anyio.Event(), anyio.Event()

    async def read(subject: str, at: datetime) -> Any:
        if at.minute == 1:
            reading.set()
            await release.wait()
            return 9
        return 11 if at.minute == 2 else 9

    stepped: list[tuple[str, str, int]] = []
    decide = poller_module.decide_polls

    async def counted(db_: Database, clock_: Any, chunk: Any, actor: str, *args: Any) -> Any:
        stepped.extend((actor, c.item.definition_id, c.slot.scheduled_for.minute)
                       for c, _, _ in chunk)
        return await decide(db_, clock_, chunk, actor, *args)

    monkeypatch.setattr(poller_module, "decide_polls", counted)
    me = await owner(db, clock)
    for name in ("c", "d"):
        await confirmed(db, clock, condition(LE_10, poll="PT1M"), definition_id=name,
                        principal=me)
    clock.advance(60)
    slow: list[Any] = []
    async with Database.open(db_dsn, migrate=False, max_size=2) as other:
        b_sources = registry_of(read, clock=clock)

        async def poller_a() -> None:
            slow.extend((await poll_once(db, clock, registry_of(read, clock=clock),
                                         actor="a")).events)

        async with anyio.create_task_group() as tg:
            tg.start_soon(poller_a)
            await reading.wait()  # A has claimed 00:01 of c and d and waits in its read
            clock.advance(60)
            fast = [(e.definition_id, e.verdict, e.action) for n in (1, 2) for e in (
                await poll_once(other, clock, b_sources, actor="b", limit=1)).events]
            reading_d = await db.pool.fetch(
                "SELECT to_char(scheduled_for, 'HH24:MI') AS at, status, action "
                "FROM condition_polls WHERE definition_id = 'd' ORDER BY scheduled_for")
            release.set()
    assert fast == [("c", "false", "none"), ("d", "false", "none")]
    # B's 00:02 of 'd' was decided at its claim, never in step 3
    assert sorted(stepped) == [("a", "c", 1), ("a", "d", 1), ("b", "c", 2)]
    assert [tuple(r) for r in reading_d] == [("00:01", "reading", None),
                                             ("00:02", "decided", "none")]
    assert [(e.definition_id, e.verdict, e.action) for e in slow] == [
        ("c", "true", "superseded"), ("d", "true", "superseded")]
    t1, t2 = utc("2026-06-01T00:01Z"), utc("2026-06-01T00:02Z")
    rows = await db.pool.fetch(
        "SELECT definition_id, scheduled_for, claimed_by, claimed_at, read_at, verdict, "
        "action, reason, task_id, decided_at FROM condition_polls ORDER BY definition_id, "
        "scheduled_for")
    overtaken = ("overtaken: the poll of 2026-06-01T00:02:00Z was decided first; this older "
                 "reading changes nothing (true: AAPL 9 USD/share <= 10 USD/share)")
    none = "false: AAPL 11 USD/share <= 10 USD/share (false: re-armed)"
    assert [tuple(r) for r in rows] == [
        row for name in "cd" for row in (
            (name, t1, "a", t1, t1, "true", "superseded", overtaken, None, t2),
            (name, t2, "b", t2, t2, "false", "none", none, None, t2))]
    states = await db.pool.fetch("SELECT definition_id, last_definite, latched, "
                                 "last_fired_at, decided_through FROM condition_state "
                                 "ORDER BY definition_id")
    assert [tuple(r) for r in states] == [(name, False, False, None, t2) for name in "cd"]
    receipts = await db.pool.fetch("SELECT definition_id, slot, value, verdict FROM "
                                   "observation_receipts ORDER BY definition_id, slot")
    assert [tuple(r) for r in receipts] == [
        row for name in "cd" for row in ((name, "2026-06-01T00:01:00Z", Decimal(9), "true"),
                                         (name, "2026-06-01T00:02:00Z", Decimal(11), "false"))]
    assert await db.pool.fetchval("SELECT count(*) FROM tasks") == 0
    clock.advance(60)
    later = (await poll_once(db, clock, registry_of(read, clock=clock), actor="c")).events
    assert [(e.definition_id, e.verdict, e.action) for e in later] == [
        ("c", "true", "fired"), ("d", "true", "fired")]
    assert await db.pool.fetchval("SELECT count(*) FROM tasks") == 2


async def test_changes_between_the_passes_of_an_instant_store_what_one_pass_stores(
        db: Database, clock: FakeClock, tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same seven definitions in two tenants over five hourly instants (readings 11,
    9, unknown, 11, 9). acme polls each instant in one pass (step 3 decides every poll);
    globex one definition a pass, its first pass reading AAPL for 'a0', so the later
    passes decide their quiet polls at the claim — and between its first and second pass
    (before acme's one pass) the definitions change: at 02:00 'd' is reconfirmed with a
    new threshold (fresh state) and 'e' paused; at 03:00 'e' resumed and 'f' cancelled.
    'b' has a budget of two polls a day, 'c' a 4 h cooldown, 'g' is first_match. Every
    poll, receipt, state, budget, occurrence, task and definition is the same in both
    tenants, and so are the events; in globex only 'a0' and the polls that fire went
    through step 3."""
    hours = [utc(f"2026-06-01T0{h}:00Z") for h in range(1, 6)]
    values = dict(zip(hours, [11, 9, None, 11, 9], strict=True))
    specs = {"a0": condition(LE_10), "b": condition(LE_10, limits={"max_polls_per_period": 2}),
             "c": condition(LE_10, cooldown="PT4H"), "d": condition(LE_10),
             "e": condition(LE_10), "f": condition(LE_10),
             "g": condition(LE_10, mode="first_match")}
    principals, registries = {}, {}
    events: dict[str, list[tuple[Any, ...]]] = {"acme": [], "globex": []}
    for tenant in ("acme", "globex"):
        principals[tenant] = me = await owner(db, clock, tenant)
        for name, spec in specs.items():
            await confirmed(db, clock, spec, definition_id=name, principal=me)
        registries[tenant] = registry_of(Script(values), clock=clock)

    async def change(tenant: str, hour: int) -> None:
        me = principals[tenant]
        if hour == 2:
            parsed = parse_spec({"version": 1, **condition(
                {**LE_10, "threshold": "12 USD/share"})})
            proposal = await propose(db, clock, tenant_id=tenant, definition_id="d",
                                     owner_user_id="alice", spec=parsed,
                                     proposed_by="agent:test", based_on=1)
            await confirm(db, clock, me, definition_id="d", revision=proposal.revision,
                          spec_hash=proposal.spec_hash)
            await pause(db, clock, me, tenant, "e")
        elif hour == 3:
            await resume(db, clock, me, tenant, "e")
            await cancel(db, clock, me, tenant, "f")

    async def passes(tenant: str, limit: int) -> list[str]:
        claimed = []
        while (report := await poll_once(db, clock, registries[tenant], actor="t",
                                         limit=limit, tenant_id=tenant)).claimed:
            events[tenant] += [(e.definition_id, e.at, e.verdict, e.action, e.reason,
                                e.revision, e.task_id is not None) for e in report.events]
            claimed += [e.definition_id for e in report.events]
        return claimed

    stepped: dict[str, set[tuple[str, int]]] = {"acme": set(), "globex": set()}
    decide = poller_module.decide_polls

    async def counted(db_: Database, clock_: Any, chunk: Any, *args: Any) -> Any:
        for claim, _, _ in chunk:
            stepped[claim.item.tenant_id].add((claim.item.definition_id,
                                               claim.slot.scheduled_for.hour))
        return await decide(db_, clock_, chunk, *args)

    monkeypatch.setattr(poller_module, "decide_polls", counted)
    worker = Worker(db, clock, AgentCatalog(), worker_id="w", artifact_root=tmp_path)
    for hour in range(1, 6):
        clock.advance(HOUR)
        await change("acme", hour)
        await passes("acme", 100)
        first = await poll_once(db, clock, registries["globex"], actor="t", limit=1,
                                tenant_id="globex")
        assert [e.definition_id for e in first.events] == ["a0"]
        events["globex"] += [(e.definition_id, e.at, e.verdict, e.action, e.reason,
                              e.revision, e.task_id is not None) for e in first.events]
        await change("globex", hour)
        await passes("globex", 1)
        while await worker.run_once() is not None:
            pass
    assert events["acme"] == sorted(events["acme"], key=lambda e: e[1])
    assert sorted(events["acme"]) == sorted(events["globex"])

    for query in (
            "SELECT tenant_id, definition_id, slot, scheduled_for, revision, fence, "
            "condition_key, superseded, status, verdict, action, reason, "
            "task_id IS NOT NULL, claimed_at, decided_at, read_at FROM condition_polls",
            "SELECT tenant_id, definition_id, slot, subject, value, status, verdict, as_of, "
            "fetched_at, observation_id FROM observation_receipts",
            "SELECT tenant_id, definition_id, condition_key, revision, last_definite, latched, "
            "last_fired_at, decided_through, updated_at FROM condition_state",
            "SELECT tenant_id, definition_id, period_start, poll_limit, used "
            "FROM poll_budget_ledger",
            "SELECT tenant_id, definition_id, slot, revision, decision, reason FROM occurrences",
            "SELECT tenant_id, definition_id, slot, revision, status FROM tasks",
            "SELECT tenant_id, definition_id, status, fence, effective_revision, next_due_at, "
            "cursor_at, slots_seen FROM definitions"):
        both = await by_tenant(db, query)
        assert both["acme"] == both["globex"], query
        assert both["acme"], query
    polled = await db.pool.fetch(
        "SELECT definition_id, string_agg(to_char(scheduled_for, 'HH24') || ' ' || "
        "coalesce(verdict, '-') || ' ' || action || ' ' || revision, ', ' "
        "ORDER BY scheduled_for) AS polls FROM condition_polls WHERE tenant_id = 'globex' "
        "GROUP BY definition_id ORDER BY definition_id")
    assert {r["definition_id"]: r["polls"] for r in polled} == {
        "a0": "01 false none 1, 02 true fired 1, 03 unknown none 1, 04 false none 1, "
              "05 true fired 1",
        "b": "01 false none 1, 02 true fired 1, 03 - denied_poll_budget 1, "
             "04 - denied_poll_budget 1, 05 - denied_poll_budget 1",
        "c": "01 false none 1, 02 true fired 1, 03 unknown none 1, 04 false none 1, "
             "05 true suppressed_cooldown 1",
        "d": "01 false none 1, 02 true fired 2, 03 unknown none 2, 04 true none 2, "
             "05 true none 2",
        "e": "01 false none 1, 04 false none 1, 05 true fired 1",
        "f": "01 false none 1, 02 true fired 1",
        "g": "01 false none 1, 02 true fired 1"}
    fires = {("b", 2), ("c", 2), ("d", 2), ("e", 5), ("f", 2), ("g", 2)}
    assert stepped["globex"] == {("a0", h) for h in range(1, 6)} | fires
    assert len(stepped["acme"]) == 24  # every poll but the three denied
