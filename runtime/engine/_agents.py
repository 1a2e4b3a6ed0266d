"""The agent seam: :class:`AgentRunner`, its trusted context, and the built-ins.

The context is built server-side from the task row (DESIGN "Agents"): tenant, real
owner user, definition and revision, the occurrence, instructions, audiences and a
budget guard. The schedule fields (``ctx.occurrence`` and ``params["schedule"]``)
come from the admission transaction; neither a binding nor the agent can forge them.
An agent reaches the outside world only through ``ctx.effects`` (see
:mod:`watchkeeper.runtime.engine._effects`), which checks the lease token first.

Built-ins: ``digest`` (deterministic, no model; the default) and ``command`` (a
subprocess that reads the context as JSON on stdin and prints its answer: see
:mod:`watchkeeper.runtime.engine._command` and :mod:`watchkeeper.runtime.engine._answer`).

What a run returns must be storable (:func:`result_problems`, :func:`usage_problems`):
the worker refuses, without another attempt, a result PostgreSQL cannot hold.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from decimal import ROUND_CEILING, Decimal
from pathlib import Path
from typing import Any, Protocol

import anyio

from watchkeeper.triggers import Importance, format_utc, plain_decimal

from .._errors import BudgetExceeded
from ._answer import COST_DECIMAL_PLACES, COST_STEP, storable_problem

__all__ = [
    "AgentCatalog",
    "AgentContext",
    "AgentResult",
    "AgentRunner",
    "BudgetGuard",
    "Continuation",
    "ContinuedFrom",
    "RunJournal",
    "DigestAgent",
    "Importance",
    "OccurrenceInfo",
    "Usage",
    "recordable_usage",
    "result_problems",
    "usage_problems",
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
        """JSON form, cost as a plain decimal string without trailing zeros
        (``"0.00144"``, ``"10"``)."""
        return {"model_requests": self.model_requests, "tool_attempts": self.tool_attempts,
                "input_tokens": self.input_tokens, "output_tokens": self.output_tokens,
                "cost_usd": plain_decimal(self.cost_usd)}


class BudgetGuard:
    """A task's run budget (``limits.max_model_requests``, ``max_tool_attempts``,
    ``max_cost_usd``); ``None`` limits are unlimited. The budget is the task's, not one
    attempt's: ``spent_before`` carries what its earlier attempts and roots used (DESIGN:
    a retry or a continuation stays within the task's budget); ``used`` is this run's
    spending.

    Ways to spend: :meth:`charge` before spending (refused, and nothing recorded, if it
    would pass a limit: the spending must then not happen); :meth:`reserve`, the same
    and then written to the run's row through ``persist`` (fenced by the lease token: a
    stale run's charge raises :class:`~watchkeeper.runtime.StaleLease` and it must not
    spend); :meth:`true_up` once a reserved cost is known (written unfenced: it was
    spent); and :meth:`settle` after the
    fact, for usage an agent could only report once it had spent it (a command agent
    cannot be stopped before it reports): recorded in full, then checked.
    """

    def __init__(self, *, model_requests: int | None = None, tool_attempts: int | None = None,
                 cost_usd: Decimal | None = None, spent_before: Usage | None = None,
                 persist: Callable[[Usage, bool], Awaitable[None]] | None = None) -> None:
        self.limits = (model_requests, tool_attempts, cost_usd)
        self.spent_before = spent_before or Usage()
        self.used = Usage()
        self._persist = persist
        self._saving = anyio.Lock()

    def would_fit(self, *, model_requests: int = 0, tool_attempts: int = 0,
                  cost_usd: Decimal = Decimal(0)) -> bool:
        """Whether a charge of these amounts would stay within every limit."""
        try:
            self._check(self.used + Usage(model_requests, tool_attempts, cost_usd))
        except BudgetExceeded:
            return False
        return True

    async def reserve(self, *, model_requests: int = 0, tool_attempts: int = 0,
                      cost_usd: Decimal = Decimal(0)) -> None:
        """:meth:`charge`, then write the run's usage so far before the spending happens.

        Raises:
            BudgetExceeded: the charge would pass a limit (nothing is recorded).
            StaleLease: the run's token is no longer current (the charge stays recorded
                in memory; the spending must not happen).
        """
        self.charge(model_requests=model_requests, tool_attempts=tool_attempts,
                    cost_usd=cost_usd)
        await self.save()

    async def true_up(self, *, reserved_usd: Decimal, cost_usd: Decimal, input_tokens: int = 0,
                      output_tokens: int = 0) -> None:
        """Replace a reserved cost by the known one and add the tokens it reported, then
        write the usage. A known cost above the reservation is recorded in full (it was
        spent) and then checked.

        Raises:
            BudgetExceeded: the totals now pass a limit (the usage stays recorded).
            StaleLease: as for :meth:`reserve`.
        """
        used = self.used
        cost = max(used.cost_usd - reserved_usd, Decimal(0)) + cost_usd
        self.used = Usage(used.model_requests, used.tool_attempts,
                          cost if cost else Decimal(0),
                          used.input_tokens + input_tokens, used.output_tokens + output_tokens)
        await self.save(before=False)
        self._check(self.used, after=True)

    async def save(self, *, before: bool = True) -> None:
        """Write the usage so far through ``persist`` (nothing without one): ``before``
        a spending, fenced by the lease token (a stale run raises
        :class:`~watchkeeper.runtime.StaleLease` and must not spend); after one, to the
        run's own row whatever became of its lease (what was spent is recorded)."""
        if self._persist is not None:
            async with self._saving:  # one write at a time, each of the latest figures, so
                # the row's usage never goes back (concurrent tool calls charge in turn)
                await self._persist(recordable_usage(self.used), before)

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
                shown, most = _shown(value), _shown(limit)
                if after:
                    raise BudgetExceeded(
                        f"{name}: the run reported usage that brings the task to {shown}, past "
                        f"its limit of {most} (charged after the run: it could not be stopped "
                        "before it reported)")
                raise BudgetExceeded(f"{name}: {shown} would exceed the task's limit of {most}")


def _shown(amount: int | Decimal) -> str:
    """A count as it is; a cost as a plain decimal (``0.0038816``, not
    ``0.003881600000000000``: a request's cost carries 18 places)."""
    return plain_decimal(amount) if isinstance(amount, Decimal) else str(amount)


@dataclass
class RunJournal:
    """What one run did besides spending, recorded on its row: the model that answered
    (``None``: no model) and each tool call, in order (``{"tool", "source", "subject",
    "status", ...}``; a refused call has ``status = "refused"`` and a ``reason``)."""

    model: str | None = None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)


CONTINUATION_TEXT_LIMIT = 20_000
"""Characters of a continuation's reason or instructions an agent may give."""


@dataclass(frozen=True, slots=True)
class Continuation:
    """An agent's explicit request to go on in a further root run of the same task
    (seed 004: only such a durably recorded intent authorizes another root).

    Attributes:
        reason: why the work is not finished, for the history (1-20,000 characters).
        instructions: what the next root should do (1-20,000 characters).

    Raises:
        ValueError: an empty or overlong ``reason`` or ``instructions``, or text
            PostgreSQL cannot store.
    """

    reason: str
    instructions: str

    def __post_init__(self) -> None:
        for name in ("reason", "instructions"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f"continuation.{name} is empty. Fix: say in words why the "
                                 "run goes on and what the next root should do.")
            if len(value) > CONTINUATION_TEXT_LIMIT:
                raise ValueError(f"continuation.{name} has {len(value)} characters, over "
                                 f"{CONTINUATION_TEXT_LIMIT}. Fix: shorten it.")
            if (problem := storable_problem(f"continuation.{name}", value)) is not None:
                raise ValueError(problem)

    def to_json(self) -> dict[str, str]:
        """JSON form."""
        return {"reason": self.reason, "instructions": self.instructions}


@dataclass(frozen=True, slots=True)
class ContinuedFrom:
    """For a run of root 2 or later: the accepted intent that started its root and the
    report the previous root wrote (``run_id`` of that run)."""

    root: int
    run_id: int
    reason: str
    instructions: str
    previous_report: str


@dataclass(frozen=True, slots=True)
class OccurrenceInfo:
    """The occurrence a task was admitted for (UTC instants).

    Attributes:
        late: admitted past its ``expires_at``.
        start_lateness_seconds: seconds from the task's ``not_before`` to its first start
            (0 or more): when the run began, not when it was admitted (the history's
            ``admission_lateness_seconds``).
    """

    slot: str
    kind: str
    scheduled_for: datetime
    not_before: datetime
    expires_at: datetime
    late: bool
    start_lateness_seconds: float


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
    root: int = 1
    max_roots: int = 1
    continued_from: ContinuedFrom | None = None
    sources: Any = None  # engine._tools.ScopedSources: reads within the definition's scope
    journal: RunJournal = field(default_factory=RunJournal)
    clock: Any = None  # engine._clock.Clock: the worker's (anchored) clock; read time here

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
            "root": self.root, "max_roots": self.max_roots,
            "continued_from": None if self.continued_from is None else {
                "root": self.continued_from.root, "reason": self.continued_from.reason,
                "instructions": self.continued_from.instructions,
                "previous_report": self.continued_from.previous_report},
        }


@dataclass(frozen=True, slots=True)
class AgentResult:
    """What a run returns: a markdown report, its importance, usage, optionally the
    path of an artifact it wrote (checked against the output promise), a one-line
    ``headline``, and a :class:`Continuation` when the agent asks for a further root
    run (granted within ``limits.max_roots``, the deadline and the budget; otherwise
    this report is the task's, with the refusal recorded)."""

    report: str
    importance: Importance = Importance.NORMAL
    usage: Usage = Usage()
    artifact: Path | None = None
    headline: str = ""
    continuation: Continuation | None = None


BIGINT_MAX = 2**63 - 1
"""The largest count a run may record: the run budget's sums cast each recorded count to
PostgreSQL's ``bigint``."""

MAX_COST_USD = Decimal(10) ** 15
"""The largest cost (USD) a run may record; far above any run, far within ``numeric``."""



def result_problems(result: Any) -> list[str]:
    """What in an agent's result cannot be committed, one ``"<field>: <problem>"`` line
    each (empty when it can): the report and the artifact path must be text PostgreSQL
    can store (:func:`~._answer.storable_problem`), importance an :class:`Importance`,
    usage a :class:`Usage` (its figures are checked by :func:`usage_problems` once
    settled). A command agent's answer has passed the same checks already."""
    if not isinstance(result, AgentResult):
        return [f"result: the agent returned {type(result).__name__}, not an AgentResult"]
    problems = []
    if not isinstance(result.report, str):
        problems.append(f"report: {type(result.report).__name__} is not a str")
    elif (problem := storable_problem("the report", result.report)) is not None:
        problems.append(f"report: {problem}")
    if not isinstance(result.importance, Importance):
        problems.append(f"importance: {result.importance!r} is not an Importance (low, "
                        "normal or high)")
    if not isinstance(result.usage, Usage):
        problems.append(f"usage: {type(result.usage).__name__} is not a Usage")
    if not isinstance(result.headline, str):
        problems.append(f"headline: {type(result.headline).__name__} is not a str")
    elif (problem := storable_problem("the headline", result.headline)) is not None:
        problems.append(f"headline: {problem}")
    if result.continuation is not None and not isinstance(result.continuation, Continuation):
        problems.append(f"continuation: {type(result.continuation).__name__} is not a "
                        "Continuation")
    if result.artifact is not None:
        if not isinstance(result.artifact, str | Path):
            problems.append(f"artifact: {type(result.artifact).__name__} is not a path")
        elif (problem := storable_problem("the artifact path", str(result.artifact))) is not None:
            problems.append(f"artifact: {problem}")
    return problems


def usage_problems(usage: Usage) -> list[str]:
    """What in one run's usage cannot be recorded exactly, one line per measure: a
    count past :data:`BIGINT_MAX`, a cost past :data:`MAX_COST_USD` or with more than
    :data:`~._answer.COST_DECIMAL_PLACES` digits after the point."""
    problems = [f"usage.{name}: {value} is past the largest recordable count ({BIGINT_MAX})"
                for name, value in _counts(usage) if value > BIGINT_MAX]
    cost = usage.cost_usd
    if cost > MAX_COST_USD:
        problems.append(f"usage.cost_usd: {cost} is past the largest recordable cost "
                        f"({MAX_COST_USD} USD)")
    if _places(cost) > COST_DECIMAL_PLACES:
        problems.append(f"usage.cost_usd: {cost} has more than {COST_DECIMAL_PLACES} digits "
                        "after the decimal point")
    return problems


def recordable_usage(usage: Usage) -> Usage:
    """``usage`` as the worker records it: each figure that :func:`usage_problems` refuses
    brought to the nearest recordable value at or above it (counts to
    :data:`BIGINT_MAX`, the cost rounded up to its last decimal place, at most
    :data:`MAX_COST_USD`), so a run never records less than it used while the budget's
    sums stay computable."""
    counts = {name: min(value, BIGINT_MAX) for name, value in _counts(usage)}
    cost = usage.cost_usd
    if _places(cost) > COST_DECIMAL_PLACES:
        cost = cost.quantize(COST_STEP, rounding=ROUND_CEILING)
    return replace(usage, cost_usd=min(cost, MAX_COST_USD), **counts)


def _counts(usage: Usage) -> list[tuple[str, int]]:
    names = ("model_requests", "tool_attempts", "input_tokens", "output_tokens")
    return [(name, getattr(usage, name)) for name in names]


def _places(value: Decimal) -> int:
    """Digits after the decimal point of a finite Decimal (0 for an integer)."""
    exponent = value.as_tuple().exponent
    return -exponent if isinstance(exponent, int) and exponent < 0 else 0


class AgentRunner(Protocol):
    """Runs one attempt of a task. May raise; the worker records the failure."""

    async def run(self, ctx: AgentContext) -> AgentResult:
        """Produce the report for ``ctx``."""
        ...


class DigestAgent:
    """The default agent: no model; a deterministic digest of the schedule facts.

    The report names the definition, the occurrence (slot, scheduled time, start
    lateness: how long after ``not_before`` the run started),
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
            f"- start lateness: {occ.start_lateness_seconds:.1f} s"
            + (" (admitted late)" if occ.late else ""),
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

    def merge(self, other: AgentCatalog) -> None:
        """Add (or replace) every agent of ``other``, with its audiences."""
        for name, entry in other._agents.items():
            self._agents[name] = entry


def parse_json_object(value: Any) -> Mapping[str, Any]:
    """A JSON column that may arrive as text or as a decoded object."""
    if isinstance(value, str):
        loaded = json.loads(value)
        return loaded if isinstance(loaded, dict) else {}
    return value or {}
