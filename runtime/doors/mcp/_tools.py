"""The tools: typed functions whose signatures are their input schemas and whose
models are their output schemas (the SDK's ``weather_structured.py`` pattern). Each
authenticates its call, calls one use case and renders it; a refusal is an error
result (:mod:`._results`).

There is no tool that confirms, pauses, resumes, cancels or triggers: "saying
understood cannot grant indefinite background execution authority" (seed 004). The
owner confirms, with the ``spec_hash`` they were shown, through the HTTP API or the CLI;
:func:`propose_agreement` answers where.

The ``spec`` parameter's schema is the spec model's (:class:`~watchkeeper.triggers.SpecV1`),
its definitions hoisted into the tool's own ``$defs`` so the input schema is one
self-contained document whose references resolve.
"""

from __future__ import annotations

from typing import Annotated, Any

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.tools import Tool
from mcp.types import CallToolResult, ToolAnnotations
from pydantic import Field, ValidationError, WithJsonSchema

from watchkeeper.runtime import Clock, Database, NotFound, Settings
from watchkeeper.runtime import usecases as uc
from watchkeeper.triggers import (
    IDENTIFIER_PATTERN,
    SpecError,
    SpecV1,
    parse_spec,
    validation_problems,
)

from ._auth import principal_of
from ._models import (
    Agreement,
    AgreementList,
    HistoryEntryOut,
    HistoryPageOut,
    PollList,
    Proposal,
    ReportOut,
    ScheduleOutlook,
    TaskReport,
)
from ._results import KNOWN, answer, read_from, refusal

__all__ = ["SPEC_MARKER", "ArgumentsChecked", "Tools"]

SPEC_MARKER = "x-watchkeeper-spec"
SpecArg = Annotated[dict[str, Any], WithJsonSchema({"type": "object", SPEC_MARKER: True})]
"""A spec as JSON; its published schema is the spec model's (see :func:`_with_spec_schema`)
and it is parsed by the use case, so every problem comes back at once."""

_IDENTIFIER = {"pattern": IDENTIFIER_PATTERN, "maxLength": 128}
"""The identifier rule, stated in the schema and checked by the use cases (so a refusal
is a problem naming the field, not the SDK's text)."""
DefinitionId = Annotated[str, Field(description="The agreement's id in your tenant, e.g. "
                                                "'holdings' (letters, digits, . _ : @ -).",
                                    json_schema_extra=_IDENTIFIER)]
UserId = Annotated[str, Field(json_schema_extra=_IDENTIFIER)]
Cursor = Annotated[str | None, Field(max_length=2000,
                                     description="The next_cursor of the previous page.")]
Instant = Annotated[uc.Instant | None, Field(
    description="RFC 3339 with an offset, 1970-01-01T00:00:00Z to 2200-01-01T00:00:00Z.")]

_READ = ToolAnnotations(read_only_hint=True, open_world_hint=False)
_PROPOSE = ToolAnnotations(read_only_hint=False, destructive_hint=False,
                           idempotent_hint=False, open_world_hint=False)


class ArgumentsChecked(Tool):
    """A tool whose arguments that do not fit its input schema are refused as problem
    details (every field, what is wrong, what fits), as a refused spec is, instead of
    the SDK's ``Error executing tool`` with pydantic's text."""

    async def run(self, arguments: dict[str, Any], context: Any,
                  convert_result: bool = False) -> Any:
        """The SDK's run, once the arguments validate; else the refusal."""
        try:
            self.fn_metadata.validate_arguments(arguments)
        except ValidationError as exc:
            problems = validation_problems(exc, self.fn_metadata.arg_model)
            if problems:
                return refusal(SpecError.of(problems))
        return await super().run(arguments, context, convert_result)


class Tools:
    """The tools over one database, clock and settings; ``agent_key`` is the stdio
    transport's credential (``None`` over HTTP, where each request brings its own)."""

    def __init__(self, db: Database, clock: Clock, settings: Settings,
                 agent_key: str | None = None) -> None:
        self.db, self.clock, self.settings, self.agent_key = db, clock, settings, agent_key

    def all(self) -> list[Tool]:
        """Every tool, registered with the SDK, the spec parameters' schemas filled in."""
        table = ((self.propose_agreement, "Propose an agreement", _PROPOSE),
                 (self.preview_schedule, "Preview a schedule", _READ),
                 (self.list_agreements, "List agreements", _READ),
                 (self.show_agreement, "Show an agreement", _READ),
                 (self.task_history, "Task history", _READ),
                 (self.task_report, "A task's report", _READ),
                 (self.condition_timeline, "A condition's poll timeline", _READ))
        return [_with_spec_schema(ArgumentsChecked.from_function(fn, title=title,
                                                                  annotations=notes))
                for fn, title, notes in table]

    async def _principal(self, ctx: Context) -> uc.AgentPrincipal:
        return await principal_of(ctx, self.db, self.clock, self.agent_key)

    async def propose_agreement(
        self, definition_id: DefinitionId, spec: SpecArg,
        owner: Annotated[UserId, Field(description="The user who will own the agreement and "
                                                   "confirm it (a user of your tenant).")],
        ctx: Context,
        based_on: Annotated[int | None, Field(ge=1, le=2**31 - 1, description=(
            "The latest revision this edit starts from: required once the agreement "
            "exists (read it with show_agreement)."))] = None,
    ) -> Annotated[CallToolResult, Proposal]:
        """Propose a standing agreement (a calendar schedule: cron with an IANA zone,
        interval or a single instant; or a condition on an observation source) for a
        user to confirm. Nothing runs until the owner confirms this exact revision with
        the spec_hash returned here, through the HTTP API or the CLI (the answer's
        `confirm`): you cannot confirm it. Show the user `summary` and `next` (the next
        occurrences, with DST notes) and tell them where to confirm. A refused spec
        answers every problem at once in `errors`, each with its field and fix: correct
        them all and call again."""
        async def run() -> Proposal:
            view = await uc.propose_spec(
                self.db, self.clock, await self._principal(ctx), definition_id=definition_id,
                spec=spec, owner_user_id=owner, based_on=based_on,
                min_interval=self.settings.min_interval_delta)
            return Proposal(**view.to_json(), confirm=view.confirm_at())
        return await _reply(run, definition_id=definition_id, owner=owner)

    async def preview_schedule(
        self, spec: SpecArg, ctx: Context, after: Instant = None,
        count: Annotated[int, Field(ge=1, le=100, description="How many occurrences.")] = 5,
    ) -> Annotated[CallToolResult, ScheduleOutlook]:
        """Preview a spec without storing anything: its summary in plain words and its
        next occurrences strictly after `after` (default now), with DST notes. A refused
        spec answers every problem at once in `errors`."""
        async def run() -> ScheduleOutlook:
            uc.authorize(await self._principal(ctx), uc.Capability.PREVIEW)
            parsed = parse_spec(spec, min_interval=self.settings.min_interval_delta)
            items = uc.preview_spec(parsed, after or self.clock.now(), count)
            return ScheduleOutlook(summary=uc.describe(parsed), next=[i.to_json() for i in items],
                                   warnings=[w.to_json() for w in parsed.warnings])
        return await _reply(run)

    async def list_agreements(
        self, ctx: Context, cursor: Cursor = None,
        limit: Annotated[int, Field(ge=1, le=500)] = 50,
    ) -> Annotated[CallToolResult, AgreementList]:
        """Your tenant's agreements by id: status (proposed, active, paused,
        cancelled), revisions, next due time; paged with next_cursor."""
        async def run() -> AgreementList:
            tenant, owner = uc.reading_scope(await self._principal(ctx))
            rows = await uc.list_definitions(self.db, tenant, owner_user_id=owner, limit=limit,
                                             after=uc.decode_cursor(cursor, uc.DEFINITIONS_CURSOR))  # type: ignore[arg-type]
            last = rows[-1] if len(rows) == limit else None
            return AgreementList(items=rows, next_cursor=uc.encode_cursor(
                (last["tenant_id"], last["definition_id"]) if last else None))
        return await _reply(run, cursor=cursor)

    async def show_agreement(self, definition_id: DefinitionId,
                             ctx: Context) -> Annotated[CallToolResult, Agreement]:
        """One agreement: status, every revision (proposed, confirmed, ...), the
        effective spec and its summary, its next occurrences with DST notes, and the
        revision awaiting the owner's confirmation (`proposal`) as propose_agreement
        answered it: summary, next occurrences, spec, spec_hash and where to confirm.
        Before the first confirmation, `spec`, `summary` and `next` show that proposal."""
        async def run() -> Agreement:
            reading = await uc.read_definition(self.db, self.clock, await self._principal(ctx),
                                               definition_id)
            return Agreement(**reading.to_json())
        return await _reply(run, definition_id=definition_id)

    async def task_history(
        self, ctx: Context, definition_id: Annotated[str | None, Field(
            description="Only this agreement.", json_schema_extra=_IDENTIFIER)] = None,
        user: Annotated[str | None, Field(description="Only this owner.",
                                          json_schema_extra=_IDENTIFIER)] = None,
        status: Annotated[str | None, Field(description="A decision (e.g. skipped_expired) "
                                                        "or task status (e.g. completed).")] = None,
        since: Instant = None, until: Instant = None,
        limit: Annotated[int, Field(ge=1, le=200)] = 20, cursor: Cursor = None,
    ) -> Annotated[CallToolResult, HistoryPageOut]:
        """Task history, newest first: each occurrence with its six facts (decision and
        admission lateness, task, runs, receipt, deliveries) and one recommended next step, plus
        the skipped ranges; filtered by agreement, owner, status and scheduled time;
        paged with next_cursor."""
        async def run() -> HistoryPageOut:
            uc.check_identifiers({"definition_id": definition_id, "user": user})
            tenant, owner = uc.reading_scope(await self._principal(ctx))
            page = await uc.history(self.db, uc.HistoryQuery(
                tenant, definition_id, owner or user, status, since, until, limit,
                uc.decode_cursor(cursor, uc.HISTORY_CURSOR)))  # type: ignore[arg-type]
            return HistoryPageOut(items=[_entry(e) for e in page.entries],
                               events=[dict(e.row) for e in page.events],
                               next_cursor=uc.encode_cursor(page.after))
        return await _reply(run, definition_id=definition_id, user=user, status=status,
                            cursor=cursor)

    async def task_report(
        self, task_id: Annotated[int, Field(ge=1, le=2**63 - 1)], ctx: Context,
    ) -> Annotated[CallToolResult, TaskReport]:
        """One task: its six facts as in task_history, and its committed report
        (markdown) with the receipt (content hash, verification), or null while it has
        none."""
        async def run() -> TaskReport:
            principal = await self._principal(ctx)
            tenant, _ = uc.reading_scope(principal)
            entry = await uc.task_entry(self.db, tenant, task_id)
            uc.authorize(principal, uc.Capability.READ, tenant_id=entry["tenant_id"],
                         owner_user_id=entry["owner_user_id"])
            try:
                row = await uc.report(self.db, tenant, task_id)
            except NotFound:
                return TaskReport(task=_entry(entry), report=None)
            return TaskReport(task=_entry(entry),
                              report=ReportOut(**row, markdown=row["content_md"]))
        return await _reply(run)

    async def condition_timeline(
        self, definition_id: DefinitionId, ctx: Context, since: Instant = None,
        cursor: Cursor = None, limit: Annotated[int, Field(ge=1, le=1000)] = 100,
        changes: Annotated[bool, Field(description="Only polls whose verdict changed or "
                                                   "that did something.")] = False,
    ) -> Annotated[CallToolResult, PollList]:
        """A condition's polls, oldest first: each verdict (true, false, unknown), the
        previous one, the action and reason, the task it admitted and the observations
        read. Without since or cursor: the newest `limit` polls."""
        async def run() -> PollList:
            view = await self._visible(ctx, definition_id)
            after = uc.decode_cursor(cursor, uc.POLLS_CURSOR)
            page = await uc.polls(self.db, uc.PollsQuery(
                view.definition["tenant_id"], definition_id, since,
                uc.PollCursor(*after) if after else None, limit, changes))  # type: ignore[arg-type]
            position = page.next_after
            return PollList(items=list(page.polls), next_cursor=uc.encode_cursor(
                (position.scheduled_for, position.definition_id, position.binding_id,
                 position.slot) if position else None))
        return await _reply(run, definition_id=definition_id, cursor=cursor)

    async def _visible(self, ctx: Context, definition_id: str) -> uc.DefinitionView:
        """The definition, if the call's principal may read it (another tenant's: NotFound)."""
        principal = await self._principal(ctx)
        tenant, _ = uc.reading_scope(principal)
        view = await uc.show_definition(self.db, tenant, definition_id)
        uc.authorize(principal, uc.Capability.READ, tenant_id=view.definition["tenant_id"],
                     owner_user_id=view.definition["owner_user_id"])
        return view


def _entry(entry: uc.HistoryEntry) -> HistoryEntryOut:
    return HistoryEntryOut(**entry.row, outcome=entry.outcome, next_step=entry.next_step)


async def _reply(run: Any, **arguments: Any) -> CallToolResult:
    """``run()``'s model as the answer, or the refusal it raised; first, the text
    ``arguments`` (named as the tool's parameters) pass the doors' shared check (no NUL,
    no lone surrogate; a ``spec`` is its parser's to check). With a read standby, an
    answer says where it was read and how old it may be (:func:`._results.read_from`)."""
    try:
        uc.check_input(arguments)
        with uc.noting_reads() as note:
            result = answer(await run())
    except KNOWN as exc:
        return refusal(exc)
    return read_from(result, note.source)


def _with_spec_schema(tool: Tool) -> Tool:
    """Replace every ``spec`` placeholder in ``tool``'s input schema by the spec model's
    JSON Schema, its ``$defs`` merged into the input schema's own (references stay
    ``#/$defs/...``, resolving within the one document).

    Raises:
        RuntimeError: a definition name of the spec model clashes with one of the tool's.
    """
    properties = tool.parameters.get("properties", {})
    if not any(p.get(SPEC_MARKER) for p in properties.values()):
        return tool
    spec = SpecV1.model_json_schema()
    definitions = spec.pop("$defs", {})
    for name, schema in properties.items():
        if schema.get(SPEC_MARKER):
            properties[name] = spec
    own = tool.parameters.setdefault("$defs", {})
    if clash := set(own) & set(definitions):
        raise RuntimeError(f"tool {tool.name}: schema definitions {sorted(clash)} clash")
    own.update(definitions)
    return tool
