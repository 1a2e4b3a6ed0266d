"""``watchkeeper serve`` (the HTTP API and the MCP tools at ``/mcp``, with the supervisor
unless ``--no-supervisor``) and ``watchkeeper keys`` (API keys and the tick secret).

``serve`` imports the server (``_server``: uvicorn, the API, the MCP SDK) when it runs,
not when the CLI starts."""

from __future__ import annotations

import logging
import signal
from typing import TYPE_CHECKING, Annotated

import typer

from watchkeeper.runtime import usecases as uc

from ._app import app, emit_json, err, keys_app, out, with_db, write
from ._loading import agents_from, schedules_from, sources_from
from ._running import shutdown_note

if TYPE_CHECKING:
    import uvicorn

    from watchkeeper.runtime import Database, Settings, Supervisor

__all__: list[str] = []


_AGENTS_HELP = "module:attr with a dict of name -> Python agent (async run(ctx))."


@app.command("serve")
def serve_cmd(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port (0: any free one).")] = 8000,
    supervisor: Annotated[bool, typer.Option(help="Also run the supervisor (tick, poller, "
                                             "workers, outbox); --no-supervisor for API-only "
                                             "replicas.")] = True,
    workers: Annotated[int | None, typer.Option(min=1, max=64)] = None,
    schedules: Annotated[str | None, typer.Option(help="module:attr with operator ScheduleDefs.")] = None,
    agent: Annotated[list[str], typer.Option(help="NAME=COMMAND: a command agent.")] = [],  # noqa: B006
    agents: Annotated[str | None, typer.Option(help=_AGENTS_HELP)] = None,
    sources: Annotated[str | None, typer.Option(help="module:attr with condition sources.")] = None,
    series: Annotated[list[str], typer.Option(help="NAME[@VERSION]=CSV: a series source.")] = [],  # noqa: B006
) -> None:
    """Serve the HTTP API (OpenAPI at /openapi.json, docs at /docs) and the MCP tools
    (streamable HTTP at /mcp, Bearer agent key) and, by default, run the supervisor in
    the same process, until SIGTERM / SIGINT (the supervisor drains as in ``run``).
    Started while the database is unreachable, it serves at once (/readyz: 503,
    ``database: unreachable``) and the supervisor starts once the database answers."""
    import anyio
    import uvicorn

    from watchkeeper.runtime import Supervisor, SystemClock
    from watchkeeper.runtime.doors.api import Services, create_app

    from ._server import Server

    registry, catalog = schedules_from(schedules), agents_from(agent, agents)
    found = sources_from(sources, series)

    async def run(db: Database, config: Settings) -> Supervisor | None:
        async with uc.read_standby(db, config):  # DATABASE_READ_URL: the doors' reads
            return await serving(db, config)

    async def serving(db: Database, config: Settings) -> Supervisor | None:
        clock = SystemClock()
        engine = Supervisor(db, clock, uc.supervisor_config(config, workers=workers),
                            registry=registry, agents=catalog, sources=found) if supervisor else None
        # the API decides on PostgreSQL's time too (a manual occurrence's not_before,
        # the tick route): the supervisor's anchored clock, or one of its own (sampled
        # as soon as the database answers: it may not yet)
        api_clock = (engine.clock if engine is not None
                     else await uc.database_clock(db, clock, sample=False))
        api = create_app(Services(db, api_clock, config, agents=catalog, sources=found),
                         supervisor=engine, mcp=True)
        # lifespan on: the app's lifespan runs the MCP session manager
        server = Server(uvicorn.Config(api, host=host, port=port, log_level="warning",
                                        lifespan="on", access_log=False))
        async with anyio.create_task_group() as outer:
            outer.start_soon(_stop_on_signal, server, engine)
            async with anyio.create_task_group() as tg:
                tg.start_soon(server.run_until_stopped)
                if engine is not None:
                    tg.start_soon(engine.run)
                else:
                    outer.start_soon(uc.keep_database_clock, db, api_clock)
                await server.settled.wait()
                if not server.started:
                    return None  # run_until_stopped raises why
                bound = [s.getsockname() for srv in server.servers for s in srv.sockets]
                where = ", ".join(f"http://{h}:{p}" for h, p, *_ in bound) or f"{host}:{port}"
                err.print(f"serving {where} (history page at /, docs at /docs, MCP at /mcp)"
                          + (f"; supervisor {engine.config.supervisor_id}" if engine else
                             "; no supervisor") + "; Ctrl-C to stop")
            outer.cancel_scope.cancel()  # the server and the supervisor have stopped
        return engine
    logging.getLogger("watchkeeper").setLevel(logging.INFO)
    engine = with_db(run, wait=True)
    report = engine.drain_report() if engine is not None else None
    if report is not None:
        err.print(report.summary(), highlight=False)
    err.print("stopped")


async def _stop_on_signal(server: uvicorn.Server, engine: Supervisor | None) -> None:
    """First SIGTERM/SIGINT: stop accepting, finish in-flight requests, drain the
    supervisor; a second one: stop the server at once and interrupt the supervisor's runs
    (each signal takes the supervisor one step on, as in ``run``)."""
    import anyio

    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for signum in signals:
            if engine is not None:
                err.print(shutdown_note(engine), highlight=False)
            if server.should_exit:
                server.force_exit = True
                continue
            err.print("stopping...")
            # uvicorn's own handler sets should_exit; sse-starlette wraps it to end the
            # open event streams (an MCP session's GET stream) instead of waiting on them
            server.handle_exit(signum, None)


@keys_app.command("create")
def keys_create(
    kind: Annotated[str, typer.Argument(help="agent, app, operator or tick.")],
    tenant: Annotated[str | None, typer.Option(help="The key's tenant (none for tick).")] = None,
    name: Annotated[str, typer.Option(help="A name to recognise it by.")] = "default",
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Create an API key and print it once (stored as a SHA-256 digest)."""
    from watchkeeper.runtime import SystemClock

    async def run(db: Database, _: Settings) -> uc.NewKey:
        return await uc.create_key(db, SystemClock(), kind, tenant_id=tenant, name=name)
    made = with_db(run)
    if as_json:
        emit_json({"key_id": made.key.key_id, "kind": made.key.kind.value,
                   "tenant_id": made.key.tenant_id, "name": made.key.name, "token": made.token})
        return
    where = f" of tenant {made.key.tenant_id}" if made.key.tenant_id else ""
    err.print(f"{made.key.kind.value} key {made.key.key_id}{where} (shown once on stdout, keep it "
              "secret):")
    write(made.token + "\n")


@keys_app.command("list")
def keys_list(tenant: Annotated[str | None, typer.Option()] = None,
              as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """List API keys (never their secrets)."""
    async def run(db: Database, _: Settings) -> list[uc.ApiKey]:
        return await uc.list_keys(db, tenant)
    rows = with_db(run)
    if as_json:
        emit_json([{"key_id": k.key_id, "kind": k.kind.value, "tenant_id": k.tenant_id,
                    "name": k.name, "created_at": k.created_at, "created_by": k.created_by,
                    "revoked_at": k.revoked_at, "last_used_at": k.last_used_at} for k in rows])
        return
    for k in rows:
        state = "revoked" if k.revoked_at else "active"
        out.print(f"{k.key_id}  {k.kind.value:<8} {k.tenant_id or '-':<16} {k.name}  {state}")


@keys_app.command("revoke")
def keys_revoke(key_id: str, tenant: Annotated[str | None, typer.Option()] = None) -> None:
    """Revoke a key at once (its next request is 401)."""
    from watchkeeper.runtime import SystemClock

    async def run(db: Database, _: Settings) -> None:
        await uc.revoke_key(db, SystemClock(), key_id, tenant_id=tenant)
    with_db(run)
    out.print(f"revoked {key_id}")
