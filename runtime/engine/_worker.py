"""Workers: claim admitted tasks, hold a fenced lease, run the agent under the task
deadline, verify the output promise, and commit the report while the token is current.

* A claim is ``FOR UPDATE SKIP LOCKED``; every claim or takeover gets a fresh fencing
  token from the ``lease_tokens`` sequence (the database orders across processes).
* The lease is renewed every ``lease / 3`` seconds of monotonic time; renewal is
  fenced by the token and also carries cancellation requests.
* An expired lease is taken over with a newer token. If the task recorded an external
  effect that never finished, its outcome cannot be established and the task becomes
  ``unknown``; otherwise the new owner runs a new attempt.
* The stale worker's late commit matches no row (``lease_token = $token``) and is
  recorded as ``rejected_stale`` on its own run; it changes nothing else.
* A failed run is retried as a new attempt (backoff with full jitter) within the
  task's deadline and ``max_attempts``; it never re-triggers the occurrence. Whether it
  may be retried at all is data on the error (``retryable``, e.g.
  :class:`AgentError` and :class:`BudgetExceeded`), never read from its message.
* The usage an agent reports in its result is settled against the task's budget after
  the run (:meth:`BudgetGuard.settle`); a run that reports more than the budget allows
  fails with its usage recorded and is the task's last.
* A worker claims (and takes over) only tasks whose agent it has; the others wait for a
  supervisor that has it. When one waits past its ``expires_at`` and no live supervisor
  offers its agent (:mod:`._fleet`), the worker that finds nothing to claim applies the
  lateness policy to it, as dispatch would have, with a reason that says so.
* What a run returns is checked before anything of it is written
  (:func:`~._agents.result_problems`, :func:`~._agents.usage_problems`): a result
  PostgreSQL cannot store (a NUL character in the report, a lone surrogate in the
  artifact path, a count past ``bigint``) fails the task without another attempt.
  Reasons are made storable (:func:`storable_reason`: NUL and lone surrogates escaped,
  cut at :data:`REASON_LIMIT` characters), as they quote agents' messages.
* :meth:`Worker.interrupt` (a supervisor shutting down) cancels the run in hand at
  once: the run is recorded ``interrupted`` with the reason and the task is released
  (pending, claimable now, lease cleared) for another worker's next attempt, within the
  task's deadline and ``max_attempts`` as for a failed run (no backoff: nothing failed);
  with no attempt or time left it ends ``failed`` or ``timed_out`` instead. A killed
  process releases nothing: its leases expire and are taken over.
* A run's spending is written to its row as it is charged, before the model request
  or tool call it pays for (``run_charge``, fenced by the token: a stale run's charge
  is refused and it stops); a run stopped by its budget ends ``budget_exceeded`` and
  the task is not retried. Tool calls go through ``ctx.sources``
  (:class:`~._tools.ScopedSources`: the definition's ``sources`` scope) and are
  recorded on the run, with the model that answered.
* Continuation (seed 004): a run that returns a :class:`~._agents.Continuation` while
  the task's root is below ``limits.max_roots`` and its deadline has not passed ends
  ``continued``, its intent and report recorded on the run, and the task goes back to
  ``pending`` (claimable now) as its next root, with ``max_attempts`` attempts for it
  and the same deadline and total budget. Past ``max_roots`` or the deadline the
  intent is recorded as refused, with why, and the report is committed as the task's.
  Nothing else starts a root: a failed run, text, or a dropped connection.
* One task's trouble never stops the worker: a non-transient database error
  (:class:`StoreError`) while handling a task fails that task with the error as its
  reason (or, if even that is refused, a fixed one), and the worker carries on. Only a
  transient :class:`DatabaseUnavailable` leaves :meth:`Worker.execute` (the
  supervisor restarts the loop; the lease expires and is taken over).
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import anyio

from watchkeeper.outbox._retry import backoff_seconds
from watchkeeper.sources import SourceRegistry
from watchkeeper.triggers import MODEL_AGENT, Importance, format_utc

from .._errors import (
    AgentError,
    BudgetExceeded,
    CommitOutcomeUnknown,
    DatabaseUnavailable,
    EffectOutcomeUnknown,
    StaleLease,
    WatchkeeperError,
)
from ..store._db import Database, StoreError
from ..store._specs import spec_from_row
from ._agents import (
    AgentCatalog,
    AgentContext,
    AgentResult,
    BudgetGuard,
    ContinuedFrom,
    OccurrenceInfo,
    RunJournal,
    Usage,
    parse_json_object,
    recordable_usage,
    result_problems,
    usage_problems,
)
from ._answer import COST_STEP
from ._clock import Clock
from ._effects import EffectGate
from ._fleet import offered_agents, supervisor_states
from ._tools import ScopedSources
from ._verify import verify_output

__all__ = ["DELIVERY_NAMESPACE", "REASON_LIMIT", "UNRECORDABLE", "TaskOutcome", "Worker",
           "storable_reason"]

log = logging.getLogger("watchkeeper.worker")

DELIVERY_NAMESPACE = uuid.UUID("6f0c1e8a-5d1b-4c55-9a57-1f3e2b9c7a10")
"""UUIDv5 namespace of delivery ids: one stable id per (task, channel, destination)."""

REASON_LIMIT = 4000
"""Characters of a task's or run's reason that are recorded (an agent's exception message
may be any length); the rest is cut, and the cut says how much."""

UNRECORDABLE = ("the database refused to record this task's outcome; the worker's log has "
                "the error")
"""The reason recorded when the database refused the first one (the last resort)."""

KEEPS_EARLIER_ROOT = frozenset({"failed", "timed_out", "cancelled", "failed_verification"})
"""How a later root may end while the task keeps the report of the root before it."""

LATE_STATUS = {"skip_expired": "expired", "review_late": "review_required"}
"""What a task first picked up after its ``expires_at`` becomes, by lateness policy
(DESIGN "Lateness"; ``catch_up_once`` runs it, late)."""


@dataclass(frozen=True, slots=True)
class TaskOutcome:
    """How one worker's handling of a task ended.

    ``status`` is the task status it left (``completed``, ``pending`` for a retry,
    ``failed``, ...), ``stale`` when its token was no longer current, or ``unrecorded``
    when the database refused every way of recording the outcome (the task stays
    ``running`` until its lease expires and is taken over). ``interrupted``: the run was
    cut short by :meth:`Worker.interrupt` (``status`` is then ``pending`` when the task
    was released for another attempt, else how it ended).
    """

    tenant_id: str
    task_id: int
    attempt: int
    status: str
    reason: str
    interrupted: bool = False


@dataclass
class _Ending:
    result: AgentResult | None = None
    error: BaseException | None = None
    stop: str | None = None  # "timed_out" | "cancelled" | "lease_lost" | "interrupted"


class Worker:
    """Runs admitted tasks one at a time.

    Args:
        worker_id: recorded as lease owner and on runs.
        lease_seconds: lease length (wall time in the database).
        renew_every: monotonic seconds between renewals (default: a third of the lease).
        artifact_root: where artifact promises are written and checked.
        retry_base, retry_cap: backoff of a failed attempt, seconds.
        tenant_id: claim only this tenant's tasks (a replay's worker on a virtual
            clock must never run anyone else's); ``None``: every tenant's.
        sources: the sources a run may read through ``ctx.sources`` (within its
            definition's ``sources`` scope); default none.
    """

    def __init__(self, db: Database, clock: Clock, agents: AgentCatalog, *, worker_id: str,
                 artifact_root: Path, lease_seconds: float = 60.0,
                 renew_every: float | None = None, retry_base: float = 2.0,
                 retry_cap: float = 60.0, tenant_id: str | None = None,
                 sources: SourceRegistry | None = None) -> None:
        self.db, self.clock, self.agents = db, clock, agents
        self.sources = sources or SourceRegistry()
        self._runs: dict[int, AgentContext] = {}
        """The context of each run in hand, by run id (its journal and budget guard are
        what the run's closing write records)."""
        self.tenant_id = tenant_id
        self.worker_id = worker_id
        self.artifact_root = artifact_root
        self.lease_seconds = lease_seconds
        self.renew_every = renew_every if renew_every is not None else lease_seconds / 3
        self.retry_base, self.retry_cap = retry_base, retry_cap
        self.takeovers = 0
        """Expired leases this worker took over (a counter for ``/metrics``)."""
        self._interrupted: str | None = None
        self._current: tuple[_Ending, anyio.CancelScope] | None = None

    @property
    def busy(self) -> bool:
        """Whether a run is in hand (an agent running or its outcome being recorded)."""
        return bool(self._runs) or self._current is not None

    def interrupt(self, reason: str) -> None:
        """Stop now, for good: cancel the agent run in hand (recorded ``interrupted`` with
        ``reason``, its task released for another attempt; see the module docstring) and
        claim nothing more (:meth:`run_once` returns ``None``). A run whose agent already
        returned is committed as usual. Safe to call at any time, also from another
        task, and more than once (the first reason is kept)."""
        self._interrupted = self._interrupted or reason
        if self._current is not None:
            ending, scope = self._current
            if ending.stop is None and ending.result is None and ending.error is None:
                ending.stop = "interrupted"
            scope.cancel()

    async def run_once(self) -> TaskOutcome | None:
        """Claim one task (an expired lease first, else a due pending one) and handle it;
        with nothing to claim, apply the lateness policy to one task that waited past its
        ``expires_at`` for an agent nobody offers (:meth:`expire_unclaimable`).

        Returns ``None`` when there was nothing to do, or once :meth:`interrupt` was called.
        """
        if self._interrupted is not None:
            return None
        task = await self.claim()
        if task is None:
            return await self.expire_unclaimable()
        return await self.execute(task)

    async def claim(self) -> Mapping[str, Any] | None:
        """Take over one expired lease, or claim one due pending task, of an agent this
        worker has (``self.agents``)."""
        now = self.clock.now()
        agents = self.agents.names()
        rows = await self.db.fetch("tasks_take_over", now, 1, self.worker_id, self.lease_seconds,
                                   self.tenant_id, agents)  # (marks the old run lease_lost)
        if rows:
            self.takeovers += 1
            return rows[0]
        rows = await self.db.fetch("tasks_claim", now, 1, self.worker_id, self.lease_seconds,
                                   self.tenant_id, agents)
        return rows[0] if rows else None

    async def expire_unclaimable(self) -> TaskOutcome | None:
        """Apply the lateness policy to one pending first attempt that is past its
        ``expires_at`` while no live supervisor (nor this worker) offers its agent:
        ``skip_expired`` makes it ``expired``, ``review_late`` ``review_required``, each
        with a reason naming the agent; ``catch_up_once`` leaves it to run late. This is
        the status its dispatch would give it (the rule of :data:`LATE_STATUS`), decided
        now rather than whenever a supervisor with the agent appears; waiting is not a
        failure. Nothing happens while a live supervisor's heartbeat does not name its
        agents (it may take any task).

        Returns the outcome (attempt 0: no run was made), or ``None``.
        """
        now = self.clock.now()
        offered = offered_agents(await supervisor_states(self.db, now))
        if offered is None:
            return None
        agents = sorted(offered | set(self.agents.names()))
        async with self.db.transaction() as tx:
            row = await tx.fetchrow("task_unclaimable_expired_lock", now, agents, self.tenant_id)
            if row is None:
                return None
            status = LATE_STATUS[row["late_policy"]]
            waited = (now - row["not_before"]).total_seconds()
            reason = (f"no running supervisor offers agent {row['agent']!r}: waited {waited:.0f} s "
                      f"and expired at {format_utc(row['expires_at'])} ({row['late_policy']}); "
                      "start a supervisor with that agent ("
                      + ("OPENAI_BASE_URL or OPENAI_API_KEY set" if row["agent"] == MODEL_AGENT
                         else f"--agent {row['agent']}=COMMAND") + ")")
            await tx.execute("task_unclaimable_expire", row["tenant_id"], row["task_id"], status,
                             reason, now)
            if status == "expired":
                await tx.execute("tasks_release_held", row["tenant_id"], row["task_id"])
        return TaskOutcome(row["tenant_id"], row["task_id"], 0, status, reason)

    async def execute(self, task: Mapping[str, Any]) -> TaskOutcome:
        """Handle a claimed task with its current token.

        Raises:
            DatabaseUnavailable: transient database trouble (the loop restarts; the lease
                expires and is taken over). A :class:`StoreError` never leaves: it fails
                this task (:meth:`_unrecordable`).
        """
        run_id: int | None = None
        try:
            refusal = await self._refusal(task)
            if refusal is not None:
                status, reason = refusal
                return await self._finish(task, status, reason)
            run_id = await self.db.fetchval(
                "run_insert", task["tenant_id"], task["task_id"], task["attempts"],
                task["lease_token"], self.worker_id, self.clock.now(), task["root"])
            assert run_id is not None
            return await self._attempt(task, run_id)
        except StoreError as exc:
            return await self._unrecordable(task, run_id, exc, Usage())
        except StaleLease as exc:
            assert run_id is not None  # only a run's writes are fenced
            await self._close_run(task, run_id, "lease_lost", str(exc))
            return self._outcome(task, "stale", str(exc))
        except WatchkeeperError:
            raise  # database trouble: the loop restarts; the lease expires and is taken over
        except Exception as exc:  # noqa: BLE001 - one task's failure must not stop the worker
            log.exception("task %s/%s failed inside the worker", task["tenant_id"], task["task_id"])
            reason = f"internal error: {type(exc).__name__}: {exc}"
            try:
                if run_id is not None:
                    await self._close_run(task, run_id, "failed", reason)
                return await self._finish(task, "failed", reason)
            except StoreError as refused:
                return await self._unrecordable(task, run_id, refused, Usage())
        finally:
            if run_id is not None:
                self._runs.pop(run_id, None)

    async def _unrecordable(self, task: Mapping[str, Any], run_id: int | None,
                            error: StoreError, usage: Usage) -> TaskOutcome:
        """The database refused a write of this task's outcome: fail the task with the
        error as its reason; if that is refused too, with :data:`UNRECORDABLE`; if even
        that is, leave it (status ``unrecorded``: the lease expires and is taken over).
        The task is never retried from here: the refused write would be refused again.
        """
        log.error("task %s/%s: the database refused to record its outcome: %s",
                  task["tenant_id"], task["task_id"], error)
        for reason in (f"the database refused to record this task's outcome: {error}",
                       UNRECORDABLE):
            try:
                if run_id is not None:
                    await self._close_run(task, run_id, "failed", reason, usage)
                return await self._finish(task, "failed", reason)
            except StoreError as again:
                log.error("task %s/%s: recording its failure was refused too: %s",
                          task["tenant_id"], task["task_id"], again)
                usage = Usage()
        return self._outcome(task, "unrecorded", storable_reason(
            f"the database refused to record this task's outcome: {error}"))

    async def _refusal(self, task: Mapping[str, Any]) -> tuple[str, str] | None:
        """Decisions not to run, taken at dispatch time."""
        now = self.clock.now()
        if task["attempts"] > task["max_attempts"]:
            return "failed", f"lease expired after {task['max_attempts']} attempts"
        unfinished = await self.db.fetch("effects_unfinished", task["tenant_id"], task["task_id"])
        if unfinished:
            started = [r["effect_key"] for r in unfinished if r["status"] == "started"]
            failed = [r["effect_key"] for r in unfinished if r["status"] == "failed"]
            parts = ([f"started {', '.join(started)} and never recorded the outcome"] if started
                     else []) + ([f"saw {', '.join(failed)} fail, so whether it took effect is "
                                  "unknown"] if failed else [])
            return "unknown", (f"an earlier attempt {' and '.join(parts)}; reconcile by the "
                               "effect's idempotency key before retrying")
        if task["cancel_requested_at"] is not None:
            return "cancelled", "cancellation was requested"
        claimed_at = task["started_at"]  # the first claim is the dispatch instant
        waited = task["held_behind"] is not None  # queue_one: the wait was by design
        if task["attempts"] == 1 and not task["late"] and not waited and claimed_at > task["expires_at"]:
            late = (claimed_at - task["expires_at"]).total_seconds()
            policy = task["late_policy"]
            if policy in LATE_STATUS:
                return LATE_STATUS[policy], f"dispatched {late:.0f} s after expires_at ({policy})"
        if task["deadline_at"] is not None and now >= task["deadline_at"]:
            return "timed_out", "the task deadline passed before this attempt could start"
        return None

    async def _attempt(self, task: Mapping[str, Any], run_id: int) -> TaskOutcome:
        spec = spec_from_row(await self.db.fetchrow(
            "revision_spec", task["definition_tenant_id"], task["definition_id"], task["revision"]))
        try:
            agent = self.agents.reachable(task["agent"], task["audiences"])
        except LookupError as exc:
            await self._close_run(task, run_id, "failed", str(exc))
            return await self._finish(task, "failed", str(exc))
        ctx = await self._context(task, spec, run_id)
        remaining = (task["deadline_at"] - self.clock.now()).total_seconds()
        ending = await self._supervised(task, agent.run, ctx, remaining)
        try:
            return await self._conclude(task, run_id, spec, ctx, ending)
        except StoreError as exc:
            return await self._unrecordable(task, run_id, exc, ctx.budget.used)

    async def _conclude(self, task: Mapping[str, Any], run_id: int, spec: Any,
                        ctx: AgentContext, ending: _Ending) -> TaskOutcome:
        """Record how the run ended: stopped, failed, refused (a result that cannot be
        stored, or usage past the budget), or its report committed."""
        if ending.stop is not None:
            return await self._stopped(task, run_id, ending.stop, ctx.budget.used)
        if ending.error is not None:
            return await self._failed(task, run_id, ending.error, ctx.budget.used)
        result = ending.result
        problems = result_problems(result)
        if not problems:
            assert isinstance(result, AgentResult)
            try:
                ctx.budget.settle(result.usage)
            except BudgetExceeded as exc:
                return await self._failed(task, run_id, exc, ctx.budget.used)
            problems = usage_problems(ctx.budget.used)
            if not problems and result.continuation is not None:
                return await self._continue(task, run_id, spec, ctx,
                                            replace(result, usage=ctx.budget.used))
        if problems:
            refusal = AgentError(
                f"the agent's result cannot be stored: {'; '.join(problems)}. Fix: return text "
                "without NUL characters or lone surrogates, an Importance, and a Usage whose "
                "figures PostgreSQL can hold", retryable=False)
            return await self._failed(task, run_id, refusal, ctx.budget.used)
        assert isinstance(result, AgentResult)
        return await self._commit(task, run_id, spec, ctx, replace(result, usage=ctx.budget.used))

    async def _context(self, task: Mapping[str, Any], spec: Any, run_id: int) -> AgentContext:
        previous = await self.db.fetch("reports_previous", task["tenant_id"], task["definition_id"],
                                       task["binding_id"], 5)
        limits = spec.limits
        artifact_dir = None
        if spec.output.kind == "artifact":
            root = (self.artifact_root / task["tenant_id"]).resolve()
            artifact_dir = (root / (spec.output.directory or "")).resolve()
            if not artifact_dir.is_relative_to(root):  # the spec check makes this unreachable
                raise ValueError(f"artifact directory {artifact_dir} is outside {root}")
            artifact_dir.mkdir(parents=True, exist_ok=True)
        journal = RunJournal()

        async def persist(used: Usage, before: bool) -> None:
            args = (task["tenant_id"], run_id, used.to_json(), journal.model, journal.tool_calls)
            if not before:
                with anyio.CancelScope(shield=True):  # spent: recorded even when cancelled
                    await self.db.execute("run_record_usage", *args)
            elif await self.db.fetchval("run_charge", *args, task["lease_token"]) is None:
                raise StaleLease(f"task {task['task_id']}: token {task['lease_token']} is not "
                                 "current; the run must not spend more")

        budget = BudgetGuard(model_requests=limits.max_model_requests,
                             tool_attempts=limits.max_tool_attempts, cost_usd=limits.max_cost_usd,
                             spent_before=await self._spent_before(task, run_id), persist=persist)
        started = task["started_at"]
        occurrence = OccurrenceInfo(
            task["slot"], task["kind"], task["scheduled_for"], task["not_before"],
            task["expires_at"], bool(task["late"]),
            max((started - task["not_before"]).total_seconds(), 0.0))
        ctx = AgentContext(
            tenant_id=task["tenant_id"], owner_user_id=task["owner_user_id"],
            definition_id=task["definition_id"], revision=task["revision"],
            binding_id=task["binding_id"], task_id=task["task_id"], attempt=task["attempts"],
            title=spec.title, instructions=task["message"], params=task["params"],
            audiences=tuple(task["audiences"]) if task["audiences"] is not None else None,
            occurrence=occurrence, budget=budget,
            effects=EffectGate(self.db, self.clock, tenant_id=task["tenant_id"],
                               task_id=task["task_id"], idempotency_key=task["idempotency_key"],
                               lease_token=task["lease_token"]),
            previous_reports=[dict(r) for r in previous], artifact_dir=artifact_dir,
            root=task["root"], max_roots=limits.max_roots,
            continued_from=await self._continued_from(task),
            sources=ScopedSources(self.sources, spec.sources, budget, journal, self.clock),
            journal=journal, clock=self.clock,
        )
        self._runs[run_id] = ctx
        return ctx

    async def _continued_from(self, task: Mapping[str, Any]) -> ContinuedFrom | None:
        """For root 2 and later: the accepted intent that started the task's root."""
        if task["root"] <= 1:
            return None
        row = await self.db.fetchrow("run_continuation_of", task["tenant_id"], task["task_id"],
                                     task["root"])
        if row is None:  # unreachable: task_continue and the intent commit together
            raise ValueError(f"task {task['task_id']} is at root {task['root']} without the "
                             "intent that started it")
        intent = parse_json_object(row["continuation"])
        return ContinuedFrom(task["root"], row["run_id"], str(intent.get("reason", "")),
                             str(intent.get("instructions", "")), str(intent.get("report", "")))

    async def _spent_before(self, task: Mapping[str, Any], run_id: int) -> Usage:
        """What the task's other runs (earlier attempts and roots) used (their rows)."""
        row = await self.db.fetchrow("runs_usage_total", task["tenant_id"], task["task_id"], run_id)
        if row is None:
            return Usage()
        return Usage(int(row["model_requests"]), int(row["tool_attempts"]), Decimal(row["cost_usd"]),
                     int(row["input_tokens"]), int(row["output_tokens"]))

    async def _supervised(self, task: Mapping[str, Any], run: Any, ctx: AgentContext,
                          remaining: float) -> _Ending:
        """Run the agent beside the lease renewal loop and the deadline watchdog, until
        one of them ends it or :meth:`interrupt` does."""
        ending = _Ending()
        if self._interrupted is not None:  # interrupted between the claim and the start
            ending.stop = "interrupted"
            return ending
        async with anyio.create_task_group() as tg:
            self._current = (ending, tg.cancel_scope)

            async def body() -> None:
                try:
                    ending.result = await run(ctx)
                except Exception as exc:  # noqa: BLE001 - every agent failure becomes data
                    ending.error = exc
                tg.cancel_scope.cancel()

            async def stop_after(reason: str, waiter: Any) -> None:
                await waiter
                if ending.stop is None and ending.result is None and ending.error is None:
                    ending.stop = reason
                tg.cancel_scope.cancel()

            tg.start_soon(body)
            tg.start_soon(stop_after, "timed_out", self.clock.sleep(remaining))
            tg.start_soon(self._renew, task, ending, tg.cancel_scope)
        self._current = None  # (left set if the group raised: interrupting it then is harmless)
        return ending

    async def _renew(self, task: Mapping[str, Any], ending: _Ending, scope: anyio.CancelScope) -> None:
        """Renew the lease on the monotonic clock until it is lost or cancelled."""
        valid_until = self.clock.monotonic() + self.lease_seconds
        while True:
            await self.clock.sleep(self.renew_every)
            try:
                row = await self.db.fetchrow("lease_renew", task["tenant_id"], task["task_id"],
                                             task["lease_token"], self.clock.now(), self.lease_seconds)
            except DatabaseUnavailable:
                if self.clock.monotonic() < valid_until:
                    continue
                row = None  # cannot renew and the lease has run out: presume it lost
            if row is None:
                ending.stop = ending.stop or "lease_lost"
                scope.cancel()
                return
            valid_until = self.clock.monotonic() + self.lease_seconds
            if row["cancel_requested_at"] is not None:
                ending.stop = ending.stop or "cancelled"
                scope.cancel()
                return

    async def _stopped(self, task: Mapping[str, Any], run_id: int, stop: str,
                       usage: Usage) -> TaskOutcome:
        if stop == "lease_lost":
            await self._close_run(task, run_id, "lease_lost", "lease lost during the run", usage)
            return self._outcome(task, "stale", "lease lost during the run")
        if stop == "interrupted":
            return await self._release(task, run_id, usage)
        reason = ("the task deadline passed" if stop == "timed_out"
                  else "cancellation requested")
        await self._close_run(task, run_id, stop, reason, usage)
        return await self._finish(task, stop, reason)

    async def _release(self, task: Mapping[str, Any], run_id: int, usage: Usage) -> TaskOutcome:
        """The run was interrupted: record it so, then give the task back for its next
        attempt at once, or end it when the retry rules leave none (the last of
        ``max_attempts``: ``failed``; past its deadline: ``timed_out``)."""
        reason = storable_reason(self._interrupted or "interrupted")
        await self._close_run(task, run_id, "interrupted", reason, usage)
        attempts, most = task["attempts"], task["max_attempts"]
        if attempts >= most:
            outcome = await self._finish(task, "failed", f"{reason}; that was attempt {attempts} "
                                         f"of {most}, so it is not retried")
        elif task["deadline_at"] is not None and self.clock.now() >= task["deadline_at"]:
            outcome = await self._finish(task, "timed_out", f"{reason}; the task deadline "
                                         "passed, so it is not retried")
        elif await self.db.fetchval("task_release", task["tenant_id"], task["task_id"],
                                    task["lease_token"], self.clock.now(),
                                    storable_reason(f"released for another attempt: {reason}")) is None:
            return self._outcome(task, "stale", "lease lost before the release was recorded")
        else:
            outcome = self._outcome(task, "pending", reason)
        return replace(outcome, interrupted=outcome.status != "stale")

    async def _failed(self, task: Mapping[str, Any], run_id: int, error: BaseException,
                      usage: Usage) -> TaskOutcome:
        message = f"{type(error).__name__}: {error}"
        if isinstance(error, StaleLease):
            raise error
        if isinstance(error, EffectOutcomeUnknown):
            await self._close_run(task, run_id, "unknown", message, usage)
            return await self._finish(task, "unknown", message)
        if isinstance(error, BudgetExceeded):
            await self._close_run(task, run_id, "budget_exceeded", message, usage)
            return await self._finish(task, "failed", f"{message}; the budget spans the task's "
                                      "attempts and roots, so it is not retried")
        await self._close_run(task, run_id, "failed", message, usage)
        retry_at = self.clock.now() + timedelta(
            seconds=backoff_seconds(task["attempts"], base=self.retry_base, cap=self.retry_cap))
        if not _retryable(error) or task["attempts"] >= task["max_attempts"] or (
            retry_at >= task["deadline_at"]
        ):
            return await self._finish(task, "failed", message)
        done = await self.db.fetchval("task_retry", task["tenant_id"], task["task_id"],
                                      task["lease_token"], retry_at,
                                      storable_reason(f"retrying after {message}"))
        if done is None:
            return self._outcome(task, "stale", "lease lost before the retry was recorded")
        return self._outcome(task, "pending", f"retry at {retry_at.isoformat()}")

    async def _continue(self, task: Mapping[str, Any], run_id: int, spec: Any,
                        ctx: AgentContext, result: AgentResult) -> TaskOutcome:
        """The run asked to go on: start the task's next root, or refuse (recorded) and
        commit this report as the task's."""
        assert result.continuation is not None
        intent: dict[str, Any] = result.continuation.to_json()
        root, most = task["root"], spec.limits.max_roots
        now = self.clock.now()
        if root >= most:
            refusal = (f"limits.max_roots is {most}: root {root} was the last this task may "
                       "run")
        elif task["deadline_at"] is not None and now >= task["deadline_at"]:
            refusal = "the task deadline has passed"
        elif not ctx.budget.would_fit(model_requests=1) or not ctx.budget.would_fit(
                cost_usd=COST_STEP):
            refusal = ("the task's budget is spent (limits.max_model_requests or max_cost_usd): "
                       "a further root could not make a model request")
        else:
            refusal = None
        if refusal is not None:
            intent.update(status="refused", refusal=refusal)
            return await self._commit(task, run_id, spec, ctx, result, continuation=intent)
        intent.update(status="accepted", next_root=root + 1, report=result.report,
                      headline=result.headline, importance=result.importance.value,
                      report_sha256=hashlib.sha256(result.report.encode()).hexdigest())
        reason = storable_reason(f"continuing as root {root + 1} of at most {most}: "
                                 f"{result.continuation.reason}")
        journal = ctx.journal
        async with self.db.transaction() as tx:
            if await tx.fetchval("task_continue", task["tenant_id"], task["task_id"],
                                 task["lease_token"], root + 1, now, spec.limits.max_attempts,
                                 reason) is None:
                state = await tx.fetchrow("task_lease_state", task["tenant_id"],
                                          task["task_id"], task["lease_token"])
            else:
                state = None
                await tx.execute("run_finish", task["tenant_id"], run_id, "continued", now, None,
                                 recordable_usage(result.usage).to_json(), journal.model,
                                 journal.tool_calls, intent)
        if state is not None and state["current"] and state["cancel_requested"]:
            intent = {**result.continuation.to_json(), "status": "refused",
                      "refusal": "cancellation was requested"}
            return await self._commit(task, run_id, spec, ctx, result, continuation=intent)
        if state is not None:
            with anyio.CancelScope(shield=True):
                await self.db.execute(
                    "run_reject_stale", task["tenant_id"], run_id, self.clock.now(),
                    "continuation rejected: the lease token is no longer current",
                    recordable_usage(result.usage).to_json(), journal.model, journal.tool_calls)
            return self._outcome(task, "stale", "continuation rejected (stale token)")
        return self._outcome(task, "pending", reason)

    async def _commit(self, task: Mapping[str, Any], run_id: int, spec: Any, ctx: AgentContext,
                      result: AgentResult, *,
                      continuation: dict[str, Any] | None = None) -> TaskOutcome:
        verification = verify_output(spec.output, result, ctx.artifact_dir)
        status = "completed" if verification.ok else "failed_verification"
        now = self.clock.now()
        if not verification.ok and task["root"] > 1:  # the earlier root's report stands
            await self._close_run(task, run_id, "failed_verification", verification.detail,
                                  result.usage)
            return await self._finish(task, "failed_verification", verification.detail)
        try:
            await self._durable_receipt(task, run_id, result, verification, status, now,
                                        continuation)
        except StaleLease:
            with anyio.CancelScope(shield=True):
                await self.db.execute(
                    "run_reject_stale", task["tenant_id"], run_id, self.clock.now(),
                    "report commit rejected: the lease token is no longer current",
                    result.usage.to_json(), ctx.journal.model, ctx.journal.tool_calls)
            log.warning("task %s: stale worker %s's report commit rejected", task["task_id"],
                        self.worker_id)
            return self._outcome(task, "stale", "report commit rejected (stale token)")
        return self._outcome(task, status, verification.detail)

    async def _durable_receipt(self, task: Mapping[str, Any], run_id: int, result: AgentResult,
                               verification: Any, status: str, now: datetime,
                               continuation: dict[str, Any] | None = None, *,
                               close_run: bool = True, detail: str | None = None) -> None:
        """Write the receipt of ``run_id``'s report (closing that run too, unless
        ``close_run`` is false: an earlier root's run, closed already); after a lost
        COMMIT acknowledgement, settle the old session, read the receipt back by its key,
        and write it again (same task, same token) only if it is not there.

        Raises:
            StaleLease: the token is no longer current (nothing was written).
        """
        args = (task, run_id, result, verification, status, now, continuation, close_run,
                verification.detail if detail is None else detail)
        try:
            await self._write_receipt(*args)
        except CommitOutcomeUnknown as lost:
            await self.db.settle(lost)
            if await self.db.fetchrow("report_get", task["tenant_id"], task["task_id"]) is None:
                await self._write_receipt(*args)

    async def _write_receipt(self, task: Mapping[str, Any], run_id: int, result: AgentResult,
                             verification: Any, status: str, now: datetime,
                             continuation: dict[str, Any] | None, close_run: bool,
                             detail: str) -> None:
        tenant, task_id = task["tenant_id"], task["task_id"]
        ctx = self._runs.get(run_id)
        journal = ctx.journal if ctx is not None else RunJournal()
        async with self.db.transaction() as tx:
            if await tx.fetchval("task_finish", tenant, task_id, task["lease_token"], status,
                                 detail, now) is None:
                raise StaleLease(f"task {task_id}: token {task['lease_token']} is not current")
            digest = hashlib.sha256(result.report.encode()).hexdigest()
            await tx.execute("report_insert", tenant, task_id, run_id, result.report,
                             result.importance.value, verification.content_sha256 or digest,
                             verification.output_ref or f"report:{tenant}/{task_id}",
                             verification.ok, detail, now, now, result.headline)
            if close_run:
                await tx.execute("run_finish", tenant, run_id,
                                 "succeeded" if verification.ok else "failed_verification", now,
                                 None if verification.ok else verification.detail,
                                 result.usage.to_json(), journal.model, journal.tool_calls,
                                 continuation)
            if verification.ok:
                await tx.execute("deliveries_insert", tenant, task_id, now,
                                 *self._deliveries(task))
            await tx.execute("tasks_release_held", tenant, task_id)

    def _deliveries(self, task: Mapping[str, Any]) -> tuple[list[uuid.UUID], list[str], list[str]]:
        ids, channels, destinations = [], [], []
        for item in task["delivery"] or []:
            channel, destination = item.get("channel", "log"), item.get("destination", "")
            ids.append(uuid.uuid5(DELIVERY_NAMESPACE,
                                  f"{task['tenant_id']}/{task['idempotency_key']}/{channel}/{destination}"))
            channels.append(channel)
            destinations.append(destination)
        return ids, channels, destinations

    async def _finish(self, task: Mapping[str, Any], status: str, reason: str) -> TaskOutcome:
        if status in KEEPS_EARLIER_ROOT and task["root"] > 1:
            kept = await self._earlier_root_report(task, status, reason)
            if kept is not None:
                return kept
        reason = storable_reason(reason)
        async with self.db.transaction() as tx:
            done = await tx.fetchval("task_finish", task["tenant_id"], task["task_id"],
                                     task["lease_token"], status, reason, self.clock.now())
            if done is not None and status != "review_required":
                await tx.execute("tasks_release_held", task["tenant_id"], task["task_id"])
        if done is None:
            return self._outcome(task, "stale", "lease token no longer current")
        return self._outcome(task, status, reason)

    async def _earlier_root_report(self, task: Mapping[str, Any], status: str,
                                   reason: str) -> TaskOutcome | None:
        """A later root ended without a report: the task keeps the report the previous
        root wrote (recorded in the intent that started this root) and completes with
        it, delivered as usual; the reason says what became of the later root. ``None``
        when the definition promises an artifact (the earlier report alone does not keep
        that promise): the task then ends ``status``."""
        spec = spec_from_row(await self.db.fetchrow(
            "revision_spec", task["definition_tenant_id"], task["definition_id"], task["revision"]))
        row = await self.db.fetchrow("run_continuation_of", task["tenant_id"], task["task_id"],
                                     task["root"])
        if spec.output.kind != "markdown" or row is None:
            return None
        intent = parse_json_object(row["continuation"])
        result = AgentResult(str(intent.get("report", "")),
                             Importance(str(intent.get("importance", "normal"))),
                             headline=str(intent.get("headline", "")))
        verification = verify_output(spec.output, result, None)
        if not verification.ok:
            return None
        detail = storable_reason(f"root {task['root']} ended {status} ({reason}); the report is "
                                 f"root {task['root'] - 1}'s")
        try:
            await self._durable_receipt(task, row["run_id"], result, verification, "completed",
                                        self.clock.now(), close_run=False, detail=detail)
        except StaleLease:
            return self._outcome(task, "stale", "lease token no longer current")
        return self._outcome(task, "completed", detail)

    async def _close_run(self, task: Mapping[str, Any], run_id: int, outcome: str, error: str,
                         usage: Usage | None = None) -> None:
        ctx = self._runs.get(run_id)
        journal = ctx.journal if ctx is not None else None
        if usage is None or usage == Usage():  # what the run's guard knows it spent
            usage = ctx.budget.used if ctx is not None else Usage()
        with anyio.CancelScope(shield=True):
            figures = recordable_usage(usage).to_json()
            try:
                await self.db.execute("run_finish", task["tenant_id"], run_id, outcome,
                                      self.clock.now(), storable_reason(error), figures,
                                      None if journal is None else journal.model,
                                      None if journal is None else journal.tool_calls, None)
            except StoreError:
                if journal is None:
                    raise
                log.exception("task %s/%s: run %s's journal was refused; closing it without",
                              task["tenant_id"], task["task_id"], run_id)
                await self.db.execute("run_finish", task["tenant_id"], run_id, outcome,
                                      self.clock.now(), storable_reason(error), figures,
                                      None, None, None)

    def _outcome(self, task: Mapping[str, Any], status: str, reason: str) -> TaskOutcome:
        return TaskOutcome(task["tenant_id"], task["task_id"], task["attempts"], status, reason)


def _retryable(error: BaseException) -> bool:
    """Whether another attempt could succeed: the error's ``retryable`` attribute
    (:class:`AgentError`, :class:`BudgetExceeded`, :class:`DatabaseUnavailable`); any
    other exception an agent raises is taken as transient."""
    return bool(getattr(error, "retryable", True))


def storable_reason(text: str) -> str:
    """``text`` as a reason PostgreSQL can store: each NUL character written ``\\x00``,
    each lone surrogate ``\\udXXX`` (backslash escapes), and cut to
    :data:`REASON_LIMIT` characters with a note of how many were cut. Reasons quote
    agents' messages and stderr; they are for people, so escaping loses nothing."""
    text = text.replace("\x00", "\\x00").encode("utf-8", "backslashreplace").decode("utf-8")
    if len(text) <= REASON_LIMIT:
        return text
    return f"{text[:REASON_LIMIT]}... ({len(text) - REASON_LIMIT} more characters cut)"
