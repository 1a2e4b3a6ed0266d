"""The ``command`` agent: a subprocess that reads the context as JSON on stdin and
prints its answer on stdout (the contract: :mod:`watchkeeper.runtime.engine._answer`).

What a command may print is bounded, and read incrementally so memory stays bounded
too: at most :data:`STDOUT_LIMIT_BYTES` of stdout (past it the process is killed and
the task fails for good), and of stderr only the last :data:`STDERR_TAIL_BYTES` are kept
(for the reason of a crash).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence
from pathlib import Path

import anyio
from anyio.abc import ByteReceiveStream, ByteSendStream, Process

from .._errors import AgentError
from ._agents import AgentContext, AgentResult, Continuation, Usage
from ._answer import AnswerInvalid, parse_answer

__all__ = ["STDERR_TAIL_BYTES", "STDOUT_LIMIT_BYTES", "CommandAgent"]

STDOUT_LIMIT_BYTES = 8 * 1024 * 1024
"""The most a command may print on stdout (8 MiB): a report larger than this is not a
report a person reads; past it the command is killed and the answer refused."""

STDERR_TAIL_BYTES = 64 * 1024
"""How much of the end of stderr is kept while the command runs (bytes); a crash's
reason quotes its last :data:`_STDERR_SHOWN` characters."""

_STDERR_SHOWN = 500
_CHUNK = 64 * 1024
"""Bytes asked for per read of stdout or stderr."""


class CommandAgent:
    """Runs ``argv`` with the context JSON on stdin; stdout is the answer: plain
    markdown (the report), or a JSON object ``{"report", "importance", "artifact",
    "usage"}`` (the contract: :mod:`watchkeeper.runtime.engine._answer`), at most
    :data:`STDOUT_LIMIT_BYTES` long.

    Budget: starting the command is one tool attempt, charged before it starts (a task
    whose tool budget is spent starts no command). The usage it reports is added to that
    and settled after it exits: a command cannot be stopped before it reports, so the run
    that crosses a limit is recorded in full and is the task's last.

    Raises (from :meth:`run`):
        AgentError: ``retryable=True`` for a non-zero exit status (with the tail of
            stderr); ``retryable=False`` for stdout past :data:`STDOUT_LIMIT_BYTES` (the
            command is killed) and for an answer that breaks the contract (every
            problem named).
        BudgetExceeded: the tool budget is spent before the start, or the reported usage
            passes a limit.
    """

    def __init__(self, argv: Sequence[str]) -> None:
        self.argv = list(argv)

    async def run(self, ctx: AgentContext) -> AgentResult:
        """Run the command once."""
        ctx.budget.charge(tool_attempts=1)
        stdout, returncode, stderr = await self._execute(json.dumps(ctx.to_json()).encode())
        if returncode != 0:
            tail = stderr.decode(errors="replace")[-_STDERR_SHOWN:]
            raise AgentError(f"{self.argv[0]} exited {returncode}: {tail}", retryable=True)
        try:
            answer = parse_answer(stdout.decode(errors="replace"))
        except AnswerInvalid as exc:
            raise AgentError(
                f"{self.argv[0]} printed an answer that breaks the contract: {exc}. Fix: print "
                "plain markdown, or one JSON object with report, importance (low, normal or "
                "high), artifact and usage (non-negative integer counts, cost_usd a decimal); "
                "text without NUL characters; see the README's command agents section",
                retryable=False) from exc
        reported = answer.usage
        ctx.budget.settle(Usage(tool_attempts=1) + Usage(
            reported.model_requests, reported.tool_attempts, reported.cost_usd,
            reported.input_tokens, reported.output_tokens))
        intent = answer.continuation
        return AgentResult(answer.report, answer.importance, ctx.budget.used,
                           Path(answer.artifact) if answer.artifact else None,
                           headline=answer.headline,
                           continuation=None if intent is None else Continuation(
                               intent.reason, intent.instructions))

    async def _execute(self, context: bytes) -> tuple[bytes, int, bytes]:
        """Start the command, feed it ``context``, and read its output within the limits.

        Returns ``(stdout, exit status, the last STDERR_TAIL_BYTES of stderr)``.

        Raises:
            AgentError: ``retryable=False``: stdout passed :data:`STDOUT_LIMIT_BYTES`
                (the command was killed).
        """
        stderr = bytearray()
        # a session of its own: Ctrl-C in a terminal signals the whole foreground group,
        # and the supervisor's drain, not the signal, decides when a run is interrupted
        async with await anyio.open_process(self.argv, stdin=subprocess.PIPE,
                                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                            start_new_session=True) as process:
            assert process.stdin and process.stdout and process.stderr
            async with anyio.create_task_group() as tg:
                tg.start_soon(_feed, process.stdin, context)
                tg.start_soon(_keep_tail, process.stderr, stderr)
                stdout = await _read_at_most(process.stdout, STDOUT_LIMIT_BYTES)
                if len(stdout) > STDOUT_LIMIT_BYTES:
                    await _kill(process)
                    tg.cancel_scope.cancel()
            returncode = await process.wait()
        if len(stdout) > STDOUT_LIMIT_BYTES:
            raise AgentError(
                f"{self.argv[0]} printed more than {STDOUT_LIMIT_BYTES} bytes on stdout (the "
                f"limit; {len(stdout)} bytes read when it was stopped). Fix: keep the report "
                "under the limit, and write bulky output to an artifact file instead",
                retryable=False)
        return bytes(stdout), returncode, bytes(stderr)


async def _feed(stream: ByteSendStream, data: bytes) -> None:
    """Write the context to stdin and close it; a command that exits without reading it
    all is judged by its exit status and stdout, not by the broken pipe."""
    try:
        await stream.send(data)
        await stream.aclose()
    except (anyio.BrokenResourceError, anyio.ClosedResourceError, BrokenPipeError,
            ConnectionResetError):
        pass


async def _keep_tail(stream: ByteReceiveStream, tail: bytearray) -> None:
    """Read ``stream`` to its end, keeping only its last :data:`STDERR_TAIL_BYTES`."""
    while True:
        try:
            tail += await stream.receive(_CHUNK)
        except anyio.EndOfStream:
            return
        if len(tail) > STDERR_TAIL_BYTES:
            del tail[:-STDERR_TAIL_BYTES]


async def _read_at_most(stream: ByteReceiveStream, limit: int) -> bytearray:
    """Read ``stream`` to its end or until more than ``limit`` bytes came (then the
    result is longer than ``limit``, by at most one read of :data:`_CHUNK` bytes)."""
    data = bytearray()
    while len(data) <= limit:
        try:
            data += await stream.receive(_CHUNK)
        except anyio.EndOfStream:
            break
    return data


async def _kill(process: Process) -> None:
    """Kill the command and reap it."""
    if process.returncode is None:
        process.kill()
    with anyio.CancelScope(shield=True):
        await process.wait()
