"""A notice when the agreed run did not happen (issue 19, item 7), on a fake clock against
real PostgreSQL: a task that ends failed, timed_out or budget_exceeded, and an
occurrence recorded skipped_expired or waiting in review_required, each send one
``task.not_run`` notice through the same outbox, channels and preferences (quiet hours
included) as a report, with high importance; the notice references the history entry
and never carries a report."""

from __future__ import annotations

import json
from datetime import UTC, datetime, time
from pathlib import Path
from typing import Any

import anyio
import pytest
from _helpers import confirmed, utc
from standardwebhooks import Webhook

from watchkeeper.outbox import Dispatcher, FileChannel, Notice, signed_headers, webhook_body
from watchkeeper.runtime._errors import BudgetExceeded
from watchkeeper.runtime.engine._agents import AgentCatalog, AgentContext, AgentResult
from watchkeeper.runtime.engine._clock import FakeClock
from watchkeeper.runtime.engine._delivery_store import PgDeliveryStore
from watchkeeper.runtime.engine._scheduler import tick
from watchkeeper.runtime.engine._worker import Worker
from watchkeeper.runtime.store._db import Database
from watchkeeper.runtime.usecases import HistoryQuery, PreferencesInput, history, set_preferences

pytestmark = pytest.mark.anyio

START = "2026-06-01T00:00:00Z"
SLOT = "2026-06-01T00:00:00Z"
NOTICE_KEYS = {"type", "tenant_id", "definition_id", "binding_id", "slot", "kind",
               "owner_user_id", "outcome", "reason", "task_id", "task_ref", "history_ref",
               "scheduled_for", "recorded_at", "importance", "headline", "delivery_id",
               "attempt"}


async def definition(db: Database, clock: FakeClock, **spec: Any) -> None:
    """alice's hourly definition d1 (first slot at START) notifying file 'alice.jsonl'."""
    await confirmed(db, clock, {"trigger": {"type": "interval", "every": 3600, "anchor": START},
                                "agent": {"name": "scripted"},
                                "delivery": [{"channel": "file",
                                              "destination": "alice.jsonl"}], **spec})


async def run_task(db: Database, clock: FakeClock, tmp_path: Path, behaviour: Any,
                   **spec: Any) -> str:
    """Admit the first slot of a definition running ``behaviour`` and run it once; the
    task's status."""
    await definition(db, clock, **spec)
    clock.advance(1)
    assert (await tick(db, clock)).admitted == 1
    catalog = AgentCatalog()

    class Agent:
        async def run(self, ctx: AgentContext) -> AgentResult:
            return await behaviour(ctx)

    catalog.add("scripted", Agent())
    worker = Worker(db, clock, catalog, worker_id="w", artifact_root=tmp_path,
                    lease_seconds=600)
    done: list[Any] = []

    async def run_once() -> None:
        done.append(await worker.run_once())

    async with anyio.create_task_group() as tg:
        tg.start_soon(run_once)
        if spec.get("limits", {}).get("deadline"):
            await clock.wait_for_sleepers(3)
            clock.advance(spec["limits"]["deadline"])
    assert done[0] is not None
    return str(done[0].status)


async def dispatched(db: Database, clock: FakeClock, tmp_path: Path) -> list[dict[str, Any]]:
    """Run one dispatch pass with the file channel; the lines written to alice.jsonl."""
    channels = {"file": FileChannel(tmp_path / "notices")}
    await Dispatcher(PgDeliveryStore(db, clock), channels, now=clock.now,
                     owner="t").dispatch_once()
    path = tmp_path / "notices" / "acme" / "alice.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def expected(outcome: str, *, task: int | None, reason: str, recorded_at: str,
             headline: str) -> dict[str, Any]:
    """The notice body computed from the test's own facts."""
    return {"type": "task.not_run", "tenant_id": "acme", "definition_id": "d1",
            "binding_id": "owner", "slot": SLOT, "kind": "scheduled",
            "owner_user_id": "alice", "outcome": outcome, "reason": reason,
            "task_id": task, "task_ref": None if task is None else f"task:acme/{task}",
            "history_ref": f"history:acme/d1/owner/{SLOT}/scheduled",
            "scheduled_for": SLOT, "recorded_at": recorded_at, "importance": "high",
            "headline": headline, "attempt": 1}


async def one_notice(db: Database, clock: FakeClock, tmp_path: Path) -> dict[str, Any]:
    (line,) = await dispatched(db, clock, tmp_path)
    assert set(line) == NOTICE_KEYS  # a reference to the history entry; no report fields
    assert not {"content_sha256", "report_ref", "output_ref", "committed_at"} & set(line)
    line.pop("delivery_id")
    return line


async def test_a_failed_task_sends_a_not_run_notice(db: Database, tmp_path: Path) -> None:
    """An agent that raises on its only attempt: task failed, one task.not_run notice
    (outcome failed, the reason, the task and the history entry, importance high)."""
    clock = FakeClock(utc(START))

    async def broken(ctx: AgentContext) -> AgentResult:
        raise ValueError("the quote service is down")

    assert await run_task(db, clock, tmp_path, broken, limits={"max_attempts": 1}) == "failed"
    task = await db.pool.fetchval("SELECT task_id FROM tasks")
    assert await one_notice(db, clock, tmp_path) == expected(
        "failed", task=task, reason="ValueError: the quote service is down",
        recorded_at="2026-06-01T00:00:01Z", headline="d1: the run of 2026-06-01T00:00:00Z failed")


async def test_a_timed_out_task_sends_a_not_run_notice(db: Database, tmp_path: Path) -> None:
    """A run that would take 1000 s under a 60 s deadline: timed_out, one notice."""
    clock = FakeClock(utc(START))

    async def endless(ctx: AgentContext) -> AgentResult:
        await clock.sleep(1000)
        return AgentResult("never")

    assert await run_task(db, clock, tmp_path, endless, limits={"deadline": 60}) == "timed_out"
    task = await db.pool.fetchval("SELECT task_id FROM tasks")
    assert await one_notice(db, clock, tmp_path) == expected(
        "timed_out", task=task, reason="the task deadline passed",
        recorded_at="2026-06-01T00:01:01Z",
        headline="d1: the run of 2026-06-01T00:00:00Z timed out")


async def test_a_run_stopped_by_its_budget_sends_budget_exceeded(db: Database,
                                                                 tmp_path: Path) -> None:
    """An agent charging 2 model requests under max_model_requests 1: the run ends
    budget_exceeded, the task failed, and the notice's outcome is budget_exceeded."""
    clock = FakeClock(utc(START))

    async def spender(ctx: AgentContext) -> AgentResult:
        ctx.budget.charge(model_requests=2)
        return AgentResult("# never\n")

    status = await run_task(db, clock, tmp_path, spender, limits={"max_model_requests": 1})
    assert status == "failed"
    assert await db.pool.fetchval("SELECT outcome FROM runs") == "budget_exceeded"
    notice = await one_notice(db, clock, tmp_path)
    assert notice["outcome"] == "budget_exceeded"
    assert notice["reason"].startswith(f"{BudgetExceeded.__name__}: model_requests: 2 would "
                                       "exceed the task's limit of 1")
    assert notice["headline"] == "d1: the run of 2026-06-01T00:00:00Z stopped at its budget"


@pytest.mark.parametrize(("policy", "decision", "headline"), [
    ("skip_expired", "skipped_expired", "d1: 2026-06-01T00:00:00Z was skipped, too late to run"),
    ("review_late", "review_required",
     "d1: 2026-06-01T00:00:00Z is late and waits for your review"),
])
async def test_a_late_occurrence_sends_a_not_run_notice(db: Database, tmp_path: Path,
                                                        policy: str, decision: str,
                                                        headline: str) -> None:
    """The tick comes 11 min after the slot (grace 10 min): the occurrence is recorded
    skipped_expired (or review_required), no task, and one notice names the history
    entry, with the occurrence's reason; a second tick sends nothing more."""
    clock = FakeClock(utc(START))
    await definition(db, clock, lateness={"policy": policy})
    clock.advance(660)
    await tick(db, clock)
    row = await db.pool.fetchrow("SELECT decision, reason FROM occurrences")
    assert row["decision"] == decision
    assert await one_notice(db, clock, tmp_path) == expected(
        decision, task=None, reason=row["reason"], recorded_at="2026-06-01T00:11:00Z",
        headline=headline)
    await tick(db, clock)
    assert len(await dispatched(db, clock, tmp_path)) == 1
    (entry,) = (await history(db, HistoryQuery("acme", "d1"))).entries
    assert (entry["slot"], entry["kind"], entry["decision"]) == (SLOT, "scheduled", decision)


async def test_a_not_run_notice_waits_for_the_end_of_quiet_hours(db: Database,
                                                                 tmp_path: Path) -> None:
    """alice's quiet hours 22:00-07:00 UTC; a task fails at 23:00:01Z: its notice is
    deferred (pending, not an attempt) until 07:00Z, then delivered."""
    clock = FakeClock(utc("2026-06-01T23:00:00Z"))

    async def broken(ctx: AgentContext) -> AgentResult:
        raise ValueError("down")

    await confirmed(db, clock, {"trigger": {"type": "interval", "every": 3600,
                                            "anchor": "2026-06-01T23:00:00Z"},
                                "agent": {"name": "scripted"}, "limits": {"max_attempts": 1},
                                "delivery": [{"channel": "file", "destination": "alice.jsonl"}]})
    await set_preferences(db, clock, "acme", "alice", PreferencesInput(quiet=(time(22), time(7))))
    clock.advance(1)
    await tick(db, clock)
    catalog = AgentCatalog()

    class Agent:
        async def run(self, ctx: AgentContext) -> AgentResult:
            return await broken(ctx)

    catalog.add("scripted", Agent())
    worker = Worker(db, clock, catalog, worker_id="w", artifact_root=tmp_path)
    assert (await worker.run_once()).status == "failed"  # type: ignore[union-attr]
    assert await dispatched(db, clock, tmp_path) == []
    row = await db.pool.fetchrow("SELECT status, next_attempt_at, attempts FROM deliveries")
    assert tuple(row) == ("pending", utc("2026-06-02T07:00:00Z"), 0)
    clock.set_wall(utc("2026-06-02T06:59:59Z"))
    assert await dispatched(db, clock, tmp_path) == []
    clock.set_wall(utc("2026-06-02T07:00:00Z"))
    (line,) = await dispatched(db, clock, tmp_path)
    assert (line["type"], line["outcome"]) == ("task.not_run", "failed")


def test_the_webhook_event_type_is_task_not_run() -> None:
    """A webhook carries the payload's type as the Standard Webhooks ``type`` (and not in
    ``data``), its ``recorded_at`` as the timestamp, and verifies with the library."""
    notice = Notice("acme", "6f1c0c3e-0000-4000-8000-000000000001", "webhook", "ops", 1,
                    {"type": "task.not_run", "outcome": "failed",
                     "recorded_at": "2026-06-01T00:00:01Z"})
    body = json.loads(webhook_body(notice))
    assert body == {"type": "task.not_run", "timestamp": "2026-06-01T00:00:01Z",
                    "data": {"delivery_id": notice.delivery_id, "outcome": "failed",
                             "recorded_at": "2026-06-01T00:00:01Z"}}
    secret = "whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
    text = webhook_body(notice)
    headers = signed_headers(notice.delivery_id, text, (secret,), datetime.now(UTC))
    assert Webhook(secret).verify(text, headers)["type"] == "task.not_run"
