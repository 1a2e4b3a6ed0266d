"""Request and response bodies of the HTTP API (pydantic; they are its OpenAPI 3.1
schema). Instants are ISO 8601 with an offset; durations are seconds. History and
report bodies are the use cases' (``HistoryEntryOut``, ``HistoryEventOut``,
``HistoryPageOut``, ``ReportOut``): the MCP tools answer the same definitions."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema

from watchkeeper.runtime.usecases import (
    HistoryEntryOut,
    HistoryEventOut,
    HistoryPageOut,
    Instant,
    ReportOut,
)
from watchkeeper.triggers import ENDPOINT_NAME_PATTERN, IDENTIFIER_PATTERN

__all__ = [
    "CancelIn", "ConfirmIn", "ConfirmationOut", "DefinitionList", "DefinitionOut",
    "DefinitionSummary", "DeliveryList", "DeliveryOut", "EndpointIn", "EndpointList",
    "EndpointOut", "FenceOut", "HistoryEntryOut", "HistoryEventOut", "HistoryPageOut", "NoteIn",
    "PollList", "PollOut", "PreferencesIn", "PreferencesOut", "PreviewIn", "PreviewItemOut",
    "PreviewOut", "ProposalOut", "ProposeIn", "ReportOut", "ReviewIn", "ReviewOut",
    "RotateIn", "SPEC_MARKER", "SecretOut", "SpecJson", "TickOut", "TriggerIn", "TriggerOut",
]

SPEC_MARKER = "x-watchkeeper-spec"
SpecJson = Annotated[dict[str, Any], WithJsonSchema({"type": "object", SPEC_MARKER: True})]
"""A spec as JSON: validated by watchkeeper's spec model (every problem at once, 422);
its schema is the spec model's (``#/components/schemas/Spec``)."""


class _Out(BaseModel):
    model_config = ConfigDict(extra="ignore", from_attributes=True)


class _In(BaseModel):
    """A request body: unknown fields are refused (``additionalProperties: false``); a
    number or a boolean is taken only as the schema types it (``strict``: ``false`` is
    no number of hours, ``1`` no boolean)."""

    model_config = ConfigDict(extra="forbid")


_WALL = r"([01]?[0-9]|2[0-3]):[0-5][0-9]"
Identifier = Annotated[str, Field(pattern=IDENTIFIER_PATTERN, max_length=128)]
"""A tenant, user, definition or binding id."""


class SpecWarningOut(_Out):
    """Something to know about an accepted spec; it was accepted as it is."""

    field: str = Field(description="The field it is about, e.g. trigger.zone.")
    message: str = Field(description="What to know, e.g. 'US/Eastern is stored as "
                                     "America/New_York: ...' or that a fixed offset never "
                                     "follows DST: tell the user.")


class PreviewItemOut(_Out):
    """One occurrence (for a condition: one poll)."""

    scheduled_for: datetime = Field(description="UTC instant.")
    local: str = Field(description="Local wall time with its UTC offset (ISO 8601).")
    slot: str = Field(description="The occurrence's stable slot key.")
    note: str | None = Field(None, description="A DST remark: a skipped, moved or repeated "
                                               "local time, or an offset change.")
    runs: bool = Field(description="False for a slot that is recorded but does not run.")


class PreviewIn(_In):
    """A stateless preview of a spec's next occurrences."""

    spec: SpecJson
    after: Instant | None = Field(None, description="Strictly after this instant (default now); "
                                                    "1970-01-01T00:00:00Z to 2200-01-01T00:00:00Z.")
    count: int = Field(10, ge=1, le=1000, strict=True)


class PreviewOut(_Out):
    summary: str
    next: list[PreviewItemOut]
    warnings: list[SpecWarningOut] = Field(default_factory=list, description=(
        "What to know about the spec as accepted (a zone stored under its tz database "
        "name, a fixed offset that never follows DST)."))


class ProposeIn(_In):
    """A proposed revision of definition ``{definition_id}``."""

    spec: SpecJson
    owner: Identifier | None = Field(None, description="The owner user (required for an agent or an "
                                                "operator key; a user proposes for themselves).")
    based_on: int | None = Field(None, ge=1, le=2**31 - 1, strict=True,
                                 description="The latest revision this edit starts from "
                                             "(required once the definition exists).")


class ConfirmHint(_Out):
    """Where the owner confirms (the API route, and the CLI command)."""

    method: str = "POST"
    path: str
    body: dict[str, Any]
    cli: str


class ProposalOut(_Out):
    tenant_id: str
    definition_id: str
    revision: int
    spec_hash: str = Field(description="SHA-256 of the canonical JSON of the effective part; "
                                       "the owner presents it to confirm.")
    needs_confirmation: bool
    title: str
    notes: str
    summary: str = Field(description="The agreement in plain words, for the user.")
    effective: dict[str, Any] = Field(description="What the hash covers.")
    next: list[PreviewItemOut]
    warnings: list[SpecWarningOut] = Field(default_factory=list, description=(
        "What to know about the spec as accepted (a zone stored under its tz database "
        "name, a fixed offset that never follows DST): show it to the user."))
    confirm: ConfirmHint | None


class ConfirmIn(_In):
    spec_hash: str = Field(min_length=1, max_length=128,
                           description="The spec_hash the owner was shown.")


class ConfirmationOut(_Out):
    definition_id: str
    revision: int
    fence: int
    effective_since: datetime
    next_due_at: datetime | None


class NoteIn(_In):
    note: str = Field("", max_length=1000, description="Why (kept with the audit trail).")


class CancelIn(NoteIn):
    running: bool = Field(False, strict=True, description="Also request cancellation of the running task.")


class FenceOut(_Out):
    definition_id: str
    status: str
    fence: int


class TriggerIn(_In):
    binding: str | None = Field(None, max_length=257, pattern=r"^[^/]+/[^/]+$",
                                description="TENANT/BINDING of a registered definition.")


class TriggerDecision(_Out):
    tenant_id: str
    binding_id: str
    decision: str


class TriggerOut(_Out):
    slot: str
    decisions: list[TriggerDecision]
    recovered: bool


class ReviewIn(_In):
    slot: str = Field(min_length=1, max_length=200)
    decision: Literal["approve", "skip"]
    binding: str | None = Field(None, description="TENANT/BINDING of a registered definition.")


class ReviewOut(_Out):
    decision: str


class DefinitionSummary(_Out):
    tenant_id: str
    definition_id: str
    origin: str
    owner_user_id: str | None
    status: str
    fence: int
    latest_revision: int
    effective_revision: int | None
    next_due_at: datetime | None
    slots_seen: int
    title: str | None
    trigger: dict[str, Any] | None


class DefinitionList(_Out):
    items: list[DefinitionSummary]
    next_cursor: str | None


class RevisionOut(_Out):
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


class RejectionOut(_Out):
    """A proposed revision the owner rejected: it never runs."""

    definition_id: str
    revision: int
    status: str = "rejected"


class AwaitingProposalOut(ProposalOut):
    """The revision awaiting its owner's confirmation, as its proposal answered it (next
    occurrences recomputed from now), with its whole spec."""

    spec: dict[str, Any] = Field(description="The proposed spec, descriptive part included.")
    proposed_by: str
    proposed_at: datetime


class DefinitionOut(DefinitionSummary):
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
    proposal: AwaitingProposalOut | None = Field(None, description=(
        "The revision awaiting the owner's confirmation (null: none)."))
    revisions: list[RevisionOut]
    next: list[PreviewItemOut] = Field(default_factory=list)


class PollOut(_Out):
    definition_id: str
    binding_id: str
    slot: str
    scheduled_for: datetime
    revision: int
    status: str
    verdict: str | None
    previous_verdict: str | None
    action: str | None
    reason: str | None
    task_id: int | None
    observations: list[dict[str, Any]] | None


class PollList(_Out):
    items: list[PollOut]
    next_cursor: str | None


class DeliveryOut(_Out):
    tenant_id: str
    delivery_id: str
    event: str = Field("report.committed", description=(
        "report.committed (a report's notice) or task.not_run (the agreed run did not "
        "happen: failed, timed_out, budget_exceeded, skipped_expired, review_required)."))
    task_id: int | None = Field(description="The task (null: a task.not_run notice of an "
                                            "occurrence that admitted none).")
    definition_id: str
    slot: str
    channel: str
    destination: str
    status: str
    attempts: int
    redeliveries: int
    next_attempt_at: datetime | None
    delivered_at: datetime | None
    response_status: int | None
    last_error: str | None
    status_reason: str | None


class DeliveryList(_Out):
    items: list[DeliveryOut]


class EndpointIn(_In):
    name: str = Field(pattern=ENDPOINT_NAME_PATTERN, description="The name specs deliver to.")
    url: str = Field(min_length=1, max_length=2000, description="An http(s) URL.")


class EndpointOut(_Out):
    tenant_id: str
    name: str
    url: str
    created_at: datetime
    active_secrets: int


class EndpointList(_Out):
    items: list[EndpointOut]


class RotateIn(_In):
    overlap_hours: float = Field(24.0, ge=0, le=720, strict=True,
                                 description="Hours the old secrets keep signing.")


class SecretOut(_Out):
    tenant_id: str
    name: str
    secret: str = Field(description="The signing secret (whsec_...), shown this once.")


class PreferencesIn(_In):
    channels: list[Literal["log", "file", "webhook"]] | None = Field(
        None, description="Enabled channels; null: all; []: none.")
    min_importance: Literal["low", "normal", "high"] = "low"
    quiet: str | None = Field(None, pattern=f"^{_WALL}-{_WALL}$",
                              description="Quiet hours HH:MM-HH:MM in the user's zone.")


class PreferencesOut(_Out):
    tenant_id: str
    user_id: str
    channels: list[str] | None
    min_importance: str
    quiet: str | None
    zone: str


class TickOut(_Out):
    decisions: dict[str, int]
    ranges: int
    fenced_out: int
    polls: dict[str, int]
    tasks: dict[str, int]
    deliveries: dict[str, int]
