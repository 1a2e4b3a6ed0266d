"""The agent seam: :class:`AgentRunner`, its trusted context, and the built-ins.

The context is built server-side from the task row (DESIGN "Agents"): tenant, real
owner user, definition and revision, the occurrence, instructions, audiences and a
budget guard. The schedule fields (``ctx.occurrence`` and ``params["schedule"]``)
come from the admission transaction; neither a binding nor the agent can forge them.
An agent reaches the outside world only through ``ctx.effects`` (see
:mod:`watchkeeper.runtime.engine._effects`), which checks the lease token first.

Built-ins: ``digest`` (deterministic, no model; the default) and ``command`` (a
subprocess that reads the context as JSON on stdin and prints its answer: see
:mod:`watchkeeper.runtime.engine._answer`).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any, Protocol

import anyio

from watchkeeper.triggers import Importance, format_utc

from .._errors import AgentError, BudgetExceeded
from ._answer import AnswerInvalid, parse_answer

__all__ = [
    "AgentCatalog",
    "AgentContext",
    "AgentResult",
    "AgentRunner",
    "BudgetGuard",
    "CommandAgent",
    "DigestAgent",
    "Importance",
    "OccurrenceInfo",
    "Usage",
]


_MEASURES = ("model_requests", "tool_attempts", "cost_usd")
"""The measures a run budget limits (``limits.max_<measure>``); tokens are recorded only."""


@dataclass(frozen=True, slots=True)
class Usage:
    """What a run consumed: model requests, tool attempts, input and output tokens
    (dimensionless counts) and cost in USD (a :class:`~decimal.Decimal`).

    Raises:
        ValueError: a count that is negative or not an ``int``, or a cost that is not a
            ``Decimal`` (an ``int`` is converted) or is negative, NaN or infinite.
    """

    model_requests: int = 0
    tool_attempts: int = 0
    cost_usd: Decimal = Decimal(0)
    input_tokens: int = 0
    output_tokens: int = 0

    def __post_init__(self) -> None:
        for name in ("model_requests", "tool_attempts", "input_tokens", "output_tokens"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"usage.{name} is {value!r}, not a count. Fix: report a "
                                 "non-negative integer.")
        cost = self.cost_usd
        if isinstance(cost, int) and not isinstance(cost, bool):
            cost = Decimal(cost)
            object.__setattr__(self, "cost_usd", cost)
        if not isinstance(cost, Decimal) or not cost.is_finite() or cost < 0:
            raise ValueError(f"usage.cost_usd is {cost!r}, not a cost. Fix: report a finite, "
                             "non-negative Decimal amount of USD.")

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.model_requests + other.model_requests,
                     self.tool_attempts + other.tool_attempts, self.cost_usd + other.cost_usd,
                     self.input_tokens + other.input_tokens,
                     self.output_tokens + other.output_tokens)

    def at_least(self, other: Usage) -> Usage:
        """Each measure the larger of ``self``'s and ``other``'s."""
        return Usage(max(self.model_requests, other.model_requests),
                     max(self.tool_attempts, other.tool_attempts),
                     max(self.cost_usd, other.cost_usd),
                     max(self.input_tokens, other.input_tokens),
                     max(self.output_tokens, other.output_tokens))

    def to_json(self) -> dict[str, Any]:
        """JSON form, cost as a decimal string."""
        return {"model_requests": self.model_requests, "tool_attempts": self.tool_attempts,
                "input_tokens": self.input_tokens, "output_tokens": self.output_tokens,
                "cost_usd": str(self.cost_usd)}


class BudgetGuard:
    """A task's run budget (``limits.max_model_requests``, ``max_tool_attempts``,
    ``max_cost_usd``); ``None`` limits are unlimited. The budget is the task's, not one
    attempt's: ``spent_before`` carries what earlier attempts used (DESIGN: a retry stays
    within the task's budget); ``used`` is this attempt's spending.

    Two ways to spend: :meth:`charge` before spending (refused, and nothing recorded,
    if it would pass a limit: the spending must then not happen), and :meth:`settle`
    after the fact, for usage an agent could only report once it had spent it (a
    command agent cannot be stopped before it reports): recorded in full, then checked.
    """

    def __init__(self, *, model_requests: int | None = None, tool_attempts: int | None = None,
                 cost_usd: Decimal | None = None, spent_before: Usage | None = None) -> None:
        self.limits = (model_requests, tool_attempts, cost_usd)
        self.spent_before = spent_before or Usage()
        self.used = Usage()

    def charge(self, *, model_requests: int = 0, tool_attempts: int = 0,
               cost_usd: Decimal = Decimal(0), input_tokens: int = 0,
               output_tokens: int = 0) -> None:
        """Record spending before it happens.

        Raises:
            BudgetExceeded: the charge would pass a limit (nothing is recorded then).
            ValueError: a negative, NaN or non-integer amount.
        """
        new = self.used + Usage(model_requests, tool_attempts, cost_usd, input_tokens,
                                output_tokens)
        self._check(new)
        self.used = new

    def settle(self, reported: Usage) -> None:
        """Record what this attempt reports it used in all (after the fact): each measure
        of :attr:`used` becomes at least the reported one (charges already made count
        toward it), then the task's totals are checked.

        Raises:
            BudgetExceeded: the totals now pass a limit; the usage stays recorded (it was
                spent), and the task is not retried.
        """
        self.used = self.used.at_least(reported)
        self._check(self.used, after=True)

    def _check(self, used: Usage, *, after: bool = False) -> None:
        totals = self.spent_before + used
        for name, limit in zip(_MEASURES, self.limits, strict=True):
            value = getattr(totals, name)
            if limit is not None and value > limit:
                if after:
                    raise BudgetExceeded(
                        f"{name}: the run reported usage that brings the task to {value}, past "
                        f"its limit of {limit} (charged after the run: it could not be stopped "
                        "before it reported)")
                raise BudgetExceeded(f"{name}: {value} would exceed the task's limit of {limit}")


@dataclass(frozen=True, slots=True)
class OccurrenceInfo:
    """The occurrence a task was admitted for (UTC instants; lateness in seconds)."""

    slot: str
    kind: str
    scheduled_for: datetime
    not_before: datetime
    expires_at: datetime
    late: bool
    lateness_seconds: float


@dataclass(frozen=True)
class AgentContext:
    """Everything an agent may know, built server-side from the task row."""

    tenant_id: str
    owner_user_id: str
    definition_id: str
    revision: int
    binding_id: str
    task_id: int
    attempt: int
    title: str
    instructions: str
    params: Mapping[str, Any]
    audiences: tuple[str, ...] | None
    occurrence: OccurrenceInfo
    budget: BudgetGuard
    effects: Any = None  # engine._effects.EffectGate; typed loosely to keep this module light
    previous_reports: Sequence[Mapping[str, Any]] = field(default_factory=tuple)
    artifact_dir: Path | None = None

    def to_json(self) -> dict[str, Any]:
        """The context as JSON (what a command agent reads on stdin)."""
        occurrence = asdict(self.occurrence)
        for key in ("scheduled_for", "not_before", "expires_at"):
            occurrence[key] = format_utc(occurrence[key])
        return {
            "tenant_id": self.tenant_id, "owner_user_id": self.owner_user_id,
            "definition_id": self.definition_id, "revision": self.revision,
            "binding_id": self.binding_id, "task_id": self.task_id, "attempt": self.attempt,
            "title": self.title, "instructions": self.instructions, "params": dict(self.params),
            "audiences": list(self.audiences) if self.audiences is not None else None,
            "occurrence": occurrence,
            "artifact_dir": str(self.artifact_dir) if self.artifact_dir else None,
        }


@dataclass(frozen=True, slots=True)
class AgentResult:
    """What a run returns: a markdown report, its importance, usage, and optionally
    the path of an artifact it wrote (checked against the output promise)."""

    report: str
    importance: Importance = Importance.NORMAL
    usage: Usage = Usage()
    artifact: Path | None = None


class AgentRunner(Protocol):
    """Runs one attempt of a task. May raise; the worker records the failure."""

    async def run(self, ctx: AgentContext) -> AgentResult:
        """Produce the report for ``ctx``."""
        ...


class DigestAgent:
    """The default agent: no model; a deterministic digest of the schedule facts.

    The report names the definition, the occurrence (slot, scheduled time, lateness),
    for a condition's task the observations that made it fire (``params["trigger"]``:
    value, unit, as_of, source version), and the previous reports, so every
    occurrence's report is distinct.
    """

    async def run(self, ctx: AgentContext) -> AgentResult:
        """Write the digest."""
        occ = ctx.occurrence
        lines = [
            f"# {ctx.title or ctx.definition_id}",
            "",
            f"- occurrence: `{occ.slot}` ({occ.kind})",
            f"- scheduled for: {format_utc(occ.scheduled_for)}",
            f"- lateness: {occ.lateness_seconds:.1f} s" + (" (admitted late)" if occ.late else ""),
            f"- definition: {ctx.tenant_id}/{ctx.definition_id} revision {ctx.revision}, "
            f"binding {ctx.binding_id}, owner {ctx.owner_user_id}",
            f"- attempt: {ctx.attempt}",
        ]
        trigger = ctx.params.get("trigger")
        if isinstance(trigger, Mapping):
            lines += ["", "## Why it ran", "", f"- {trigger.get('reason', '')}"]
            lines += [_observation_line(o) for o in trigger.get("observations", ())
                      if isinstance(o, Mapping)]
        if ctx.instructions:
            lines += ["", "## Instructions", "", ctx.instructions]
        lines += ["", "## Previous reports", ""]
        lines += [f"- `{r['slot']}`: sha256 {str(r['content_sha256'])[:12]}"
                  for r in ctx.previous_reports] or ["- none: this is the first report"]
        return AgentResult("\n".join(lines) + "\n", Importance.NORMAL, Usage())


def _observation_line(o: Mapping[str, Any]) -> str:
    """One observation that fired a condition, as the digest shows it."""
    value = f"{o.get('value')} {o.get('unit') or ''}".strip()
    if o.get("currency") and str(o.get("currency")) not in value:
        value += f" {o.get('currency')}"
    return (f"- {o.get('subject')} = {value} as of {o.get('as_of')} ({o.get('op')} "
            f"{o.get('threshold')}: {o.get('verdict')}; source {o.get('source')} "
            f"version {o.get('source_version')}, observation {o.get('observation_id')})")


class CommandAgent:
    """Runs ``argv`` with the context JSON on stdin; stdout is the answer: plain
    markdown (the report), or a JSON object ``{"report", "importance", "artifact",
    "usage"}`` (the contract: :mod:`watchkeeper.runtime.engine._answer`).

    Budget: starting the command is one tool attempt, charged before it starts (a task
    whose tool budget is spent starts no command). The usage it reports is added to that
    and settled after it exits: a command cannot be stopped before it reports, so the run
    that crosses a limit is recorded in full and is the task's last.

    Raises (from :meth:`run`):
        AgentError: ``retryable=True`` for a non-zero exit status (with the tail of
            stderr); ``retryable=False`` for an answer that breaks the contract (every
            problem named).
        BudgetExceeded: the tool budget is spent before the start, or the reported usage
            passes a limit.
    """

    def __init__(self, argv: Sequence[str]) -> None:
        self.argv = list(argv)

    async def run(self, ctx: AgentContext) -> AgentResult:
        """Run the command once."""
        ctx.budget.charge(tool_attempts=1)
        result = await anyio.run_process(self.argv, input=json.dumps(ctx.to_json()).encode(),
                                         check=False, stderr=subprocess.PIPE)
        if result.returncode != 0:
            tail = result.stderr.decode(errors="replace")[-500:]
            raise AgentError(f"{self.argv[0]} exited {result.returncode}: {tail}", retryable=True)
        try:
            answer = parse_answer(result.stdout.decode(errors="replace"))
        except AnswerInvalid as exc:
            raise AgentError(
                f"{self.argv[0]} printed an answer that breaks the contract: {exc}. Fix: print "
                "plain markdown, or one JSON object with report, importance (low, normal or "
                "high), artifact and usage (non-negative integer counts, cost_usd a decimal); "
                "see the README's command agents section", retryable=False) from exc
        reported = answer.usage
        ctx.budget.settle(Usage(tool_attempts=1) + Usage(
            reported.model_requests, reported.tool_attempts, reported.cost_usd,
            reported.input_tokens, reported.output_tokens))
        return AgentResult(answer.report, answer.importance, ctx.budget.used,
                           Path(answer.artifact) if answer.artifact else None)


@dataclass(frozen=True, slots=True)
class _Entry:
    runner: AgentRunner
    audiences: frozenset[str] | None


class AgentCatalog:
    """Agents by name, each with the audiences it belongs to (``None``: everyone's)."""

    def __init__(self) -> None:
        self._agents: dict[str, _Entry] = {}
        self.add("digest", DigestAgent())

    def add(self, name: str, runner: AgentRunner, audiences: Sequence[str] | None = None) -> None:
        """Register or replace an agent."""
        self._agents[name] = _Entry(runner, frozenset(audiences) if audiences is not None else None)

    def reachable(self, name: str, audiences: Sequence[str] | None) -> AgentRunner:
        """The agent ``name`` if a binding restricted to ``audiences`` may reach it.

        Omitted audiences mean unrestricted; set ones must share an audience with the
        agent (seed 001: enforced, not advisory). An agent registered without
        audiences is universal and reachable from every binding.

        Raises:
            LookupError: unknown agent, or not within the binding's audiences.
        """
        entry = self._agents.get(name)
        if entry is None:
            raise LookupError(f"no agent named {name!r} in this supervisor")
        if audiences is not None and entry.audiences is not None and not (
            entry.audiences & set(audiences)
        ):
            raise LookupError(f"agent {name!r} is outside the binding's audiences {sorted(audiences)}")
        return entry.runner

    def names(self) -> list[str]:
        """Registered agent names."""
        return sorted(self._agents)


def parse_json_object(value: Any) -> Mapping[str, Any]:
    """A JSON column that may arrive as text or as a decoded object."""
    if isinstance(value, str):
        loaded = json.loads(value)
        return loaded if isinstance(loaded, dict) else {}
    return value or {}
