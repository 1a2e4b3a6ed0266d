"""What a proposal shows the person asked to confirm it, the same in every door: the
revision and its ``spec_hash``, the effective part the hash covers, a one-paragraph
summary a chat can show, and the next occurrences with their DST notes.

DESIGN "Definitions, revisions, confirmation": a chat agent proposes; the owner
confirms the exact revision by presenting the hash they were shown ("what you saw is
what you confirmed").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from cron_descriptor import Options, get_description

from watchkeeper.triggers import (
    AllOf,
    AnyOf,
    AtTrigger,
    Comparison,
    ConditionTrigger,
    CronTrigger,
    Delivery,
    IntervalTrigger,
    NoOccurrenceError,
    NotOf,
    Predicate,
    PreviewItem,
    Spec,
    SpecError,
    SpecProblem,
    SpecProblems,
    SpecV1,
    SpecWarning,
    check_identifier,
    format_utc,
    parse_spec,
    preview,
)

from ..engine._clock import Clock
from ..engine._ledger import check_destinations
from ..store._db import Database
from ._access import Capability, authorize
from ._definitions import Proposal, propose
from ._input import check_instants
from ._keys import Principal
from ._principals import UserPrincipal

__all__ = ["BUILT_IN_AGENTS", "ProposalView", "agent_warnings", "checked_proposal",
           "describe", "preview_spec", "proposal_view", "propose_spec"]

PREVIEW_COUNT = 5


@dataclass(frozen=True, slots=True)
class ProposalView:
    """A recorded proposal and what to show about it.

    Attributes:
        spec: the proposed spec (its ``effective()`` part is what the hash covers).
        summary: one paragraph in plain words (:func:`describe`).
        next: the next occurrences (or polls, for a condition) after the proposal.
        warnings: what the proposer should know about the accepted spec (the spec's
            :attr:`~watchkeeper.triggers.SpecV1.warnings`: a zone stored under another
            name, a fixed offset), then ``also``'s (an agent no supervisor has offered).
    """

    proposal: Proposal
    spec: Spec
    summary: str
    next: Sequence[PreviewItem]
    also: tuple[SpecWarning, ...] = ()

    @property
    def warnings(self) -> tuple[SpecWarning, ...]:
        return (*self.spec.warnings, *self.also)

    def to_json(self) -> dict[str, Any]:
        """``tenant_id``, ``definition_id``, ``revision``, ``spec_hash``,
        ``needs_confirmation``, ``title``, ``notes``, ``summary``, ``effective``, ``next``,
        ``warnings`` (``[{field, message}]``)."""
        p = self.proposal
        return {"tenant_id": p.tenant_id, "definition_id": p.definition_id,
                "revision": p.revision, "spec_hash": p.spec_hash,
                "needs_confirmation": p.needs_confirmation, "title": self.spec.title,
                "notes": self.spec.notes, "summary": self.summary,
                "effective": self.spec.effective(), "next": [i.to_json() for i in self.next],
                "warnings": [w.to_json() for w in self.warnings]}

    def confirm_at(self) -> dict[str, Any] | None:
        """Where the owner confirms this revision, for a door to show: the HTTP API's
        route (``method``, ``path``, ``body`` with the ``spec_hash``) and the CLI
        command (``cli``, with a placeholder for the owner's token); ``None`` when the
        revision needs no confirmation (a descriptive edit, effective at once)."""
        p = self.proposal
        if not p.needs_confirmation:
            return None
        return {"method": "POST",
                "path": f"/v1/definitions/{p.definition_id}/revisions/{p.revision}/confirm",
                "body": {"spec_hash": p.spec_hash},
                "cli": f"watchkeeper confirm {p.definition_id} --revision {p.revision} "
                       f"--spec-hash {p.spec_hash} --token <owner's token>"}


def _seconds(value: timedelta) -> str:
    seconds = value.total_seconds()
    for unit, size in (("day", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size and seconds % size == 0:
            count = int(seconds // size)
            return f"{count} {unit}{'s' if unit == 'day' and count > 1 else ''}"
    return f"{seconds:g} s"


def _predicate(predicate: Predicate) -> str:
    if isinstance(predicate, Comparison):
        fresh = f" (read within {_seconds(predicate.freshness)})" if predicate.freshness else ""
        return f"{predicate.subject} {predicate.op} {predicate.threshold}{fresh}"
    if isinstance(predicate, AllOf | AnyOf):
        parts = predicate.all if isinstance(predicate, AllOf) else predicate.any
        joiner = " and " if isinstance(predicate, AllOf) else " or "
        return "(" + joiner.join(_predicate(p) for p in parts) + ")"
    assert isinstance(predicate, NotOf)
    return f"not {_predicate(predicate.not_)}"


def _when(spec: Spec) -> str:
    trigger = spec.trigger
    if isinstance(trigger, CronTrigger):
        options = Options()
        options.use_24hour_time_format = True
        words = get_description(trigger.expr, options)
        return f"{words[:1].lower()}{words[1:]}, {trigger.zone} time (cron '{trigger.expr}')"
    if isinstance(trigger, IntervalTrigger):
        return f"every {_seconds(trigger.every)} from {format_utc(trigger.anchor)}"
    if isinstance(trigger, AtTrigger):
        return f"once, at {trigger.at.isoformat()} ({trigger.zone})"
    assert isinstance(trigger, ConditionTrigger)
    how = ("the first time" if trigger.mode.value == "first_match" else "every time")
    cooldown = (f", at most once per {_seconds(trigger.cooldown)}"
                if trigger.cooldown > timedelta(0) else "")
    return (f"{how} {_predicate(trigger.predicate)}{cooldown}, read from "
            f"{trigger.source.name} version {trigger.source.version} every "
            f"{_seconds(trigger.poll_every)} (unknown readings never fire)")


def describe(spec: Spec) -> str:
    """The spec in plain words: when it runs, what runs, how lateness, overrun and
    limits are handled, where the notice goes, and its warnings (a zone stored under
    another name, a fixed offset). For people; the hash covers the spec."""
    parts = [f"Runs {_when(spec)}: agent '{spec.agent.name}'"
             + (f" with the instructions \"{spec.instructions}\"" if spec.instructions else "")
             + "."]
    late = spec.lateness
    parts.append(f"Late by more than {_seconds(late.late_grace)}: "
                 f"{late.policy.value.replace('_', ' ')}; if the previous run is still going: "
                 f"{spec.overrun.value.replace('_', ' ')}.")
    limits = spec.limits
    caps = [f"deadline {_seconds(limits.deadline)}", f"at most {limits.max_attempts} attempts"]
    if limits.max_tasks_per_period is not None:
        caps.append(f"at most {limits.max_tasks_per_period} runs a {limits.period.value}")
    for name, label in (("max_model_requests", "model requests"),
                        ("max_tool_attempts", "tool attempts"), ("max_cost_usd", "USD")):
        value = getattr(limits, name)
        if value is not None:
            caps.append(f"at most {value} {label} a run")
    parts.append("Limits: " + ", ".join(caps) + ".")
    where = ", ".join(f"{d.channel}{':' + d.destination if d.destination else ''}"
                      for d in spec.delivery)
    parts.append(f"Notices: {where}.")
    if spec.ends.until is not None or spec.ends.after is not None:
        ends = []
        if spec.ends.until is not None:
            ends.append(f"until {format_utc(spec.ends.until)}")
        if spec.ends.after is not None:
            ends.append(f"after {spec.ends.after} occurrence(s)")
        parts.append("Ends " + " or ".join(ends) + ".")
    parts.extend(w.to_json()["message"] for w in spec.warnings)
    return " ".join(parts)


def preview_spec(spec: Spec, after: datetime, count: int = PREVIEW_COUNT) -> list[PreviewItem]:
    """The next ``count`` occurrences (polls, for a condition) strictly after the aware
    instant ``after``; empty when the schedule has none left.

    Raises:
        SpecError: field ``after``: naive, or outside :data:`~._input.INSTANT_RANGE`.
    """
    check_instants({"after": after})
    try:
        return preview(spec.bounded_calendar(), after, count)
    except NoOccurrenceError:
        return []


async def propose_spec(db: Database, clock: Clock, principal: Principal, *, definition_id: str,
                       spec: Spec | Mapping[str, Any], owner_user_id: str | None = None,
                       based_on: int | None = None,
                       min_interval: timedelta = timedelta(seconds=60)) -> ProposalView:
    """Record a proposed revision for ``principal`` and return what to show about it.

    A user proposes for themselves (``owner_user_id`` defaults to them and may not name
    another); an agent or the operator of a tenant names the owner user.

    Raises:
        SpecError: every problem at once (:func:`checked_proposal`: the id, the owner,
            the spec, its webhook destinations), or a missing ``owner_user_id``.
        Forbidden: the tick secret.
        NotFound, Conflict: as :func:`propose`.
    """
    authorize(principal, Capability.PROPOSE)
    if isinstance(principal, UserPrincipal):
        owner = owner_user_id or principal.user_id
        authorize(principal, Capability.PROPOSE, tenant_id=principal.tenant_id,
                  owner_user_id=owner)
        existing = await db.fetchrow("definition_get", principal.tenant_id, definition_id)
        if existing is not None:  # another user's definition does not exist for this one
            authorize(principal, Capability.PROPOSE, tenant_id=existing["tenant_id"],
                      owner_user_id=existing["owner_user_id"])
    elif owner_user_id is None:
        raise SpecError("owner", "is missing.", "name the user who will own and confirm it.")
    else:
        owner = owner_user_id
    parsed = await checked_proposal(db, principal.tenant_id, definition_id,  # type: ignore[union-attr]
                                    owner, spec, min_interval)
    proposal = await propose(db, clock, tenant_id=principal.tenant_id,  # type: ignore[union-attr]
                             definition_id=definition_id, owner_user_id=owner, spec=parsed,
                             proposed_by=principal.label, based_on=based_on)
    return await proposal_view(db, proposal, parsed, clock.now())


async def proposal_view(db: Database, proposal: Proposal, spec: Spec,
                        now: datetime) -> ProposalView:
    """What to show about the recorded ``proposal`` of ``spec``: its summary in plain
    words, the next occurrences strictly after the aware instant ``now``, and the
    warnings (the spec's, then an agent no supervisor has offered). Every door answers
    a proposal with this (the API, the MCP tools, ``propose --json``).

    Raises:
        SpecError: field ``after``: ``now`` naive or outside
            :data:`~._input.INSTANT_RANGE`.
    """
    return ProposalView(proposal, spec, describe(spec), preview_spec(spec, now),
                        await agent_warnings(db, spec))


async def checked_proposal(db: Database, tenant_id: str, definition_id: str, owner: str,
                           spec: Spec | Mapping[str, Any], min_interval: timedelta) -> Spec:
    """``spec`` parsed, once every check of a proposal passed; else one refusal listing
    every problem: ``definition_id``, ``owner`` (its form, then whether the tenant has
    that user), the spec's own, and each webhook destination the tenant has no endpoint
    for (read from the entries that are valid when the spec as a whole is not).

    Raises:
        SpecError: every problem at once, ``definition_id`` and ``owner`` first, then
            the spec's in the order of its fields.
    """
    found = SpecProblems()
    with found.check():
        check_identifier(definition_id, "definition_id")
    with found.check():
        check_identifier(owner, "owner")
        if await db.fetchrow("user_get", tenant_id, owner) is None:
            found.add("owner", f"tenant {tenant_id} has no user {owner!r}.",
                      f"name a user of tenant {tenant_id} (the person who will confirm), "
                      f"or create it first: watchkeeper users add {tenant_id} {owner}")
    parsed: Spec | None = None
    with found.check():
        parsed = spec if isinstance(spec, Spec) else parse_spec(spec, min_interval=min_interval)
    async with db.connection() as conn:
        with found.check():
            await check_destinations(conn, tenant_id, parsed.delivery if parsed is not None
                                     else _valid_deliveries(spec))
    if found:
        raise SpecError.of(sorted(found.problems, key=_spec_order))
    assert parsed is not None
    return parsed


_AHEAD = ("definition_id", "owner")


def _spec_order(problem: SpecProblem) -> tuple[int, int]:
    """``definition_id``, ``owner``, then the spec's fields in its model's order, a
    list's items by index."""
    head, _, rest = problem.field.partition(".")
    index = rest.split(".")[0]
    item = int(index) if index.isdigit() else -1
    if head in _AHEAD:
        return _AHEAD.index(head), item
    fields = list(SpecV1.model_fields)
    return len(_AHEAD) + (fields.index(head) if head in fields else len(fields)), item


def _valid_deliveries(spec: Spec | Mapping[str, Any]) -> list[Delivery]:
    """The delivery entries of a spec that did not parse, each at its index (an entry
    that is not valid on its own stands as a log entry, which names no endpoint)."""
    entries = spec.get("delivery") if isinstance(spec, Mapping) else None
    if not isinstance(entries, list):
        return []
    out = []
    for entry in entries:
        try:
            out.append(Delivery.model_validate(entry))
        except (ValueError, TypeError):
            out.append(Delivery())
    return out


BUILT_IN_AGENTS = frozenset({"digest", "model"})
"""Agents every watchkeeper has (``model`` once its endpoint is configured)."""


async def agent_warnings(db: Database, spec: Spec) -> tuple[SpecWarning, ...]:
    """A warning when ``spec``'s agent is neither built in nor one any supervisor has
    ever offered (its heartbeat's ``agents``): accepted, since a supervisor offering it
    may come later, but its tasks wait until one does — often a misspelt name."""
    name = spec.agent.name
    if name in BUILT_IN_AGENTS:
        return ()
    offered = {row["agent"] for row in await db.fetch("supervisors_agents_ever")}
    if name in offered:
        return ()
    known = ", ".join(repr(n) for n in sorted(BUILT_IN_AGENTS | offered))
    return (SpecWarning("agent.name", f"no supervisor has ever offered an agent named "
                        f"{name!r}, so its tasks wait until one does (known agents: "
                        f"{known}); check the name, or start a supervisor that offers it"),)
