"""What the tools answer: pydantic models, published as each tool's ``outputSchema``
and sent as its ``structuredContent`` (with the same JSON as text, for clients that read
text only). Instants are ISO 8601 UTC; durations are seconds. History and reports
answer the use cases' models (``HistoryEntryOut``, ``HistoryPageOut``, ``ReportOut``),
the HTTP API's own.

A refused call answers a :class:`ToolProblem` instead (``isError``), in the shape of the
HTTP API's RFC 9457 problem details.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from watchkeeper.runtime.usecases import HistoryEntryOut, HistoryPageOut, ReportOut

__all__ = [
    "Agreement", "AgreementList", "AgreementSummary", "ConfirmHint", "FieldProblem",
    "HistoryEntryOut", "HistoryPageOut", "Poll", "PollList", "PreviewItem", "Proposal",
    "ReportOut", "Revision", "ScheduleOutlook", "TaskReport", "ToolProblem",
]


class _Out(BaseModel):
    model_config = ConfigDict(extra="ignore", from_attributes=True)


class SpecWarningOut(_Out):
    """Something to know about an accepted spec; it was accepted as it is."""

    field: str = Field(description="The field it is about, e.g. trigger.zone.")
    message: str = Field(description="What to know, e.g. 'US/Eastern is stored as "
                                     "America/New_York: ...' or that a fixed offset never "
                                     "follows DST: tell the user.")


class PreviewItem(_Out):
    """One occurrence (for a condition: one poll)."""

    scheduled_for: datetime = Field(description="UTC instant.")
    local: str = Field(description="Local wall time with its UTC offset (ISO 8601).")
    slot: str = Field(description="The occurrence's stable slot key.")
    note: str | None = Field(None, description="A DST remark: a skipped, moved or repeated local "
                                               "time, or an offset change. Tell the user.")
    runs: bool = Field(description="False for a slot that is recorded but does not run.")


class ScheduleOutlook(_Out):
    """A spec in plain words and its next occurrences (nothing stored)."""

    summary: str = Field(description="The agreement in plain words, for the user.")
    next: list[PreviewItem]
    warnings: list[SpecWarningOut] = Field(default_factory=list, description=(
        "What to know about the spec as accepted (a zone stored under its tz database "
        "name, a fixed offset that never follows DST): tell the user."))


class ConfirmHint(_Out):
    """Where the owner confirms: the HTTP API's route and the CLI command. The agent
    cannot confirm; the user does, with their own credential and this ``spec_hash``."""

    method: str
    path: str
    body: dict[str, Any]
    cli: str


class Proposal(_Out):
    """A recorded proposal, waiting for its owner."""

    tenant_id: str
    definition_id: str
    revision: int
    spec_hash: str = Field(description="SHA-256 of the canonical JSON of the effective part; the "
                                       "owner presents it to confirm what they were shown.")
    needs_confirmation: bool = Field(description="False for a descriptive edit (title, notes): "
                                                 "effective at once.")
    title: str
    notes: str
    summary: str = Field(description="The agreement in plain words: show it to the user.")
    effective: dict[str, Any] = Field(description="What the hash covers.")
    next: list[PreviewItem] = Field(description="The next occurrences, with DST notes: show "
                                                "them to the user.")
    warnings: list[SpecWarningOut] = Field(default_factory=list, description=(
        "What to know about the spec as accepted (a zone stored under its tz database "
        "name, a fixed offset that never follows DST): tell the user."))
    confirm: ConfirmHint | None = Field(description="Where the user confirms (null: nothing to "
                                                    "confirm).")


class AgreementSummary(_Out):
    """One definition in a list."""

    tenant_id: str
    definition_id: str
    origin: str
    owner_user_id: str | None
    status: str = Field(description="proposed, active, paused or cancelled.")
    fence: int
    latest_revision: int
    effective_revision: int | None
    next_due_at: datetime | None
    slots_seen: int
    title: str | None
    trigger: dict[str, Any] | None


class AgreementList(_Out):
    """A page of definitions, by id."""

    items: list[AgreementSummary]
    next_cursor: str | None = Field(description="Pass it as cursor for the next page (null: "
                                                "last page).")


class Revision(_Out):
    """One revision of a definition."""

    revision: int
    spec_hash: str
    status: str = Field(description="proposed, confirmed, superseded, withdrawn, rejected or "
                                    "registered.")
    based_on: int | None
    proposed_by: str
    proposed_at: datetime
    confirmed_by: str | None
    confirmed_at: datetime | None
    rejected_by: str | None = None
    rejected_at: datetime | None = None
    title: str | None


class AwaitingProposal(Proposal):
    """The revision awaiting its owner's confirmation, as propose_agreement answered it
    (next occurrences recomputed from now), with its whole spec."""

    spec: dict[str, Any] = Field(description="The proposed spec, descriptive part included.")
    proposed_by: str
    proposed_at: datetime


class Agreement(AgreementSummary):
    """One definition: status, revisions, the effective spec in plain words and its next
    occurrences, and the revision awaiting confirmation."""

    effective_since: datetime | None = None
    status_note: str = Field("", description="Why it was last paused, resumed or cancelled.")
    status_by: str | None = Field(None, description="Who did that.")
    spec: dict[str, Any] | None = Field(None, description=(
        "The effective (confirmed) spec; before the first confirmation, the proposed one "
        "(shows_revision says which)."))
    spec_hash: str | None = None
    shows_revision: int | None = Field(None, description="The revision spec, spec_hash, "
                                                         "summary and next describe.")
    summary: str | None = Field(None, description="That spec in plain words.")
    proposal: AwaitingProposal | None = Field(None, description=(
        "The revision awaiting the owner's confirmation (null: none): show the user its "
        "summary and next, and where to confirm."))
    revisions: list[Revision]
    next: list[PreviewItem] = Field(default_factory=list)


class TaskReport(_Out):
    """A task's six facts, and its report when one was committed."""

    task: HistoryEntryOut
    report: ReportOut | None = Field(description="Null while the task has not committed one.")


class Poll(_Out):
    """One poll of a condition: its verdict, what it did and why."""

    definition_id: str
    binding_id: str
    slot: str
    scheduled_for: datetime
    revision: int
    status: str
    verdict: str | None = Field(description="true, false or unknown.")
    previous_verdict: str | None
    action: str | None
    reason: str | None
    task_id: int | None
    observations: list[dict[str, Any]] | None


class PollList(_Out):
    """A condition's poll timeline, oldest first."""

    items: list[Poll]
    next_cursor: str | None = Field(description="Pass it as cursor for the next page (null: "
                                                "last page, or the newest-polls view).")


class FieldProblem(BaseModel):
    """One thing wrong with the input: the field (a dotted path), what is wrong, the fix."""

    field: str
    message: str
    fix: str = ""


class ToolProblem(BaseModel):
    """Why a call was refused (the HTTP API's problem details, RFC 9457): ``errors``
    lists every problem of the input at once, so a spec is corrected in one round."""

    type: str = Field(description="A URN naming the kind of problem.")
    title: str
    status: int = Field(description="The HTTP status the API gives the same refusal.")
    detail: str = ""
    retryable: bool = Field(False, description="True when the same call may succeed later.")
    errors: list[FieldProblem] = Field(default_factory=list)
