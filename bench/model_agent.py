"""What the runtime adds to a model run: the model agent under a worker vs the same
pydantic-ai loop alone, against the same local endpoint, in one run.

Why: issue "Agents that think" puts a budget charge before every model request and
tool call, written to the run's row and fenced by the lease token. That is one
PostgreSQL round trip per request and per tool call, plus the worker's claim, context
and report commit per task. This measures that cost against the model loop it wraps.

What is measured (one process, one database, one scripted endpoint):

* ``worker``: ``--tasks`` admitted tasks of a definition whose agent is the built-in
  ``model`` agent, each run by a real :class:`Worker` (claim, context, lease, the agent,
  budget charges, report commit with its delivery row). The endpoint answers each run
  with one tool call (``read_observation`` of a source in scope) and then the answer:
  2 model requests and 1 tool call per task.
* ``bare``: the same pydantic-ai ``Agent`` (same output type, same tool reading the
  same source, same endpoint, same script), no database.

The two arms alternate in rounds of ``--batch`` runs (these machines are noisy). The
endpoint answers at once, so the figures are the runtime's overhead, not a model's
latency: a real model's seconds per request make it a small fraction.

Usage::

    .venv/bin/python bench/model_agent.py [--tasks 200] [--batch 20] [--dsn DSN]

The DSN defaults to ``DATABASE_URL``; without either, an embedded PostgreSQL is started.
A scratch database ``bench_model_<hex>`` is created and dropped.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _model_server import answer, model_server, tools  # noqa: E402
from api import scratch_database, server_dsn  # noqa: E402
from pydantic_ai import Agent  # noqa: E402
from pydantic_ai.models.openai import OpenAIChatModel  # noqa: E402
from pydantic_ai.output import ToolOutput  # noqa: E402
from pydantic_ai.providers.openai import OpenAIProvider  # noqa: E402
from pydantic_ai.usage import UsageLimits  # noqa: E402

from watchkeeper.runtime import AgentCatalog, FakeClock, ModelAgent, ModelEndpoint, Worker  # noqa: E402
from watchkeeper.runtime.engine import tick  # noqa: E402
from watchkeeper.runtime.engine._model_agent import ModelAnswer  # noqa: E402
from watchkeeper.runtime.store._db import Database  # noqa: E402
from watchkeeper.runtime.usecases import add_user, authenticate, confirm, propose  # noqa: E402
from watchkeeper.sources import CallableSource, SourceRegistry  # noqa: E402
from watchkeeper.triggers import parse_spec  # noqa: E402

START = "2026-06-03T18:00:00+00:00"


def script(runs: int) -> list[Any]:
    steps: list[Any] = []
    for _ in range(runs):
        steps += [tools(("read_observation", {"source": "prices", "subject": "FUNDX"})),
                  answer("# Holdings\n\nFUNDX 4987.50 USD.\n", "normal", "FUNDX steady")]
    return steps


async def admit(db: Database, clock: FakeClock, tasks: int) -> None:
    me = await authenticate(db, await add_user(db, clock, "acme", "alice"))
    spec = parse_spec({"version": 1, "trigger": {"type": "interval", "every": 60,
                                                 "anchor": START},
                       "agent": {"name": "model", "params": {"model": "bench-model",
                                                             "output_usd_per_1k": "0.001"}},
                       "sources": ["prices"], "instructions": "Review FUNDX.", "overrun": "allow",
                       "lateness": {"policy": "catch_up_once"},
                       "limits": {"max_model_requests": 10, "max_tool_attempts": 5,
                                  "max_cost_usd": "1"}})
    proposal = await propose(db, clock, tenant_id="acme", definition_id="d1",
                             owner_user_id="alice", spec=spec, proposed_by="bench")
    await confirm(db, clock, me, definition_id="d1", revision=proposal.revision,
                  spec_hash=proposal.spec_hash)
    admitted = 0
    while admitted < tasks:
        clock.advance(60)
        admitted += (await tick(db, clock)).admitted


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=200)
    parser.add_argument("--batch", type=int, default=20)
    parser.add_argument("--dsn")
    args = parser.parse_args()
    from datetime import datetime
    clock = FakeClock(datetime.fromisoformat(START))
    prices = CallableSource("prices", "1", lambda subject, at: Decimal("4987.50"),
                            unit="USD/share", currency="USD", now=clock.now)
    times: dict[str, list[float]] = {"worker": [], "bare": []}
    with server_dsn(args.dsn) as server, tempfile.TemporaryDirectory() as home:
        async with scratch_database(server) as dsn, Database.open(dsn) as db, \
                model_server(*script(2 * args.tasks)) as endpoint:
            await admit(db, clock, args.tasks)
            catalog = AgentCatalog()
            catalog.add("model", ModelAgent(ModelEndpoint(endpoint.base_url, "k")))
            worker = Worker(db, clock, catalog, worker_id="bench", artifact_root=Path(home),
                            sources=SourceRegistry([prices]))

            async def read_observation(source: str, subject: str) -> dict[str, Any]:
                """Read one observation."""
                return (await prices.read(subject, clock.now())).to_json()

            bare = Agent(OpenAIChatModel("bench-model", provider=OpenAIProvider(
                base_url=endpoint.base_url, api_key="k")), output_type=ToolOutput(ModelAnswer),
                instructions="bench", tools=[read_observation])
            done = 0
            while done < args.tasks:
                n = min(args.batch, args.tasks - done)
                t0 = time.perf_counter()
                for _ in range(n):
                    outcome = await worker.run_once()
                    assert outcome is not None and outcome.status == "completed", outcome
                times["worker"].append((time.perf_counter() - t0) / n)
                t0 = time.perf_counter()
                for _ in range(n):
                    await bare.run("Review FUNDX.", usage_limits=UsageLimits(request_limit=None))
                times["bare"].append((time.perf_counter() - t0) / n)
                done += n
            charged = await db.pool.fetchval(
                "SELECT sum((usage->>'model_requests')::int) FROM runs")
    w, b = statistics.median(times["worker"]), statistics.median(times["bare"])
    print(f"tasks: {args.tasks} in batches of {args.batch}; each 2 model requests + 1 tool call")
    print(f"worker + model agent: median {w * 1000:.1f} ms per task "
          f"(batches: {', '.join(f'{x * 1000:.1f}' for x in times['worker'])})")
    print(f"bare pydantic-ai:     median {b * 1000:.1f} ms per run "
          f"(batches: {', '.join(f'{x * 1000:.1f}' for x in times['bare'])})")
    print(f"ratio worker/bare: {w / b:.2f}; overhead {1000 * (w - b):.1f} ms per task, "
          f"{1000 * (w - b) / 3:.1f} ms per charged request or tool call")
    print(f"model requests charged on run rows: {charged} (expected {2 * args.tasks})")


if __name__ == "__main__":
    asyncio.run(main())
