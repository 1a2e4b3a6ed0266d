"""Task history: each occurrence with its six facts, and the decisions that claim no
key (ranges, fenced-out computations), queryable by tenant, user, definition, status
and time range with keyset pagination (DESIGN "History").

History is read-only and never written back into a chat. A blocked, expired or
review-required occurrence shows exactly one recommended next step.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from watchkeeper.triggers import OPERATOR_TENANT, SpecError, format_utc, plain_decimal

from .._errors import NotFound
from ..store._db import Database
from ._input import check_identifiers, check_instants
from ._polls import require_definition
from ._reads import on_standby

__all__ = ["HISTORY_STATUSES", "HistoryEntry", "HistoryEvent", "HistoryPage", "HistoryQuery",
           "history", "local_time", "next_step", "report", "shorten", "task_entry"]

HISTORY_STATUSES = frozenset({
    "admitted", "skipped_expired", "review_required", "skipped_review", "skipped_overrun",
    "denied_budget", "skipped_dst_gap", "pending", "held", "running", "suspended", "completed",
    "failed", "failed_verification", "timed_out", "cancelled", "expired", "unknown",
})
"""Every occurrence decision and task status ``--status`` may filter on."""


@dataclass(frozen=True, slots=True)
class HistoryQuery:
    """Filters; all optional. ``since``/``until`` bound ``scheduled_for`` (UTC)."""

    tenant_id: str | None = None
    definition_id: str | None = None
    user_id: str | None = None
    status: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    limit: int = 50
    after: tuple[datetime, str, str, str, str] | None = None


@dataclass(frozen=True, slots=True)
class HistoryEntry:
    """One occurrence and what followed it: ``row`` holds the occurrence's columns
    (``scheduled_for``, ``zone``, ``decision``, ``late``, ...), the task's, the runs',
    the receipt's and the deliveries', under the names every door answers
    (:class:`~._response_models.HistoryEntryOut`): ``admission_lateness_seconds``
    (seconds from ``not_before`` to the admission decision) and ``local``
    (``scheduled_for`` in ``zone``, ISO 8601 with its offset, to the second). Build one
    from a ``history_rows`` row with :meth:`from_row`."""

    row: Mapping[str, Any]

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> HistoryEntry:
        """The entry of a ``history_rows`` row (its ``lateness_seconds`` column is the
        admission lateness)."""
        named = dict(row)
        named["admission_lateness_seconds"] = named.pop("lateness_seconds")
        named["local"] = local_time(named["scheduled_for"], named["zone"])
        return cls(named)

    def __getitem__(self, key: str) -> Any:
        return self.row[key]

    @property
    def key(self) -> tuple[datetime, str, str, str, str]:
        """The keyset position of this entry."""
        r = self.row
        return (r["scheduled_for"], r["tenant_id"], r["binding_id"], r["slot"], r["kind"])

    @property
    def outcome(self) -> str:
        """The furthest fact reached: the task status if admitted, else the decision."""
        if self.row["run_status"] is not None:
            return f"run:{self.row['run_status']}"
        return self.row["task_status"] or self.row["decision"]

    @property
    def next_step(self) -> str | None:
        """One recommended next step, or ``None`` when nothing is needed."""
        return next_step(self.row)

    def to_json(self) -> dict[str, Any]:
        """JSON-compatible form (instants as ISO 8601 UTC)."""
        return {k: _jsonable(v) for k, v in self.row.items()} | {
            "outcome": self.outcome, "next_step": self.next_step}


@dataclass(frozen=True, slots=True)
class HistoryEvent:
    """A recorded decision that claims no occurrence key (a range, a fenced-out plan)."""

    row: Mapping[str, Any]

    def to_json(self) -> dict[str, Any]:
        """JSON-compatible form."""
        return {k: _jsonable(v) for k, v in self.row.items()}


@dataclass(frozen=True, slots=True)
class HistoryPage:
    """A page of entries (newest first), the events in the same window, and the
    position to continue from (``None`` on the last page)."""

    entries: Sequence[HistoryEntry]
    events: Sequence[HistoryEvent]
    after: tuple[datetime, str, str, str, str] | None


async def history(db: Database, query: HistoryQuery) -> HistoryPage:
    """Read one page of history (newest first).

    Raises:
        SpecError: an unknown ``status`` (field ``status``), ``limit`` outside 1..1000,
            ``definition_id`` or ``user_id`` not an identifier, ``since`` or ``until``
            naive or outside :data:`~._input.INSTANT_RANGE`.
        NotFound: ``definition_id`` names no definition visible in ``tenant_id``.
    """
    return await on_standby(db, lambda handle: _history(handle, query))


async def _history(db: Database, query: HistoryQuery) -> HistoryPage:
    check_identifiers({"definition_id": query.definition_id, "user_id": query.user_id})
    check_instants({"since": query.since, "until": query.until})
    if query.status is not None and query.status not in HISTORY_STATUSES:
        raise SpecError("status", f"{query.status!r} is not a decision or task status.",
                        f"use one of {', '.join(sorted(HISTORY_STATUSES))}.")
    if not 1 <= query.limit <= 1000:
        raise SpecError("limit", f"{query.limit} is outside 1..1000.",
                        "page with the returned position instead.")
    await require_definition(db, query.tenant_id, query.definition_id)
    after = query.after or (None, None, None, None, None)
    async with db.transaction() as tx:
        await tx.execute("plan_for_these_values")
        if query.tenant_id in (None, OPERATOR_TENANT):
            rows = await tx.fetch("history_page", query.tenant_id, query.definition_id,
                                  query.user_id, query.status, query.since, query.until,
                                  *after, query.limit)
        else:
            owned = None if query.user_id is None else [
                r["definition_id"] for r in await tx.fetch(
                    "definitions_of_owner", query.tenant_id, query.user_id)]
            rows = await tx.fetch("history_page_tenant", query.tenant_id, query.definition_id,
                                  owned, query.status, query.since, query.until, *after,
                                  query.limit, query.user_id)
    entries = [HistoryEntry.from_row(r) for r in rows]
    events = await db.fetch("events_page", query.tenant_id, query.definition_id, None, None,
                            max(query.limit, 50))
    position = entries[-1].key if len(entries) == query.limit else None
    return HistoryPage(entries, [HistoryEvent(dict(e)) for e in events], position)


_STEPS = {
    "review_required": "approve or skip it: watchkeeper review {definition_id} '{slot}' "
                       "--tenant {definition_tenant_id} --approve|--skip",
    "denied_budget": "raise limits.max_tasks_per_period in a new revision (it applies from the "
                     "next accounting period) or wait for the next period",
    "skipped_overrun": "the previous task was still running; if occurrences must queue, "
                       "propose overrun = 'queue_one'",
    "failed": "read the run errors, fix the cause, then run it again: watchkeeper trigger "
              "{definition_id} --tenant {definition_tenant_id}",
    "failed_verification": "the run did not meet the output promise; check the agent's output, "
                           "then: watchkeeper trigger {definition_id} --tenant {definition_tenant_id}",
    "timed_out": "raise limits.deadline in a new revision, or trigger it again",
    "unknown": "reconcile the external effect by its idempotency key ({idempotency_key}) before "
               "doing anything else",
    "expired": "nothing ran; to run it now anyway: watchkeeper trigger {definition_id} "
               "--tenant {definition_tenant_id}",
    "skipped_expired": "nothing ran; to run it now anyway: watchkeeper trigger {definition_id} "
                       "--tenant {definition_tenant_id}",
}


_BUDGET = re.compile(r"\b(?P<measure>model_requests|tool_attempts|cost_usd): .*?"
                     r"\blimit of (?P<limit>[0-9][0-9.]*[0-9]|[0-9])")
"""A run stopped by its budget: ``BudgetExceeded``'s message names the measure and the
limit (engine/_agents.py: ``"model_requests: 3 would exceed the task's limit of 2"``)."""
_MODEL_404 = "the model endpoint answered 404"
"""A model-agent run whose endpoint does not serve the model (engine/_model_agent.py)."""


def _failed_step(row: Mapping[str, Any]) -> str | None:
    """A step that works for a failed task whose cause another trigger cannot fix: a run
    stopped by its budget (the budget spans the task, so the same revision stops the same
    way: propose a larger limit, named with its value), or a model endpoint's 404 (the
    model named in ``agent.params.model``); ``None`` for other failures."""
    runs = row.get("runs") or []
    last = runs[-1] if runs else {}
    error = str(last.get("error") or row.get("status_reason") or "")
    again = (f"then, not to wait for the next occurrence: watchkeeper trigger "
             f"{row.get('definition_id')} --tenant {row.get('definition_tenant_id')}")
    based = f" (--based-on {row['revision']})" if row.get("revision") else ""
    budget = _BUDGET.search(error)
    if last.get("outcome") == "budget_exceeded" and budget is not None:
        field, limit = f"limits.max_{budget['measure']}", budget["limit"]
        return (f"the run stopped at its budget: {field} is {limit} for the whole task (every "
                f"attempt and root), so running this revision again stops the same way; "
                f"propose a revision{based} with a {field} larger than {limit}, have the owner "
                f"confirm it, {again}")
    if _MODEL_404 in error:
        model = last.get("model")
        named = f" ({model!r})" if model else ""
        return (f"the model endpoint answered 404: it does not serve the model named in "
                f"agent.params.model{named}; propose a revision{based} whose agent.params.model "
                f"is a model the endpoint lists (GET <OPENAI_BASE_URL>/models), have the owner "
                f"confirm it, {again}")
    return None


def next_step(row: Mapping[str, Any]) -> str | None:
    """The one recommended next step for a history row, if it needs one."""
    deliveries = row.get("deliveries") or []
    dead = [d for d in deliveries if d.get("status") == "dead"]
    if dead:
        first = dead[0]
        why = f" ({shorten(str(first.get('last_error')))})" if first.get("last_error") else ""
        return (f"the {first.get('channel')} notice is dead{why}; fix the destination, then: "
                f"watchkeeper redeliver {first.get('delivery_id')} --tenant {row.get('tenant_id')}")
    status = row.get("task_status") or row.get("decision")
    if status == "failed":
        step = _failed_step(row)
        if step is not None:
            return step
    template = _STEPS.get(str(status))
    if template is None:
        return None
    keys = ("definition_id", "definition_tenant_id", "slot", "idempotency_key")
    return template.format(**{k: row.get(k) for k in keys})


def local_time(instant: datetime, zone: str) -> str:
    """The aware ``instant`` as a local time in the IANA ``zone``, ISO 8601 with its UTC
    offset, to the second (``2026-12-02T11:31:12+01:00``): how a preview shows an
    occurrence, also for a manual one (whose instant has microseconds)."""
    return instant.astimezone(ZoneInfo(zone)).isoformat(timespec="seconds")


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime):
        return format_utc(value) if value.tzinfo else value.isoformat()
    return value


def shorten(text: str, limit: int = 80) -> str:
    """``text`` cut to about ``limit`` characters at a word boundary, never inside a
    quoted value (``'...'`` or ``"..."``): a quoted name is kept whole or dropped whole,
    so a next step never shows half an endpoint name. Adds ``…`` when cut."""
    if len(text) <= limit:
        return text
    cut, quote = 0, None
    for index, char in enumerate(text):
        if quote is None and char in "'\"":
            quote = char
        elif char == quote:
            quote = None
        elif quote is None and char == " ":
            if index > limit:
                break
            cut = index
    if quote is None and cut == 0 and len(text) > limit:
        cut = len(text)
    return text if cut >= len(text) else text[:cut].rstrip(" ,;:(") + " …"


async def task_entry(db: Database, tenant_id: str, task_id: int) -> HistoryEntry:
    """One task of ``tenant_id`` with its six facts: the occurrence and its decision,
    the task, every run (attempt, outcome, fencing token, error), the receipt and the
    deliveries, and the one recommended next step.

    Raises:
        NotFound: no such task in ``tenant_id``.
    """
    return await on_standby(db, lambda handle: _task_entry(handle, tenant_id, task_id))


async def _task_entry(db: Database, tenant_id: str, task_id: int) -> HistoryEntry:
    row = await db.fetchrow("history_task", tenant_id, task_id)
    if row is None:
        raise NotFound(f"no task {tenant_id}/{task_id}")
    return HistoryEntry.from_row(row)


async def report(db: Database, tenant_id: str, task_id: int) -> dict[str, Any]:
    """A task's committed report and its receipt: ``content_md`` (the markdown),
    ``headline``, ``content_sha256``, ``verified``, ``verification``, ``output_ref``,
    ``importance``, ``finished_at``, ``committed_at``; and what producing it took:
    ``model`` (of the run that wrote it; ``None`` for an agent without one), ``roots``,
    ``runs``, ``tool_calls`` and ``usage`` (the task's totals over every attempt and
    root: ``model_requests``, ``tool_attempts``, ``input_tokens``, ``output_tokens``
    counts and ``cost_usd`` a decimal string).

    Raises:
        NotFound: the task has no committed report in ``tenant_id`` (or no such task).
    """
    return await on_standby(db, lambda handle: _report(handle, tenant_id, task_id))


async def _report(db: Database, tenant_id: str, task_id: int) -> dict[str, Any]:
    row = await db.fetchrow("report_get", tenant_id, task_id)
    if row is None:
        raise NotFound(f"no report for task {tenant_id}/{task_id}")
    spent = await db.fetchrow("report_usage", tenant_id, task_id, row["run_id"])
    assert spent is not None  # an aggregate always answers one row
    usage = {name: int(spent[name]) for name in ("model_requests", "tool_attempts",
                                                  "input_tokens", "output_tokens")}
    usage["cost_usd"] = plain_decimal(spent["cost_usd"])
    return {**dict(row), "model": spent["model"], "roots": int(spent["roots"]),
            "runs": int(spent["runs"]), "tool_calls": int(spent["tool_calls"]), "usage": usage}
