"""Command agents as real subprocesses (``python -c``) under a worker against real
PostgreSQL: the answer contract (markdown or one JSON object, validated as a whole), an
invalid answer failing the task without another attempt, and the reported usage
recorded and enforced against the task's run budget across attempts."""

from __future__ import annotations

import json
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from _helpers import confirmed, tasks, utc

from watchkeeper.runtime._errors import AgentError, BudgetExceeded
from watchkeeper.runtime.engine._agents import (
    AgentCatalog,
    AgentContext,
    AgentResult,
    BudgetGuard,
    Usage,
)
from watchkeeper.runtime.engine._answer import AnswerInvalid, parse_answer
from watchkeeper.runtime.engine._clock import FakeClock
from watchkeeper.runtime.engine._command import STDERR_TAIL_BYTES, STDOUT_LIMIT_BYTES, CommandAgent
from watchkeeper.runtime.engine._scheduler import tick
from watchkeeper.runtime.engine._worker import Worker
from watchkeeper.runtime.store._db import Database
from watchkeeper.triggers import Importance

pytestmark = pytest.mark.anyio

START = "2026-06-01T00:00:00Z"

NO_USAGE = {"model_requests": 0, "tool_attempts": 0, "input_tokens": 0, "output_tokens": 0,
            "cost_usd": "0"}


def printing(answer: Any) -> str:
    """Python source that prints ``answer`` (JSON unless it is a str) and exits 0."""
    text = answer if isinstance(answer, str) else json.dumps(answer)
    return f"import sys; sys.stdin.read(); sys.stdout.write({text!r})"


async def run_command(db: Database, clock: FakeClock, tmp_path: Path, code: str,
                      **spec: Any) -> tuple[Worker, dict[str, Any]]:
    """A definition whose agent 'cmd' is ``python -c code``, its first slot admitted."""
    agents = AgentCatalog()
    agents.add("cmd", CommandAgent([sys.executable, "-c", code]))
    await confirmed(db, clock, {"trigger": {"type": "interval", "every": 3600, "anchor": START},
                                "agent": {"name": "cmd"}, **spec})
    clock.advance(1)
    assert (await tick(db, clock)).admitted == 1
    return Worker(db, clock, agents, worker_id="w", artifact_root=tmp_path), (await tasks(db))[0]


async def runs(db: Database) -> list[tuple[int, str, dict[str, Any]]]:
    rows = await db.pool.fetch("SELECT attempt, outcome, usage FROM runs ORDER BY run_id")
    return [(r["attempt"], r["outcome"], r["usage"]) for r in rows]


async def test_an_invalid_importance_fails_the_task_once_naming_the_valid_values(
        db: Database, tmp_path: Path) -> None:
    """'urgent' is refused with low, normal and high named, and never retried (3 attempts
    were allowed)."""
    clock = FakeClock(utc(START))
    worker, _ = await run_command(db, clock, tmp_path,
                                  printing({"report": "# r", "importance": "urgent"}),
                                  limits={"max_attempts": 3})
    outcome = await worker.run_once()
    assert outcome is not None and outcome.status == "failed"
    assert ("importance: Input should be 'low', 'normal' or 'high' (got 'urgent')"
            in outcome.reason)
    assert outcome.reason.startswith(f"AgentError: {sys.executable} printed an answer that "
                                     "breaks the contract: ")
    assert await worker.run_once() is None
    assert [(a, o) for a, o, _ in await runs(db)] == [(1, "failed")]
    assert (await tasks(db))[0]["status"] == "failed"


async def test_every_problem_of_an_answer_is_named_at_once(db: Database, tmp_path: Path) -> None:
    """Five problems (unknown key, importance, negative, NaN and non-numeric usage) are all
    in the one reason, in the answer's order."""
    clock = FakeClock(utc(START))
    answer = ('{"report": "# r", "importnce": "high", "importance": "urgent", "usage": '
              '{"model_requests": -1, "tool_attempts": "3", "cost_usd": NaN}}')
    worker, _ = await run_command(db, clock, tmp_path, printing(answer))
    outcome = await worker.run_once()
    assert outcome is not None and outcome.status == "failed"
    problems = outcome.reason.split("breaks the contract: ", 1)[1].split(". Fix: ")[0]
    assert problems.split("; ") == [
        "importance: Input should be 'low', 'normal' or 'high' (got 'urgent')",
        "usage.model_requests: Input should be greater than or equal to 0 (got -1)",
        "usage.tool_attempts: Input should be a valid integer (got '3')",
        "usage.cost_usd: Input should be a finite number (got nan)",
        "importnce: Extra inputs are not permitted (got 'high')",
    ]


async def test_a_crashing_command_is_retried_as_a_new_attempt(db: Database,
                                                               tmp_path: Path) -> None:
    """A non-zero exit is retryable: the task goes back to pending for attempt 2."""
    clock = FakeClock(utc(START))
    worker, _ = await run_command(db, clock, tmp_path,
                                  "import sys; sys.stderr.write('boom'); sys.exit(3)")
    outcome = await worker.run_once()
    assert outcome is not None and outcome.status == "pending"
    [task] = await tasks(db)
    assert task["status_reason"] == f"retrying after AgentError: {sys.executable} exited 3: boom"


@pytest.mark.parametrize(("answer", "usage"), [
    ("# plain markdown\n", {**NO_USAGE, "tool_attempts": 1}),
    ({"report": "# json\n", "usage": {"model_requests": 3, "tool_attempts": 2,
                                      "input_tokens": 1200, "output_tokens": 300,
                                      "cost_usd": "0.042"}},
     {"model_requests": 3, "tool_attempts": 3, "input_tokens": 1200, "output_tokens": 300,
      "cost_usd": "0.042"}),
    ('{"report": "# exact\\n", "usage": {"cost_usd": 0.1}}',
     {**NO_USAGE, "tool_attempts": 1, "cost_usd": "0.1"}),
])
async def test_reported_usage_is_recorded_on_the_run(db: Database, tmp_path: Path,
                                                     answer: Any, usage: dict[str, Any]) -> None:
    """The run records what the command reported plus the one tool attempt of starting it;
    a JSON number cost is read exactly (0.1, not a float's 0.1000000000000000055...)."""
    clock = FakeClock(utc(START))
    worker, _ = await run_command(db, clock, tmp_path, printing(answer))
    outcome = await worker.run_once()
    assert outcome is not None and outcome.status == "completed"
    assert await runs(db) == [(1, "succeeded", usage)]


@pytest.mark.parametrize(("limits", "usage", "problem"), [
    ({"max_model_requests": 5}, {"model_requests": 6}, "model_requests: the run reported "
     "usage that brings the task to 6, past its limit of 5"),
    ({"max_cost_usd": "0.05"}, {"cost_usd": 0.06}, "cost_usd: the run reported usage that "
     "brings the task to 0.06, past its limit of 0.05"),
    ({"max_tool_attempts": 3}, {"tool_attempts": 3}, "tool_attempts: the run reported usage "
     "that brings the task to 4, past its limit of 3"),
])
async def test_a_run_reporting_more_than_its_budget_fails_with_its_usage(
        db: Database, tmp_path: Path, limits: dict[str, Any], usage: dict[str, Any],
        problem: str) -> None:
    """Usage past a limit ends the task failed (BudgetExceeded, not retried), its report
    not committed and its usage recorded on the run."""
    clock = FakeClock(utc(START))
    worker, _ = await run_command(db, clock, tmp_path,
                                  printing({"report": "# r\n", "usage": usage}),
                                  limits={**limits, "max_attempts": 3})
    outcome = await worker.run_once()
    assert outcome is not None and outcome.status == "failed"
    assert outcome.reason == (f"BudgetExceeded: {problem} (charged after the run: it could not "
                              "be stopped before it reported); the budget spans the task's "
                              "attempts and roots, so it is not retried")
    recorded = {**NO_USAGE, "tool_attempts": 1,
                **{k: str(Decimal(str(v))) if k == "cost_usd" else v + (k == "tool_attempts")
                   for k, v in usage.items()}}
    assert await runs(db) == [(1, "budget_exceeded", recorded)]
    assert await db.pool.fetchval("SELECT count(*) FROM reports") == 0
    assert await worker.run_once() is None


async def test_the_budget_spans_attempts_and_the_run_crossing_it_is_the_last(
        db: Database, tmp_path: Path) -> None:
    """max_tool_attempts 3: attempt 1 crashes (1 tool attempt); attempt 2 reports 2 more
    (1 + 1 + 2 = 4 > 3), so it fails for good though a third attempt was allowed."""
    clock = FakeClock(utc(START))
    code = ("import json, sys; ctx = json.load(sys.stdin)\n"
            "if ctx['attempt'] == 1: sys.exit(1)\n"
            "print(json.dumps({'report': '# r', 'usage': {'tool_attempts': 2}}))")
    worker, _ = await run_command(db, clock, tmp_path, code,
                                  limits={"max_tool_attempts": 3, "max_attempts": 3})
    assert (await worker.run_once()).status == "pending"  # type: ignore[union-attr]
    clock.advance(60)  # past the backoff (base 2 s, capped at 60 s)
    outcome = await worker.run_once()
    assert outcome is not None and (outcome.attempt, outcome.status) == (2, "failed")
    assert outcome.reason.startswith("BudgetExceeded: tool_attempts: the run reported usage "
                                     "that brings the task to 4, past its limit of 3")
    assert await runs(db) == [(1, "failed", {**NO_USAGE, "tool_attempts": 1}),
                              (2, "budget_exceeded", {**NO_USAGE, "tool_attempts": 3})]
    assert (await tasks(db))[0]["status"] == "failed"


async def test_usage_a_python_agent_returns_is_settled_against_the_budget(
        db: Database, tmp_path: Path) -> None:
    """An agent that charges nothing but returns 3 model requests under a limit of 2 fails,
    with the 3 recorded: a result's usage is enforced, not only the charges."""
    clock = FakeClock(utc(START))

    class Reporting:
        async def run(self, ctx: AgentContext) -> AgentResult:
            return AgentResult("# r\n", Importance.HIGH, Usage(model_requests=3))

    agents = AgentCatalog()
    agents.add("py", Reporting())
    await confirmed(db, clock, {"trigger": {"type": "interval", "every": 3600, "anchor": START},
                                "agent": {"name": "py"}, "limits": {"max_model_requests": 2}})
    clock.advance(1)
    await tick(db, clock)
    outcome = await Worker(db, clock, agents, worker_id="w", artifact_root=tmp_path).run_once()
    assert outcome is not None and outcome.status == "failed"
    assert outcome.reason.startswith("BudgetExceeded: model_requests: the run reported usage "
                                     "that brings the task to 3, past its limit of 2")
    assert await runs(db) == [(1, "budget_exceeded", {**NO_USAGE, "model_requests": 3})]


def test_plain_text_and_json_that_is_not_an_object_are_the_report() -> None:
    """Markdown, a JSON list and a JSON string are reports as printed, importance normal."""
    for text in ("# hello\n", "[1, 2]", '"quoted"', "{not json"):
        answer = parse_answer(text)
        assert (answer.report, answer.importance, answer.usage.model_requests) == (
            text, Importance.NORMAL, 0)


def test_an_answer_problem_is_typed_not_retryable() -> None:
    """The error carries the decision: AnswerInvalid lists problems; an AgentError built
    from it says retryable=False, a crash's says True; BudgetExceeded is never retried."""
    with pytest.raises(AnswerInvalid) as raised:
        parse_answer('{"usage": {"input_tokens": 1.5, "cost_usd": "-0.01"}}')
    assert raised.value.problems == (
        "usage.input_tokens: Input should be a valid integer (got Decimal('1.5'))",
        "usage.cost_usd: Input should be greater than or equal to 0 (got '-0.01')")
    assert AgentError("x", retryable=False).retryable is False
    assert AgentError("x", retryable=True).retryable is True
    assert BudgetExceeded.retryable is False


def test_negative_or_nan_usage_cannot_be_charged() -> None:
    """The guard refuses a negative count and a NaN cost, so nothing refunds a budget."""
    guard = BudgetGuard(model_requests=5)
    with pytest.raises(ValueError, match="usage.model_requests is -1, not a count"):
        guard.charge(model_requests=-1)
    with pytest.raises(ValueError, match="usage.cost_usd is Decimal\\('NaN'\\), not a cost"):
        guard.charge(cost_usd=Decimal("NaN"))
    assert guard.used == Usage()


def contract_problems(reason: str) -> str:
    """The problems an invalid-answer reason lists (between its two fixed phrases)."""
    return reason.split("breaks the contract: ", 1)[1].split(". Fix: ")[0]


@pytest.mark.parametrize(("code", "problem"), [
    ("import sys; sys.stdin.read(); sys.stdout.write('# report\\0tail\\n')",
     "report: the report contains a NUL character at offset 8; PostgreSQL text cannot hold it "
     "(got '# report\\x00tail\\n')"),
    (printing('{"report": "\\u0000"}'),
     "report: the report contains a NUL character at offset 0; PostgreSQL text cannot hold it "
     "(got '\\x00')"),
    (printing('{"report": "ok \\ud800"}'),
     "report: the report contains a lone surrogate U+D800 at offset 3; it has no UTF-8 "
     "encoding, so PostgreSQL text cannot hold it (got 'ok \\ud800')"),
    (printing('{"report": "# r", "artifact": "a\\u0000.csv"}'),
     "artifact: the artifact path contains a NUL character at offset 1; PostgreSQL text "
     "cannot hold it (got 'a\\x00.csv')"),
    (printing('{"report": "# r", "usage": {"cost_usd": "1E-20000"}}'),
     "usage.cost_usd: Decimal input should have no more than 18 decimal places (got "
     "'1E-20000')"),
])
async def test_text_postgresql_cannot_store_fails_the_task_once(
        db: Database, tmp_path: Path, code: str, problem: str) -> None:
    """A NUL or a lone surrogate in the report or artifact path (and a cost finer than
    PostgreSQL's numeric sums hold) is an invalid answer: one failed attempt of three
    allowed, its tool attempt recorded, no report, and the worker goes on."""
    clock = FakeClock(utc(START))
    worker, _ = await run_command(db, clock, tmp_path, code, limits={"max_attempts": 3})
    outcome = await worker.run_once()
    assert outcome is not None and outcome.status == "failed"
    assert contract_problems(outcome.reason) == problem
    assert await worker.run_once() is None
    assert await runs(db) == [(1, "failed", {**NO_USAGE, "tool_attempts": 1})]
    [task] = await tasks(db)
    assert (task["status"], task["status_reason"]) == ("failed", outcome.reason)
    assert await db.pool.fetchval("SELECT count(*) FROM reports") == 0


async def test_stdout_past_the_limit_kills_the_command_and_fails_once(
        db: Database, tmp_path: Path) -> None:
    """A command printing without end is killed once it passes 8 MiB; the task fails for
    good with the limit and the bytes read (at most one 64 KiB read past it)."""
    clock = FakeClock(utc(START))
    code = ("import sys; sys.stdin.read()\n"
            "while True: sys.stdout.write('x' * 65536)")
    worker, _ = await run_command(db, clock, tmp_path, code, limits={"max_attempts": 3})
    outcome = await worker.run_once()
    assert outcome is not None and outcome.status == "failed"
    prefix = (f"AgentError: {sys.executable} printed more than {STDOUT_LIMIT_BYTES} bytes on "
              "stdout (the limit; ")
    assert outcome.reason.startswith(prefix)
    read = int(outcome.reason[len(prefix):].split(" ", 1)[0])
    assert 8 * 1024 * 1024 < read <= 8 * 1024 * 1024 + 65536
    assert await worker.run_once() is None
    assert await runs(db) == [(1, "failed", {**NO_USAGE, "tool_attempts": 1})]


async def test_stdout_at_the_limit_is_a_report(db: Database, tmp_path: Path) -> None:
    """Exactly 8 MiB of markdown is within the limit and committed byte for byte."""
    clock = FakeClock(utc(START))
    code = ("import sys; sys.stdin.read(); sys.stdout.write('#' + 'x' * (8 * 1024 * 1024 - 1))")
    worker, _ = await run_command(db, clock, tmp_path, code)
    outcome = await worker.run_once()
    assert outcome is not None and outcome.status == "completed"
    assert await db.pool.fetchval("SELECT octet_length(content_md) FROM reports") == 8 * 1024 * 1024


async def test_only_the_tail_of_stderr_is_kept(tmp_path: Path) -> None:
    """20 MiB on stderr leaves the last 64 KiB, ending with what was printed last."""
    code = ("import sys; sys.stderr.write('e' * (20 * 1024 * 1024)); sys.stderr.write('LAST'); "
            "sys.exit(4)")
    stdout, status, stderr = await CommandAgent([sys.executable, "-c", code])._execute(b"{}")
    assert (stdout, status, len(stderr)) == (b"", 4, 64 * 1024)
    assert stderr == b"e" * (64 * 1024 - 4) + b"LAST"
    assert STDERR_TAIL_BYTES == 64 * 1024


async def test_a_command_that_does_not_read_its_context_still_answers(
        db: Database, tmp_path: Path) -> None:
    """A command that ignores stdin (and exits before the context is written) is judged by
    its exit status and stdout, not by the broken pipe."""
    clock = FakeClock(utc(START))
    # a context far larger than a pipe's buffer (64 KiB): writing it outlasts the command
    worker, _ = await run_command(db, clock, tmp_path, "print('# no input read')",
                                  agent={"name": "cmd", "params": {"padding": "m" * 1_000_000}})
    outcome = await worker.run_once()
    assert outcome is not None and outcome.status == "completed"
    assert await db.pool.fetchval("SELECT content_md FROM reports") == "# no input read\n"


@pytest.mark.parametrize(("text", "status", "reason"), [
    ("[" * 100_000 + "]" * 100_000, "completed", "non-empty markdown report (200000 bytes)"),
    ('{"a": ' * 100_000 + "1" + "}" * 100_000, "failed",
     "answer: a JSON object the reader cannot follow (nested deeper than Python's recursion "
     "limit); the contract's objects nest two levels and hold short numbers"),
])
async def test_deeply_nested_json_is_markdown_or_refused_never_retried(
        db: Database, tmp_path: Path, text: str, status: str, reason: str) -> None:
    """100,000 nested arrays are not a JSON object, so they are the markdown report (the
    contract); as many nested objects are an object that breaks it: one attempt of three,
    either way."""
    clock = FakeClock(utc(START))
    path = tmp_path / "answer.txt"
    path.write_text(text)
    code = f"import sys; sys.stdin.read(); sys.stdout.write(open({str(path)!r}).read())"
    worker, _ = await run_command(db, clock, tmp_path, code, limits={"max_attempts": 3})
    outcome = await worker.run_once()
    assert outcome is not None and outcome.status == status
    if status == "failed":
        assert contract_problems(outcome.reason) == reason
    else:
        assert outcome.reason == reason
        assert await db.pool.fetchval("SELECT content_md FROM reports") == text
    assert await worker.run_once() is None
    assert [(a, o) for a, o, _ in await runs(db)] == [
        (1, "succeeded" if status == "completed" else "failed")]


def test_a_json_object_with_a_number_too_long_to_read_is_refused() -> None:
    """A 5,000-digit count (past Python's 4,300-digit reading limit) in an object is an
    invalid answer, not markdown; the same number alone is markdown."""
    with pytest.raises(AnswerInvalid) as raised:
        parse_answer('{"usage": {"model_requests": ' + "1" * 5000 + "}}")
    assert raised.value.problems == (
        "answer: a JSON object the reader cannot follow (Exceeds the limit (4300 digits) for "
        "integer string conversion: value has 5000 digits); the contract's objects nest two "
        "levels and hold short numbers",)
    assert parse_answer("1" * 5000).report == "1" * 5000


def test_a_long_refused_value_is_quoted_in_part() -> None:
    """An unknown key holding a megabyte is named with its first 60 characters of repr and
    its length, so a reason stays short."""
    with pytest.raises(AnswerInvalid) as raised:
        parse_answer(json.dumps({"report": "# r", "extra": "y" * 1_000_000}))
    shown = repr("y" * 1_000_000)
    assert raised.value.problems == (
        f"extra: Extra inputs are not permitted (got {shown[:60]}... (1000002 characters))",)


async def test_a_command_continues_into_a_second_root_with_its_intent(
        db: Database, tmp_path: Path) -> None:
    """max_roots 2: root 1 prints a continuation intent; root 2 reads root and the
    previous report from its context on stdin and prints the final report, which is the
    task's, with its headline."""
    clock = FakeClock(utc(START))
    code = ("import json, sys; ctx = json.load(sys.stdin)\n"
            "if ctx['root'] == 1:\n"
            "    print(json.dumps({'report': '# part 1\\n', 'continuation': {\n"
            "        'reason': 'half done', 'instructions': 'finish it'}}))\n"
            "else:\n"
            "    c = ctx['continued_from']\n"
            "    print(json.dumps({'report': f\"# part 2 after {c['previous_report'].strip()}"
            " ({c['instructions']})\\n\", 'headline': 'done in two'}))\n")
    worker, _ = await run_command(db, clock, tmp_path, code, limits={"max_roots": 2})
    first = await worker.run_once()
    assert first is not None and first.status == "pending"
    second = await worker.run_once()
    assert second is not None and second.status == "completed"
    row = await db.pool.fetchrow("SELECT content_md, headline FROM reports")
    assert tuple(row) == ("# part 2 after # part 1 (finish it)\n", "done in two")
    outcomes = await db.pool.fetch("SELECT root, outcome FROM runs ORDER BY run_id")
    assert [tuple(r) for r in outcomes] == [(1, "continued"), (2, "succeeded")]


async def test_a_blank_continuation_reason_is_refused_naming_the_field(
        db: Database, tmp_path: Path) -> None:
    clock = FakeClock(utc(START))
    worker, _ = await run_command(db, clock, tmp_path, printing(
        {"report": "# r\n", "continuation": {"reason": "  ", "instructions": "go"}}))
    outcome = await worker.run_once()
    assert outcome is not None and outcome.status == "failed"
    assert "continuation.reason" in outcome.reason
