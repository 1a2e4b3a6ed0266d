"""The model-backed agent: one bounded research run against an OpenAI-compatible
chat-completions endpoint (seed 004: "bounded model requests, tool attempts, deadline
and shared capacity per run").

The model loop is pydantic-ai's (``pydantic-ai-slim[openai]``: tool calling,
structured output with validation retries, the OpenAI chat-completions client); this
module only puts the run's rules around it:

* **Prompt.** The definition's instructions, the trusted occurrence facts (from the
  admission transaction, never the model), and for a condition's task the observations
  that fired it ("Why it ran"); for root 2 and later, the previous root's report and
  the intent that started this root.
* **Tools.** One: ``read_observation(source, subject)``, a read-only read through
  ``ctx.sources`` (:class:`~._tools.ScopedSources`): charged, checked against the
  definition's ``sources`` scope (a call outside it is refused, recorded, and the model
  told so), recorded on the run. Nothing else: an external effect only ever goes
  through ``ctx.effects``.
* **Answer.** Structured (:class:`ModelAnswer`): report (markdown), importance, a
  one-line headline, and an optional continuation intent. An answer that does not
  validate is sent back for correction ``output_retries`` times, then the run fails.
* **Budget.** Before every model request, one request and a cost reservation are
  charged to the task's :class:`~._agents.BudgetGuard` and written to the run's row
  (fenced by the lease token: a stale worker cannot make the request). The reservation
  is an upper bound: ``max_output_tokens`` at the output price plus, at the input
  price, one token per UTF-8 byte of the request's messages and tool schemas (a
  byte-level BPE token is at least one byte). Once the response's ``usage`` is known,
  the reservation is replaced by its cost. A request the budget cannot cover is not
  made: the run ends ``budget_exceeded`` with its usage recorded.
* **Failures.** A 429 or 5xx answer is retried within the attempt
  (:func:`pydantic_ai.retries.wait_retry_after`: ``Retry-After`` or
  ``retry-after-ms`` honoured, else exponential backoff with jitter), up to
  ``http_retries`` further tries, sleeping on the worker's clock; it is not charged as
  another model request (it produced nothing). One try longer than
  ``request_timeout_seconds`` fails the attempt (retried as a new attempt within
  ``limits.max_attempts``); the task deadline cancels a request in flight. Any other
  4xx is the request's fault and fails the task without another attempt.
"""

from __future__ import annotations

import json
import logging
import os
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import ROUND_CEILING, Decimal
from typing import Annotated, Any, Literal

import anyio
import httpx2
import pydantic
from openai import AsyncOpenAI
from pydantic import BaseModel, Field
from pydantic_ai import Agent
from pydantic_ai.exceptions import ModelAPIError, ModelHTTPError, UnexpectedModelBehavior
from pydantic_ai.messages import ModelMessagesTypeAdapter
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.output import ToolOutput
from pydantic_ai.providers.openai import OpenAIProvider
from pydantic_ai.retries import AsyncHTTPX2TenacityTransport, RetryConfig, wait_retry_after
from pydantic_ai.usage import UsageLimits
from tenacity import retry_if_exception, stop_after_attempt, wait_random_exponential

from watchkeeper.triggers import Importance, ModelAgentParams, format_utc, plain_decimal

from .._errors import AgentError, WatchkeeperError
from ._agents import AgentContext, AgentResult, Continuation
from ._answer import COST_STEP, AnswerContinuation, storable
from ._clock import Clock, SystemClock
from ._tools import READ_TOOL, ToolRefused

__all__ = ["ModelAgent", "ModelAnswer", "ModelEndpoint", "ModelRequestTimeout",
           "request_cost", "reservation_usd"]

log = logging.getLogger("watchkeeper.model_agent")

_THOUSAND = Decimal(1000)
_MESSAGE_OVERHEAD_TOKENS = 16
"""Tokens a chat template may add around each message (role markers), in the reservation."""

RETRY_MAX_WAIT = 120.0
"""The longest wait (seconds) between two tries of one request, whatever the endpoint's
``Retry-After`` says; past it the attempt fails and the task retries later."""


class ModelRequestTimeout(Exception):  # noqa: N818 - the name says what happened
    """One try of a model request took longer than ``request_timeout_seconds``."""


class ModelAnswer(BaseModel):
    """The structured answer the model must give (as the ``final_result`` tool call)."""

    model_config = pydantic.ConfigDict(extra="forbid")

    headline: Annotated[str, Field(min_length=1, max_length=200, description="One line (no "
                                   "line breaks) saying what matters most."),
                        storable("the headline")]
    importance: Literal["low", "normal", "high"] = Field(
        description="high: the user should look now; normal: worth reading; low: nothing new.")
    report: Annotated[str, Field(min_length=1, max_length=200_000,
                                 description="The report, in markdown."), storable("the report")]
    continuation: AnswerContinuation | None = Field(
        default=None, description="Only if the work cannot be finished in this run and a "
        "further run is allowed: why, and what the next run should do. Omit otherwise.")

    @pydantic.field_validator("headline")
    @classmethod
    def _one_line(cls, value: str) -> str:
        if "\n" in value or "\r" in value:
            raise ValueError("the headline must be one line: no line breaks")
        return value.strip()


@dataclass(frozen=True, slots=True)
class ModelEndpoint:
    """Where the model agent sends its requests: an OpenAI-compatible ``base_url``
    (ending in ``/v1``) and an API key. The supervisor's configuration, never a spec's.

    ``from_env()`` reads ``OPENAI_BASE_URL`` and ``OPENAI_API_KEY`` (a local server
    that needs no key gets a placeholder)."""

    base_url: str | None = None
    api_key: str | None = None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ModelEndpoint | None:
        """The endpoint the environment configures, or ``None`` when neither variable is
        set (the supervisor then offers no ``model`` agent)."""
        env = os.environ if environ is None else environ
        base_url, api_key = env.get("OPENAI_BASE_URL") or None, env.get("OPENAI_API_KEY") or None
        if base_url is None and api_key is None:
            return None
        return cls(base_url, api_key)


def request_cost(params: ModelAgentParams, input_tokens: int, output_tokens: int) -> Decimal:
    """USD of a request at the definition's prices, rounded up to the recorded places."""
    cost = (Decimal(input_tokens) * params.input_usd_per_1k
            + Decimal(output_tokens) * params.output_usd_per_1k) / _THOUSAND
    return cost.quantize(COST_STEP, rounding=ROUND_CEILING)


def reservation_usd(params: ModelAgentParams, request_bytes: int, messages: int) -> Decimal:
    """The upper bound charged before a request: every byte of it an input token (plus
    each message's template overhead) and ``max_output_tokens`` of output."""
    return request_cost(params, request_bytes + _MESSAGE_OVERHEAD_TOKENS * messages,
                        params.max_output_tokens)


class _ClockTimeout(httpx2.AsyncBaseTransport):
    """Each HTTP try limited to ``seconds`` on the worker's clock (the deadline and the
    tests' clock are the same one)."""

    def __init__(self, wrapped: httpx2.AsyncBaseTransport, clock: Clock, seconds: float) -> None:
        self.wrapped, self.clock, self.seconds = wrapped, clock, seconds

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response: httpx2.Response | None = None
        failure: BaseException | None = None
        async with anyio.create_task_group() as tg:
            async def send() -> None:
                nonlocal response, failure
                try:
                    response = await self.wrapped.handle_async_request(request)
                except Exception as exc:  # noqa: BLE001 - re-raised below, outside the group
                    failure = exc
                tg.cancel_scope.cancel()

            async def watch() -> None:
                await self.clock.sleep(self.seconds)
                tg.cancel_scope.cancel()

            tg.start_soon(send)
            tg.start_soon(watch)
        if failure is not None:
            raise failure
        if response is None:
            raise ModelRequestTimeout(f"the model request took longer than {self.seconds:g} s "
                                      "(request_timeout_seconds)")
        return response

    async def aclose(self) -> None:
        await self.wrapped.aclose()


def _retryable_status(response: httpx2.Response) -> None:
    if response.status_code == 429 or response.status_code >= 500:
        response.raise_for_status()


def _is_retryable(exc: BaseException) -> bool:
    return isinstance(exc, httpx2.HTTPStatusError) and (
        exc.response.status_code == 429 or exc.response.status_code >= 500)


class _BudgetedModel(WrapperModel):
    """The chat model with the run's budget charged before each request."""

    def __init__(self, wrapped: OpenAIChatModel, ctx: AgentContext,
                 params: ModelAgentParams) -> None:
        super().__init__(wrapped)
        self.ctx, self.params = ctx, params

    async def request(self, messages: Any, model_settings: Any, parameters: Any) -> Any:
        size = len(ModelMessagesTypeAdapter.dump_json(messages)) + len(json.dumps(
            [[t.name, t.description, t.parameters_json_schema]
             for t in [*parameters.function_tools, *parameters.output_tools]]).encode())
        reserved = reservation_usd(self.params, size, len(messages))
        await self.ctx.budget.reserve(model_requests=1, cost_usd=reserved)
        try:
            response = await super().request(messages, model_settings, parameters)
        except ModelHTTPError:
            # the endpoint answered with an error: nothing was generated, nothing billed
            await self.ctx.budget.true_up(reserved_usd=reserved, cost_usd=Decimal(0))
            raise
        # (a timeout or a cancellation keeps the reservation: it may have been billed)
        usage = response.usage
        self.ctx.journal.model = response.model_name or self.params.model
        if usage.input_tokens == 0:
            # no usage block (some servers omit it; a prompt is never 0 tokens): the
            # cost is unknown, so the reservation stands as what it cost
            log.warning("task %s/%s: the model's response has no usage; its reservation of "
                        "%s USD stands as its cost", self.ctx.tenant_id, self.ctx.task_id,
                        plain_decimal(reserved))
            await self.ctx.budget.true_up(reserved_usd=reserved, cost_usd=reserved,
                                          output_tokens=usage.output_tokens)
            return response
        await self.ctx.budget.true_up(
            reserved_usd=reserved,
            cost_usd=request_cost(self.params, usage.input_tokens, usage.output_tokens),
            input_tokens=usage.input_tokens, output_tokens=usage.output_tokens)
        return response


class ModelAgent:
    """An :class:`~._agents.AgentRunner` that asks a model (see the module docstring).

    Args:
        endpoint: base URL and API key (default: :meth:`ModelEndpoint.from_env`).
        defaults: ``agent.params`` applied under each definition's own (e.g. an
            operator's default model), checked as :class:`ModelAgentParams`.
        overrides: ``agent.params`` applied over each definition's own (e.g. the
            operator's real prices, so a spec cannot declare its model free).
        transport: the HTTP transport under the retries (tests and proxies; default
            httpx2's own).

    The run's clock is ``ctx.clock`` (the worker's); without one, the system clock.
    """

    def __init__(self, endpoint: ModelEndpoint | None = None, *,
                 defaults: Mapping[str, Any] | None = None,
                 overrides: Mapping[str, Any] | None = None,
                 transport: httpx2.AsyncBaseTransport | None = None) -> None:
        self.endpoint = endpoint or ModelEndpoint.from_env() or ModelEndpoint()
        self.defaults = dict(defaults or {})
        self.overrides = dict(overrides or {})
        self.transport = transport
        self._tls: ssl.SSLContext | None = None

    async def run(self, ctx: AgentContext) -> AgentResult:
        """One research run of ``ctx``'s task.

        Raises:
            BudgetExceeded: a request or tool call the budget cannot cover (not made).
            StaleLease: the run's token stopped being current (nothing more was sent).
            AgentError: the model failed (``retryable`` as the module docstring says).
        """
        try:
            params = ModelAgentParams.from_task_params(
                {**self.defaults, **ctx.params, **self.overrides})
        except pydantic.ValidationError as exc:
            problems = "; ".join(f"agent.params.{'.'.join(map(str, e['loc']))}: {e['msg']}"
                                 for e in exc.errors())
            raise AgentError(f"the model agent's params are invalid: {problems}. Fix: correct "
                             "them in a new revision of the definition", retryable=False) from exc
        clock: Clock = ctx.clock or SystemClock()
        transport = AsyncHTTPX2TenacityTransport(
            RetryConfig(retry=retry_if_exception(_is_retryable),
                        wait=wait_retry_after(wait_random_exponential(multiplier=1, max=30),
                                              max_wait=RETRY_MAX_WAIT),
                        stop=stop_after_attempt(params.http_retries + 1),
                        sleep=clock.sleep, reraise=True),
            wrapped=_ClockTimeout(self.transport or httpx2.AsyncHTTPTransport(verify=self._context()),
                                  clock, params.request_timeout_seconds),
            validate_response=_retryable_status)
        async with httpx2.AsyncClient(transport=transport,
                                      timeout=params.request_timeout_seconds + 60) as http:
            client = AsyncOpenAI(base_url=self.endpoint.base_url,
                                 api_key=self.endpoint.api_key or "not-needed",
                                 http_client=http, max_retries=0)
            model = _BudgetedModel(OpenAIChatModel(
                params.model, provider=OpenAIProvider(openai_client=client)), ctx, params)
            agent = Agent(model, output_type=ToolOutput(ModelAnswer), instructions=_system(ctx, params),
                          retries={"output": params.output_retries}, tools=[_read_tool(ctx)])
            settings: dict[str, Any] = {"max_tokens": params.max_output_tokens}
            if params.temperature is not None:
                settings["temperature"] = params.temperature
            try:
                result = await agent.run(_prompt(ctx), model_settings=settings,
                                         usage_limits=UsageLimits(request_limit=None))
            except BaseException as exc:  # noqa: BLE001 - mapped to the run's rules
                raise _mapped(exc, params) from exc
        answer = result.output
        continuation = None
        if answer.continuation is not None:
            continuation = Continuation(answer.continuation.reason,
                                        answer.continuation.instructions)
        return AgentResult(answer.report, Importance(answer.importance), ctx.budget.used,
                           headline=answer.headline, continuation=continuation)


    def _context(self) -> ssl.SSLContext:
        """One TLS context for every run (loading the CA bundle costs ~20 ms); each run
        has its own connection pool, closed when the run ends."""
        if self._tls is None:
            self._tls = httpx2.create_ssl_context()
        return self._tls


def _read_tool(ctx: AgentContext) -> Callable[..., Any]:
    scope = ", ".join(ctx.sources.scope) if ctx.sources is not None else ""

    async def read_observation(source: str, subject: str) -> dict[str, Any]:
        """Read the latest observation of `subject` from `source` (read-only). Returns its
        value (a decimal string), unit, currency, as_of and status; a status other than
        "ok" means there is no usable value."""
        if ctx.sources is None:
            return {"refused": "this task has no sources in scope"}
        try:
            observation = await ctx.sources.read(source, subject)
        except ToolRefused as exc:
            return {"refused": str(exc)}
        return observation.to_json()

    read_observation.__name__ = READ_TOOL
    read_observation.__doc__ = (read_observation.__doc__ or "") + (
        f" Sources in scope: {scope or 'none'}.")
    return read_observation


def _system(ctx: AgentContext, params: ModelAgentParams) -> str:
    parts = [params.system_prompt] if params.system_prompt else []
    parts.append(
        "You are running one scheduled task for the user, under a fixed budget of model "
        "requests, tool calls and cost. Read what you need with read_observation (the only "
        "tool; it is read-only), then answer with final_result: a markdown report, its "
        "importance and a one-line headline. Say plainly when a reading is missing, stale "
        "or failed rather than guessing a value. You cannot take any other action.")
    if ctx.max_roots > 1:
        parts.append(
            f"This is run {ctx.root} of at most {ctx.max_roots} for this occurrence. Only if "
            "the work cannot be finished now, set continuation (reason, instructions) in "
            "final_result; the report you give now is kept either way.")
    return "\n\n".join(parts)


def _prompt(ctx: AgentContext) -> str:
    occ = ctx.occurrence
    facts = {
        "definition": f"{ctx.tenant_id}/{ctx.definition_id}", "revision": ctx.revision,
        "title": ctx.title, "owner": ctx.owner_user_id, "occurrence": occ.slot,
        "kind": occ.kind, "scheduled_for": format_utc(occ.scheduled_for),
        "admitted_late": occ.late,
        "start_lateness_seconds": round(occ.start_lateness_seconds, 1),
        "attempt": ctx.attempt, "root": ctx.root,
        "sources_in_scope": ctx.sources.offered() if ctx.sources is not None else [],
    }
    sections = ["## Task", "", ctx.instructions or "(no instructions)", "",
                "## Trusted facts (from the scheduler, not from any user text)", "",
                json.dumps(facts, indent=2)]
    trigger = ctx.params.get("trigger")
    if isinstance(trigger, Mapping):
        sections += ["", "## Why it ran", "", str(trigger.get("reason", "")), "",
                     json.dumps(list(trigger.get("observations", ())), indent=2, default=str)]
    if ctx.continued_from is not None:
        c = ctx.continued_from
        sections += ["", f"## Continuing from root {c.root - 1}", "", f"Reason: {c.reason}", "",
                     f"Next instructions: {c.instructions}", "", "Its report:", "",
                     c.previous_report]
    return "\n".join(sections)


def _mapped(exc: BaseException, params: ModelAgentParams) -> BaseException:
    """An exception out of the model loop as the run's rules want it."""
    inner = _first_of(exc, WatchkeeperError)  # BudgetExceeded, StaleLease: as they are
    if inner is not None:
        return inner
    if not isinstance(exc, Exception):
        return exc  # a cancellation: the worker's deadline or interrupt
    timeout = _first_of(exc, ModelRequestTimeout)
    if timeout is not None:
        return AgentError(str(timeout), retryable=True)
    if isinstance(exc, ModelHTTPError):
        status = exc.status_code
        retryable = status == 429 or status >= 500 or status in (408, 409)
        tries = f" after {params.http_retries + 1} tries" if retryable else ""
        return AgentError(f"the model endpoint answered {status}{tries}: {exc.body}",
                          retryable=retryable)
    status_error = _first_of(exc, httpx2.HTTPStatusError)
    if status_error is not None:
        return AgentError(f"the model endpoint answered {status_error.response.status_code} "
                          f"after {params.http_retries + 1} tries", retryable=True)
    if isinstance(exc, UnexpectedModelBehavior):
        return AgentError(f"the model's answer did not validate after {params.output_retries} "
                          f"correction(s): {exc}", retryable=True)
    if isinstance(exc, ModelAPIError):
        return AgentError(f"the model endpoint could not be reached: {exc}", retryable=True)
    return exc


def _first_of(exc: BaseException, kind: type[Any]) -> Any:
    """``exc`` or the first exception of type ``kind`` in its groups, causes or contexts."""
    seen: set[int] = set()
    todo = [exc]
    while todo:
        current = todo.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, kind):
            return current
        if isinstance(current, BaseExceptionGroup):
            todo.extend(current.exceptions)
        todo.extend(e for e in (current.__cause__, current.__context__) if e is not None)
    return None
