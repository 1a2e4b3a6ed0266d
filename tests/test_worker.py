"""Workers against real PostgreSQL with a fake clock: leases and renewal, fencing of a
stale worker, retries within the deadline, cancellation, the effect gate, the output
promise, and dispatch-time expiry."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
from _helpers import confirmed, occurrences, tasks, utc

from watchkeeper.runtime.engine._agents import AgentCatalog, AgentContext, AgentResult
from watchkeeper.runtime.engine._clock import FakeClock
from watchkeeper.runtime.engine._scheduler import tick
from watchkeeper.runtime.engine._worker import Worker
from watchkeeper.runtime.store._db import Database
from watchkeeper.runtime.usecases import OPERATOR, cancel

pytestmark = pytest.mark.anyio

START = "2026-06-01T00:00:00Z"


class Scripted:
    """An agent whose behaviour per attempt is given by a function (kept by the test)."""

    def __init__(self, behaviour: Any) -> None:
        self.behaviour = behaviour
        self.calls: list[int] = []

    async def run(self, ctx: AgentContext) -> AgentResult:
        self.calls.append(ctx.attempt)
        return await self.behaviour(ctx)


async def admitted_task(db: Database, clock: FakeClock, agent: Scripted, tmp_path: Path,
                        **spec: Any) -> tuple[AgentCatalog, dict[str, Any]]:
    """One hourly definition running ``agent``, its first slot admitted at START+1s."""
    catalog = AgentCatalog()
    catalog.add("scripted", agent)
    body = {"trigger": {"type": "interval", "every": 3600, "anchor": START},
            "agent": {"name": "scripted"}, **spec}
    await confirmed(db, clock, body)
    clock.advance(1)
    assert (await tick(db, clock)).admitted == 1
    return catalog, (await tasks(db))[0]


def worker(db: Database, clock: FakeClock, catalog: AgentCatalog, tmp_path: Path, name: str,
           **options: Any) -> Worker:
    return Worker(db, clock, catalog, worker_id=name, artifact_root=tmp_path, **options)


async def runs(db: Database) -> list[tuple[int, str, int]]:
    rows = await db.pool.fetch("SELECT attempt, outcome, lease_token FROM runs ORDER BY run_id")
    return [tuple(r) for r in rows]


async def test_long_run_keeps_its_lease_by_renewing(db: Database, tmp_path: Path) -> None:
    """A 180 s run under a 60 s lease renews every 20 s and runs once; nobody takes it over."""
    clock = FakeClock(utc(START))

    async def slow(ctx: AgentContext) -> AgentResult:
        await clock.sleep(180)
        return AgentResult("# done\n")

    agent = Scripted(slow)
    catalog, _ = await admitted_task(db, clock, agent, tmp_path)
    first = worker(db, clock, catalog, tmp_path, "A", lease_seconds=60)
    rival = worker(db, clock, catalog, tmp_path, "B", lease_seconds=60)
    assert first.renew_every == 20
    outcome: list[Any] = []
    async with anyio.create_task_group() as tg:
        claimed = await first.claim()
        assert claimed is not None
        tg.start_soon(lambda: _keep(outcome, first.execute(claimed)))
        await clock.wait_for_sleepers(3)  # agent, deadline watchdog, renewal
        for step in range(36):
            clock.advance(5)
            if step < 35:
                await clock.wait_for_sleepers(3)
                assert await rival.claim() is None
            if step == 4:  # t = 25 s: renewed at 20 s for another 60 s
                row = await db.pool.fetchrow("SELECT lease_expires_at FROM tasks")
                assert row["lease_expires_at"] == utc(START) + timedelta(seconds=1 + 20 + 60)
    assert outcome[0].status == "completed"
    assert agent.calls == [1]
    assert await runs(db) == [(1, "succeeded", claimed["lease_token"])]


async def _keep(box: list[Any], awaitable: Any) -> None:
    box.append(await awaitable)


async def test_stale_worker_commit_is_rejected(db: Database, tmp_path: Path) -> None:
    """A worker blocked past its lease is taken over with a newer token; its late report
    commit changes nothing and is recorded as rejected on its own run."""
    clock = FakeClock(utc(START))
    release = anyio.Event()

    async def behaviour(ctx: AgentContext) -> AgentResult:
        if ctx.attempt == 1:
            await release.wait()
            return AgentResult("# stale report\n")
        return AgentResult("# fresh report\n")

    catalog, _ = await admitted_task(db, clock, Scripted(behaviour), tmp_path)
    blocked = worker(db, clock, catalog, tmp_path, "A", lease_seconds=60, renew_every=1000)
    rival = worker(db, clock, catalog, tmp_path, "B", lease_seconds=60)
    stale: list[Any] = []
    async with anyio.create_task_group() as tg:
        claimed = await blocked.claim()
        assert claimed is not None
        tg.start_soon(lambda: _keep(stale, blocked.execute(claimed)))
        await clock.wait_for_sleepers(2)
        clock.advance(61)
        fresh = await rival.run_once()
        assert fresh is not None and (fresh.attempt, fresh.status) == (2, "completed")
        release.set()
    assert stale[0].status == "stale"
    (task,) = await tasks(db)
    assert (task["status"], task["lease_token"]) == ("completed", claimed["lease_token"] + 1)
    report = await db.pool.fetchrow("SELECT content_md, run_id FROM reports")
    assert report["content_md"] == "# fresh report\n"
    assert [(a, o) for a, o, _ in await runs(db)] == [(1, "rejected_stale"), (2, "succeeded")]


async def test_failed_run_is_retried_as_a_new_attempt(db: Database, tmp_path: Path) -> None:
    """Attempt 1 raises, attempt 2 succeeds after the backoff; the occurrence is not re-triggered."""
    clock = FakeClock(utc(START))

    async def flaky(ctx: AgentContext) -> AgentResult:
        if ctx.attempt == 1:
            raise RuntimeError("upstream 503")
        return AgentResult("# ok\n")

    agent = Scripted(flaky)
    catalog, _ = await admitted_task(db, clock, agent, tmp_path)
    w = worker(db, clock, catalog, tmp_path, "A")
    first = await w.run_once()
    assert first is not None and first.status == "pending"
    (task,) = await tasks(db)
    assert (task["status"], task["attempts"]) == ("pending", 1)
    assert task["not_before"] <= clock.now() + timedelta(seconds=60)  # backoff capped
    clock.advance(60)
    second = await w.run_once()
    assert second is not None and second.status == "completed"
    assert agent.calls == [1, 2]
    assert [(a, o) for a, o, _ in await runs(db)] == [(1, "failed"), (2, "succeeded")]
    assert len(await occurrences(db)) == 1


async def test_attempts_are_bounded(db: Database, tmp_path: Path) -> None:
    """An always-failing agent with max_attempts = 2 fails the task after two runs."""
    clock = FakeClock(utc(START))

    async def broken(ctx: AgentContext) -> AgentResult:
        raise ValueError("bad input")

    catalog, _ = await admitted_task(db, clock, Scripted(broken), tmp_path,
                                     limits={"max_attempts": 2})
    w = worker(db, clock, catalog, tmp_path, "A")
    assert (await w.run_once()).status == "pending"  # type: ignore[union-attr]
    clock.advance(120)
    final = await w.run_once()
    assert final is not None and final.status == "failed"
    assert "ValueError: bad input" in final.reason
    assert [o for _, o, _ in await runs(db)] == ["failed", "failed"]


async def test_deadline_times_the_run_out(db: Database, tmp_path: Path) -> None:
    """A run that would take 1000 s under a 60 s task deadline ends timed_out."""
    clock = FakeClock(utc(START))

    async def endless(ctx: AgentContext) -> AgentResult:
        await clock.sleep(1000)
        return AgentResult("never")

    catalog, _ = await admitted_task(db, clock, Scripted(endless), tmp_path,
                                     limits={"deadline": 60})
    w = worker(db, clock, catalog, tmp_path, "A", lease_seconds=600)
    result: list[Any] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: _keep(result, w.run_once()))
        await clock.wait_for_sleepers(3)
        clock.advance(60)
    assert result[0].status == "timed_out"
    assert [o for _, o, _ in await runs(db)] == ["timed_out"]


async def test_cancel_running_stops_the_task_at_the_next_renewal(db: Database,
                                                               tmp_path: Path) -> None:
    """cancel --running sets a request that the renewal loop sees; the run ends cancelled."""
    clock = FakeClock(utc(START))

    async def endless(ctx: AgentContext) -> AgentResult:
        await clock.sleep(1000)
        return AgentResult("never")

    catalog, _ = await admitted_task(db, clock, Scripted(endless), tmp_path)
    w = worker(db, clock, catalog, tmp_path, "A", lease_seconds=60)
    result: list[Any] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: _keep(result, w.run_once()))
        await clock.wait_for_sleepers(3)
        await cancel(db, clock, OPERATOR, "acme", "d1", running=True)
        clock.advance(20)
    assert result[0].status == "cancelled"
    (task,) = await tasks(db)
    assert task["status"] == "cancelled"


async def test_effect_is_never_repeated_by_a_retry(db: Database, tmp_path: Path) -> None:
    """Attempt 1 makes the effect then fails; attempt 2 gets the recorded result, no new call."""
    clock = FakeClock(utc(START))
    sent: list[str] = []

    async def send(key: str) -> dict[str, str]:
        sent.append(key)
        return {"message_id": "m-1"}

    async def behaviour(ctx: AgentContext) -> AgentResult:
        receipt = await ctx.effects.perform("notify-broker", send)
        if ctx.attempt == 1:
            raise RuntimeError("crashed after the effect")
        return AgentResult(f"# sent {receipt['message_id']}\n")

    catalog, task = await admitted_task(db, clock, Scripted(behaviour), tmp_path)
    w = worker(db, clock, catalog, tmp_path, "A")
    await w.run_once()
    clock.advance(120)
    done = await w.run_once()
    assert done is not None and done.status == "completed"
    assert sent == [f"{task['idempotency_key']}#notify-broker"]
    assert await db.pool.fetchval("SELECT content_md FROM reports") == "# sent m-1\n"


async def test_effect_with_unknown_outcome_makes_the_task_unknown(db: Database,
                                                                  tmp_path: Path) -> None:
    """A worker that started an effect and lost its lease: the taker-over does not rerun it;
    the task becomes unknown for reconciliation by the effect's key."""
    clock = FakeClock(utc(START))
    hang, started = anyio.Event(), anyio.Event()

    async def send(key: str) -> None:
        started.set()
        await hang.wait()

    async def behaviour(ctx: AgentContext) -> AgentResult:
        await ctx.effects.perform("wire-transfer", send)
        return AgentResult("# done\n")

    agent = Scripted(behaviour)
    catalog, _ = await admitted_task(db, clock, agent, tmp_path)
    first = worker(db, clock, catalog, tmp_path, "A", lease_seconds=60, renew_every=1000)
    rival = worker(db, clock, catalog, tmp_path, "B", lease_seconds=60)
    async with anyio.create_task_group() as tg:
        claimed = await first.claim()
        assert claimed is not None
        tg.start_soon(first.execute, claimed)
        await started.wait()  # the effect is recorded 'started' and in flight
        assert await db.pool.fetchval("SELECT status FROM effects") == "started"
        clock.advance(61)
        outcome = await rival.run_once()
        assert outcome is not None and outcome.status == "unknown"
        assert "wire-transfer" in outcome.reason
        tg.cancel_scope.cancel()
    assert agent.calls == [1]
    (task,) = await tasks(db)
    assert task["status"] == "unknown"


async def test_effect_gate_refuses_a_stale_token(db: Database, tmp_path: Path) -> None:
    """An effect attempted with a token that is no longer current does nothing."""
    clock = FakeClock(utc(START))
    calls: list[str] = []

    async def send(key: str) -> None:
        calls.append(key)

    async def behaviour(ctx: AgentContext) -> AgentResult:
        await db.pool.execute("UPDATE tasks SET lease_token = lease_token + 100")
        await ctx.effects.perform("post", send)
        return AgentResult("# never\n")

    catalog, _ = await admitted_task(db, clock, Scripted(behaviour), tmp_path)
    outcome = await worker(db, clock, catalog, tmp_path, "A").run_once()
    assert outcome is not None and outcome.status == "stale"
    assert calls == []
    assert await db.pool.fetchval("SELECT count(*) FROM effects") == 0


async def test_artifact_promise_is_verified(db: Database, tmp_path: Path) -> None:
    """A promised .md artifact under the declared directory: the receipt has its path and hash."""
    clock = FakeClock(utc(START))

    async def write(ctx: AgentContext) -> AgentResult:
        assert ctx.artifact_dir is not None
        path = ctx.artifact_dir / "draft.md"
        path.write_text("# Draft\nbody\n")
        return AgentResult("# wrote a draft\n", artifact=path)

    catalog, _ = await admitted_task(db, clock, Scripted(write), tmp_path,
                                     output={"kind": "artifact", "directory": "drafts",
                                             "type": ".md"})
    outcome = await worker(db, clock, catalog, tmp_path, "A").run_once()
    assert outcome is not None and outcome.status == "completed"
    report = await db.pool.fetchrow("SELECT output_ref, content_sha256, verified FROM reports")
    expected = tmp_path / "acme" / "drafts" / "draft.md"
    assert report["output_ref"] == str(expected)
    import hashlib
    assert report["content_sha256"] == hashlib.sha256(b"# Draft\nbody\n").hexdigest()
    assert report["verified"] is True


@pytest.mark.parametrize(
    ("output", "result", "detail"),
    [({}, AgentResult("   \n"), "the promised markdown report is empty"),
     ({"output": {"kind": "artifact", "directory": "d", "type": ".md"}}, AgentResult("# r\n"),
      "the run returned no artifact path")],
)
async def test_unmet_promise_ends_failed_verification(db: Database, tmp_path: Path,
                                                      output: dict[str, Any], result: AgentResult,
                                                      detail: str) -> None:
    """A run that returns without meeting its output promise is not completed."""
    clock = FakeClock(utc(START))

    async def behaviour(ctx: AgentContext) -> AgentResult:
        return result

    catalog, _ = await admitted_task(db, clock, Scripted(behaviour), tmp_path, **output)
    outcome = await worker(db, clock, catalog, tmp_path, "A").run_once()
    assert outcome is not None and (outcome.status, outcome.reason) == ("failed_verification", detail)
    assert await db.pool.fetchval("SELECT count(*) FROM deliveries") == 0
    assert await db.pool.fetchval("SELECT verified FROM reports") is False


@pytest.mark.parametrize(("policy", "status"), [("skip_expired", "expired"),
                                                ("catch_up_once", "completed"),
                                                ("review_late", "review_required")])
async def test_dispatch_after_expires_at_follows_the_policy(db: Database, tmp_path: Path,
                                                            policy: str, status: str) -> None:
    """Admitted on time but first claimed 20 min later (grace 10 min)."""
    clock = FakeClock(utc(START))

    async def ok(ctx: AgentContext) -> AgentResult:
        return AgentResult("# ok\n")

    catalog, _ = await admitted_task(db, clock, Scripted(ok), tmp_path,
                                     lateness={"policy": policy})
    clock.advance(20 * 60)
    outcome = await worker(db, clock, catalog, tmp_path, "A").run_once()
    assert outcome is not None and outcome.status == status


async def test_audiences_restrict_the_agents_a_binding_reaches(db: Database, tmp_path: Path) -> None:
    """A definition restricted to audience 'finance' cannot reach a 'marketing' agent."""
    clock = FakeClock(utc(START))

    async def ok(ctx: AgentContext) -> AgentResult:
        return AgentResult("# ok\n")

    catalog = AgentCatalog()
    catalog.add("scripted", Scripted(ok), audiences=["marketing"])
    await confirmed(db, clock, {"trigger": {"type": "interval", "every": 3600, "anchor": START},
                                "agent": {"name": "scripted"}, "audiences": ["finance"]})
    clock.advance(1)
    await tick(db, clock)
    outcome = await worker(db, clock, catalog, tmp_path, "A").run_once()
    assert outcome is not None and outcome.status == "failed"
    assert "outside the binding's audiences" in outcome.reason


async def test_run_budget_is_enforced(db: Database, tmp_path: Path) -> None:
    """A run charging 3 model requests under a limit of 2 fails without a retry."""
    clock = FakeClock(utc(START))

    async def greedy(ctx: AgentContext) -> AgentResult:
        for _ in range(3):
            ctx.budget.charge(model_requests=1)
        return AgentResult("# too much\n")

    catalog, _ = await admitted_task(db, clock, Scripted(greedy), tmp_path,
                                     limits={"max_model_requests": 2})
    outcome = await worker(db, clock, catalog, tmp_path, "A").run_once()
    assert outcome is not None and outcome.status == "failed"
    assert "model_requests: 3 would exceed the task's limit of 2" in outcome.reason


async def test_trusted_schedule_fields_reach_the_agent(db: Database, tmp_path: Path) -> None:
    """params.schedule is stamped by admission and matches the occurrence."""
    clock = FakeClock(utc(START))
    seen: list[Any] = []

    async def look(ctx: AgentContext) -> AgentResult:
        seen.append((dict(ctx.params["schedule"]), ctx.occurrence.slot, ctx.owner_user_id))
        return AgentResult("# ok\n")

    catalog, _ = await admitted_task(db, clock, Scripted(look), tmp_path)
    await worker(db, clock, catalog, tmp_path, "A").run_once()
    assert seen == [({"definition_id": "d1", "revision": 1, "slot": START, "kind": "scheduled",
                      "scheduled_for": START}, START, "alice")]





async def test_a_task_held_for_review_is_approved_into_a_late_run(db: Database,
                                                                  tmp_path: Path) -> None:
    """review_late at dispatch: the task waits in review_required; approval runs it late."""
    from watchkeeper.runtime.usecases import review

    clock = FakeClock(utc(START))

    async def ok(ctx: AgentContext) -> AgentResult:
        return AgentResult(f"# late={ctx.occurrence.late}\n")

    catalog, task = await admitted_task(db, clock, Scripted(ok), tmp_path,
                                        lateness={"policy": "review_late"})
    clock.advance(20 * 60)
    w = worker(db, clock, catalog, tmp_path, "A")
    assert (await w.run_once()).status == "review_required"  # type: ignore[union-attr]
    assert await w.run_once() is None
    assert await review(db, clock, OPERATOR, "acme", "d1", task["slot"], approve=True) == "admitted"
    done = await w.run_once()
    assert done is not None and done.status == "completed"
    assert await db.pool.fetchval("SELECT content_md FROM reports") == "# late=True\n"
