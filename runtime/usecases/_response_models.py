"""The response shapes of history and reports, shared by every door that answers them
(the HTTP API's OpenAPI schema, the MCP tools' ``outputSchema``; the CLI's ``--json``
dumps them too): one definition each, so the doors cannot drift apart. The values come
from :func:`~._history.history`, :func:`~._history.task_entry` and
:func:`~._history.report`.

Instants are ISO 8601 with an offset (UTC); durations are seconds; costs are USD as
plain decimal strings (``"0.0038816"``, never ``"0.003881600000000000"`` or ``"1E+1"``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["HistoryEntryOut", "HistoryEventOut", "HistoryPageOut", "ReportOut",
           "ReportSpending", "UsageTotals"]


class _Out(BaseModel):
    model_config = ConfigDict(extra="ignore", from_attributes=True)


class UsageTotals(_Out):
    """Spending: counts, and the cost in USD as a decimal string."""

    model_requests: int
    tool_attempts: int
    input_tokens: int
    output_tokens: int
    cost_usd: str = Field(description="USD, a plain decimal string (exact), e.g. "
                                      "\"0.0038816\".")


class ReportSpending(_Out):
    """A report's headline and what the task's runs took to produce it."""

    headline: str = Field(description="The report's one-line headline ('' when the agent "
                          "gave none).")
    model: str | None = Field(description="The model that wrote the report (null: an agent "
                              "without a model).")
    roots: int = Field(description="Root runs the task took (more than 1 only under "
                       "continuation intents, up to limits.max_roots).")
    runs: int = Field(description="Runs of the task: every attempt of every root.")
    tool_calls: int = Field(description="Tool calls the task's runs made, refused ones "
                            "included.")
    usage: UsageTotals = Field(description="What the task's runs spent in all, against its "
                               "limits.max_model_requests, max_tool_attempts and "
                               "max_cost_usd.")


class ReportOut(ReportSpending):
    """A committed report and its receipt."""

    tenant_id: str
    task_id: int
    markdown: str
    importance: str
    content_sha256: str
    output_ref: str
    verified: bool
    verification: str
    finished_at: datetime
    committed_at: datetime


class HistoryEntryOut(_Out):
    """One occurrence and its six facts: the decision and its admission lateness, the
    task, its runs, the receipt, the deliveries, and one recommended next step."""

    tenant_id: str
    definition_tenant_id: str
    definition_id: str
    binding_id: str
    slot: str = Field(description="The occurrence's stable slot key (a manual one: its UTC "
                                  "instant).")
    kind: str = Field(description="scheduled, manual or condition.")
    revision: int
    scheduled_for: datetime = Field(description="UTC instant.")
    local: str = Field(description="scheduled_for as a local time in zone, with its UTC "
                                   "offset (ISO 8601, to the second), as a preview shows it; "
                                   "a manual occurrence too.")
    zone: str = Field(description="The definition's zone (UTC for an interval).")
    not_before: datetime
    expires_at: datetime
    decision: str
    reason: str | None
    late: bool = Field(description="Admitted past its expires_at (late_grace).")
    admission_lateness_seconds: float = Field(description=(
        "Seconds from not_before to the admission decision (0: decided on time). Not the "
        "time the run started: a report's start lateness counts to the run's start."))
    owner_user_id: str | None
    task_id: int | None
    task_status: str | None
    status_reason: str | None
    attempts: int | None
    content_sha256: str | None
    verified: bool | None
    committed_at: datetime | None
    importance: str | None
    runs: list[dict[str, Any]] | None = Field(description=(
        "Each run (attempt) in order: attempt, root, outcome (succeeded, failed, "
        "budget_exceeded, continued, timed_out, lease_lost, rejected_stale, ...), worker, "
        "lease_token, started_at, finished_at, error, model, usage (model_requests, "
        "tool_attempts, input_tokens, output_tokens, cost_usd), tool_calls (tool, source, "
        "subject, status, and the observation or the refusal's reason) and continuation "
        "(the intent the run ended with: reason, instructions, status accepted or refused, "
        "and the refusal)."))
    deliveries: list[dict[str, Any]] | None
    outcome: str = Field(description="The furthest fact reached.")
    next_step: str | None = Field(description="What a person could do next (null: nothing).")


class HistoryEventOut(_Out):
    """A decision that claims no occurrence: a range of skipped slots, a fenced-out plan."""

    tenant_id: str
    definition_id: str
    binding_id: str
    kind: str
    first_slot: str | None
    last_slot: str | None
    count: int
    reason: str
    recorded_at: datetime


class HistoryPageOut(_Out):
    """History, newest first."""

    items: list[HistoryEntryOut]
    events: list[HistoryEventOut]
    next_cursor: str | None = Field(description="Pass it as cursor for the next page (null: "
                                                "last page).")
