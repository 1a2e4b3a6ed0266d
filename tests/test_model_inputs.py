"""What a model sends that PostgreSQL cannot store, and model params that do not fit,
are caught where they enter: a tool call's arguments are recorded and the call closed;
an answer is sent back for correction; a binding's params are checked as the model
agent's when the bindings are validated; bad params at run time fail once, naming the
field. Real PostgreSQL, a real worker, the scripted local endpoint."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _helpers import tasks, utc
from _model_server import answer, model_server, tools
from test_model_agent import START, Market, model_task, model_worker, run_rows

from watchkeeper.runtime import FakeClock
from watchkeeper.runtime.store._db import Database

pytestmark = pytest.mark.anyio

READ = "read_observation"


async def test_a_tool_call_whose_arguments_postgresql_cannot_store_is_recorded_and_closed(
        db: Database, tmp_path: Path) -> None:
    """The model's tool arguments are untrusted text. A subject with a NUL (a lone
    surrogate is refused by pydantic-ai's argument parsing already) goes into the
    run's tool_calls jsonb, which PostgreSQL refuses: before the fix run_charge failed, then
    every run_finish fails too (the journal still holds the call), so the run row
    stays 'running', the call is not recorded and the task is left 'running'
    ("unrecorded") until its lease expires and it is taken over."""
    clock = FakeClock(utc(START))
    market = Market(clock)
    async with model_server(tools((READ, {"source": "prices", "subject": "FUND\u0000X"})),
                            answer()) as server:
        await model_task(db, clock, server.base_url, limits={"max_attempts": 2})
        outcome = await model_worker(db, clock, tmp_path, server.base_url, market).run_once()
    assert outcome is not None and outcome.status != "unrecorded", outcome
    (run,) = await run_rows(db)
    assert run["outcome"] != "running"
    assert len(run["tool_calls"]) == 1  # the call is recorded (escaped or refused)
    assert (await tasks(db))[0]["status"] != "running"


@pytest.mark.parametrize("bad", [
    {"report": "# R\u0000\n"},
    {"headline": "All\u0000quiet"},
    {"continuation": {"reason": "more\u0000", "instructions": "Go on."}},
], ids=["report", "headline", "continuation"])
async def test_an_answer_postgresql_cannot_store_is_sent_back_for_correction(
        db: Database, tmp_path: Path, bad: dict[str, Any]) -> None:
    """Module docstring: "An answer that does not validate is sent back for correction
    output_retries times". An answer with a NUL passes ModelAnswer, then fails later:
    in the report or headline the task fails for good (result_problems, not retried,
    no correction); in the continuation Continuation() raises a bare ValueError
    outside _mapped: the attempt fails as a generic (retryable) error and a retry
    repeats the whole run. Either way the corrected second answer is never asked
    for."""
    clock = FakeClock(utc(START))
    market = Market(clock)
    first = answer(**bad)
    async with model_server(first, answer("# Clean\n")) as server:
        await model_task(db, clock, server.base_url, limits={"max_roots": 2})
        outcome = await model_worker(db, clock, tmp_path, server.base_url, market).run_once()
        made = len(server.received)
    assert made == 2, outcome
    assert outcome is not None and outcome.status == "completed", outcome


async def test_a_binding_for_the_model_agent_has_its_params_checked(
        db: Database, tmp_path: Path) -> None:
    """An operator binding may name agent "model" with its own params (they become the
    task's params), but validate_bindings never checks them as ModelAgentParams: a
    typo surfaces only at run time, as a pydantic dump retried max_attempts times
    instead of a BindingSetError naming agent.params.<field>."""
    from watchkeeper.triggers import BindingSetError, validate_bindings
    with pytest.raises(BindingSetError, match="modle"):
        validate_bindings([{"tenant_id": "acme", "binding_id": "b1", "owner_user_id": "alice",
                            "agent": "model", "params": {"modle": "x", "temperature": 9}}])


async def test_bad_model_params_at_run_time_fail_once_naming_the_field(
        db: Database, tmp_path: Path) -> None:
    """The run-time side of the same gap (the task's params as such a binding would
    admit them): a config error is not retryable, yet it was retried with backoff."""
    clock = FakeClock(utc(START))
    market = Market(clock)
    async with model_server(answer()) as server:
        await model_task(db, clock, server.base_url, limits={"max_attempts": 3})
        await db.pool.execute("""UPDATE tasks SET params = params || '{"modle": "x"}'""")
        outcome = await model_worker(db, clock, tmp_path, server.base_url, market).run_once()
        made = len(server.received)
    assert made == 0
    assert outcome is not None and outcome.status == "failed", outcome
    assert "modle" in outcome.reason
