"""The response shape of what producing a report took, shared by every door that shows a
report (the HTTP API's ``ReportOut``, the MCP tools' ``Report``): one definition, so
the two cannot drift. The values come from :func:`~._history.report`."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["ReportSpending", "UsageTotals"]


class UsageTotals(BaseModel):
    """Spending: counts, and the cost in USD as a decimal string."""

    model_config = ConfigDict(extra="ignore", from_attributes=True)

    model_requests: int
    tool_attempts: int
    input_tokens: int
    output_tokens: int
    cost_usd: str = Field(description="USD, a decimal string (exact).")


class ReportSpending(BaseModel):
    """A report's headline and what the task's runs took to produce it."""

    model_config = ConfigDict(extra="ignore", from_attributes=True)

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
