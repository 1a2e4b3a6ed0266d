"""The parameters of the built-in model-backed agent (``agent.name = "model"``).

Pure data checked when a definition is proposed, so a chat agent's typo in
``agent.params`` is a spec problem naming its field, not a failed run a week later.
The endpoint itself (base URL, API key) is never part of a spec: a spec comes from
an agent, and an agent must not be able to send the operator's key elsewhere. It is
the supervisor's configuration (``OPENAI_BASE_URL``, ``OPENAI_API_KEY``).
"""

from __future__ import annotations

from decimal import Decimal
from typing import Annotated, Any

import pydantic
from pydantic import BaseModel, ConfigDict, Field

__all__ = ["MODEL_AGENT", "RESERVED_PARAM_KEYS", "ModelAgentParams"]

RESERVED_PARAM_KEYS = frozenset({"schedule", "trigger"})
"""Params keys the runtime stamps itself: the trusted schedule triple, and for a
condition the verdict and the observations that made it fire. Neither a spec's
``agent.params`` nor a binding's params may set them."""

MODEL_AGENT = "model"
"""The name of the built-in model-backed agent."""

class ModelAgentParams(BaseModel):
    """``agent.params`` of the model agent.

    Attributes:
        model: the model name the endpoint serves (``"gpt-4.1-mini"``, ``"qwen2.5:7b"``).
        system_prompt: prepended to the runtime's own instructions.
        temperature: sampling temperature, 0-2 (``None``: the endpoint's default).
        max_output_tokens: the cap sent with every request (``max_completion_tokens``);
            also the output side of each request's cost reservation.
        input_usd_per_1k, output_usd_per_1k: prices in USD per 1,000 tokens, used to
            charge ``limits.max_cost_usd`` (0: the run costs nothing).
        request_timeout_seconds: one model request's time limit; past it the attempt
            fails (and the task retries within ``limits.max_attempts``).
        http_retries: further tries of one request after a 429 or 5xx answer (the
            endpoint's ``Retry-After`` honoured), within the attempt.
        output_retries: how many times an answer that does not validate is sent back
            to the model to correct, before the run fails.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: Annotated[str, Field(min_length=1, max_length=200, pattern=r"\S")]
    system_prompt: Annotated[str, Field(max_length=20_000)] = ""
    temperature: Annotated[float, Field(ge=0, le=2)] | None = None
    max_output_tokens: Annotated[pydantic.StrictInt, Field(ge=1, le=1_000_000)] = 2048
    input_usd_per_1k: Annotated[Decimal, Field(ge=0, le=1000)] = Decimal(0)
    output_usd_per_1k: Annotated[Decimal, Field(ge=0, le=1000)] = Decimal(0)
    request_timeout_seconds: Annotated[float, Field(gt=0, le=3600)] = 120.0
    http_retries: Annotated[pydantic.StrictInt, Field(ge=0, le=10)] = 3
    output_retries: Annotated[pydantic.StrictInt, Field(ge=0, le=10)] = 1

    @pydantic.field_validator("temperature", "request_timeout_seconds", mode="before")
    @classmethod
    def _not_bool(cls, value: Any) -> Any:
        if isinstance(value, bool):
            raise ValueError("must be a number, not true/false")
        return value

    @classmethod
    def from_task_params(cls, params: dict[str, Any]) -> ModelAgentParams:
        """The agent's params out of a task's params (the runtime's reserved keys left
        out).

        Raises:
            pydantic.ValidationError: a param is missing or invalid (the spec check
                makes this unreachable for a confirmed definition).
        """
        return cls.model_validate({k: v for k, v in params.items() if k not in RESERVED_PARAM_KEYS})
