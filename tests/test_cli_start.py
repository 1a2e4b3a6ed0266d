"""The command line starts at once: each command imports only what it uses.

Each test runs ``python -m watchkeeper ...`` in a subprocess and reads the modules it
had imported when it ended (``sys.modules``). Speed itself is measured by
``bench/cli_start.py``, never here.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from watchkeeper.runtime.doors import cli
from watchkeeper.runtime.store._db import Database

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

SERVING = frozenset({"fastapi", "starlette", "uvicorn", "sse_starlette", "mcp", "pydantic_ai",
                     "openai", "jinja2", "prometheus_client"})
"""What only serving (serve, mcp) or running a model needs: the HTTP server, the API
framework, the MCP SDK, the model client, the page's templates, metrics."""
OFFLINE = SERVING | {"asyncpg", "httpx", "pydantic_settings"}
"""What a command that never opens the database or the network does not need either (the
settings are read without pydantic-settings)."""
CLI = "watchkeeper.runtime.doors.cli"

# Runs the module as ``python -m watchkeeper`` does, then writes, also when the command
# exits non-zero, the names of the modules imported by its end and the garbage
# collector's state to a file.
_WRAPPER = """
import gc, json, os, runpy, sys
target, *args = sys.argv[1:]
sys.argv = ["watchkeeper", *args]
try:
    runpy.run_module("watchkeeper", run_name="__main__", alter_sys=True)
finally:
    with open(target, "w") as f:
        json.dump({"modules": sorted(sys.modules), "gc": gc.isenabled(),
                   "frozen": gc.get_freeze_count(),
                   "plugins_off": os.environ.get("PYDANTIC_DISABLE_PLUGINS")}, f)
"""


async def cli_probe(*args: str, home: Path, dsn: str | None = None
                    ) -> tuple[int, str, str, dict[str, Any]]:
    """Run ``watchkeeper ARGS``; its exit code, stdout, stderr and what the wrapper wrote
    at its end (``modules``, ``gc``, ``frozen``)."""
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env["WATCHKEEPER_HOME"] = str(home)
    env["COLUMNS"] = "200"
    if dsn is not None:
        env["DATABASE_URL"] = dsn
    target = home / "probe.json"
    result = await anyio.run_process([sys.executable, "-c", _WRAPPER, str(target), *args],
                                     env=env, check=False)
    return (result.returncode, result.stdout.decode(), result.stderr.decode(),
            json.loads(target.read_text()))


async def cli_modules(*args: str, home: Path, dsn: str | None = None
                      ) -> tuple[int, str, str, set[str]]:
    """Run ``watchkeeper ARGS``; its exit code, stdout, stderr and the modules it imported:
    each module's name and each top-level package's."""
    code, out, err, probe = await cli_probe(*args, home=home, dsn=dsn)
    names = set(probe["modules"])
    return code, out, err, names | {name.split(".", 1)[0] for name in names}


def command_modules(modules: set[str]) -> set[str]:
    """The CLI's command modules among ``modules`` (``_definitions``, ``_views``, ...)."""
    return {name.removeprefix(f"{CLI}.") for name in modules} & set(cli.COMMANDS)


@pytest.mark.anyio
async def test_help_imports_no_server_database_or_model(tmp_path: Path) -> None:
    """``--help`` lists every command without importing the API, MCP, the model client,
    the database driver or the spec models."""
    code, out, _, modules = await cli_modules("--help", home=tmp_path)
    assert code == 0
    assert "preview" in out and "serve" in out and "keys" in out
    assert modules & (OFFLINE | {"pydantic_settings", "watchkeeper.triggers._spec"}) == set()
    assert command_modules(modules) == set(cli.COMMANDS)  # all of them, to list them
    assert {"typer", "watchkeeper"} <= modules  # the probe sees what the command imported


@pytest.mark.anyio
@pytest.mark.parametrize("command", ["history", "serve", "mcp", "run", "replay", "keys"])
async def test_a_commands_help_imports_no_server_database_or_model(tmp_path: Path,
                                                                   command: str) -> None:
    """A command's own ``--help`` (even serve's and mcp's) imports none of it either."""
    code, out, _, modules = await cli_modules(command, "--help", home=tmp_path)
    assert code == 0
    assert f" {command} [OPTIONS]" in out
    assert modules & OFFLINE == set()
    assert command_modules(modules) <= {"_running", next(
        module for module, names in cli.COMMANDS.items() if command in names)}


@pytest.mark.anyio
async def test_preview_of_a_spec_file_imports_only_the_core(tmp_path: Path) -> None:
    """``preview SPEC`` reads the file and computes occurrences: the pure core, typer and
    rich; no database driver, HTTP client, server, MCP or model, nor another command's
    module."""
    code, out, err, modules = await cli_modules(
        "preview", str(EXAMPLES / "holdings_review.toml"), "--after", "2026-12-01",
        "--count", "2", "--json", home=tmp_path)
    assert (code, err) == (0, "")
    assert [item["slot"] for item in json.loads(out)] == [
        "2026-12-02T20:00[Europe/Paris]", "2026-12-09T20:00[Europe/Paris]"]
    assert modules & OFFLINE == set()
    assert command_modules(modules) == {"_definitions"}


@pytest.mark.anyio
async def test_preview_as_a_table_and_its_errors_import_only_the_core(tmp_path: Path) -> None:
    """The table (rich) and a refused schedule (exit 2) stay on the core as well."""
    code, out, _, modules = await cli_modules(
        "preview", "--cron", "0 9 * * 1", "--tz", "Europe/London", "--after", "2026-12-01",
        "--count", "1", home=tmp_path)
    assert code == 0
    assert "2026-12-07T09:00[Europe/London]" in out
    assert modules & OFFLINE == set()
    code, _, err, modules = await cli_modules("preview", "--cron", "0 9 * * 1", "--tz",
                                              "Mars/Base", home=tmp_path)
    assert code == 2
    assert "unknown time zone 'Mars/Base'" in " ".join(err.split())
    assert modules & OFFLINE == set()


@pytest.mark.anyio
async def test_database_commands_import_no_server_or_model(db: Database, db_dsn: str,
                                                           tmp_path: Path) -> None:
    """users add, propose, list and history open the database (asyncpg) but import
    neither the API, MCP, templates, metrics nor the model client."""
    steps = [("users", "add", "demo", "alice"),
             ("propose", str(EXAMPLES / "holdings_review.toml"), "--tenant", "demo", "--id",
              "holdings", "--owner", "alice", "--json"),
             ("list", "--tenant", "demo"),
             ("history", "holdings", "--tenant", "demo", "--json")]
    for args in steps:
        code, _, err, modules = await cli_modules(*args, home=tmp_path, dsn=db_dsn)
        assert code == 0, err
        assert "asyncpg" in modules
        assert modules & SERVING == set(), args
    assert await db.pool.fetchval("SELECT count(*) FROM definition_revisions") == 1


def test_commands_names_the_module_of_every_command() -> None:
    """cli.COMMANDS, which ``main`` reads to import only the invoked command's module,
    names each command and group where it is registered, and no other."""
    app = cli.commands()  # every module
    found: dict[str, set[str]] = {}
    for command in app.registered_commands:
        found.setdefault(command.callback.__module__.removeprefix(f"{CLI}."), set()).add(
            command.name)
    for group in app.registered_groups:
        (module,) = {c.callback.__module__.removeprefix(f"{CLI}.")
                     for c in group.typer_instance.registered_commands}
        found.setdefault(module, set()).add(group.name)
    assert found == {module: set(names) for module, names in cli.COMMANDS.items()}
    assert sum(len(names) for names in cli.COMMANDS.values()) == len(
        {name for names in cli.COMMANDS.values() for name in names})


def test_the_app_of_one_command_reads_its_command_line_as_the_full_app_does() -> None:
    """``commands(args)`` builds only the command ``args`` names; that app prints the
    same help, usage errors and output for it as the app with every command (typer
    would read a lone command's name as its first argument without the callback that
    keeps the app a group)."""
    from typer.testing import CliRunner

    runner = CliRunner()
    full = cli.commands()
    names = [name for names in cli.COMMANDS.values() for name in names]
    for name in names:
        one = cli.commands([name])
        assert [c.name for c in one.registered_commands] + [
            g.name for g in one.registered_groups] == [name]
        for args in ([name, "--help"], [name, "--no-such-option"]):
            alone, every = runner.invoke(one, args), runner.invoke(full, args)
            assert (alone.exit_code, alone.output) == (every.exit_code, every.output), args
    args = ["preview", "--cron", "0 9 * * 1", "--tz", "Europe/London", "--after",
            "2026-12-01T00:00:00Z", "--count", "2", "--json"]
    alone = runner.invoke(cli.commands(args), args)
    assert alone.exit_code == 0
    assert "PYDANTIC_DISABLE_PLUGINS" not in os.environ  # set by main() alone, for its process
    assert [item["slot"] for item in json.loads(alone.output)] == [
        "2026-12-07T09:00[Europe/London]", "2026-12-14T09:00[Europe/London]"]
    assert cli.commands(["no-such-command"]) is full


@pytest.mark.anyio
async def test_the_collector_is_off_while_a_command_starts_and_on_when_it_runs_long(
        db: Database, db_dsn: str, tmp_path: Path) -> None:
    """``preview`` ends with Python's garbage collector off and without the logging
    module; a command that opens the database turns the collector back on (what the
    start built frozen out of collections) and logs."""
    states = {}
    for args, dsn in ((("preview", "--cron", "0 9 * * 1", "--tz", "UTC"), None),
                      (("users", "add", "demo", "alice"), db_dsn)):
        code, _, err, probe = await cli_probe(*args, home=tmp_path, dsn=dsn)
        assert code == 0, err
        states[args[0]] = probe
    assert (states["preview"]["gc"], states["preview"]["frozen"]) == (False, 0)
    assert "logging" not in states["preview"]["modules"]
    assert states["preview"]["plugins_off"] == "__all__"  # no plugin scan: nothing to serve
    assert states["users"]["gc"] is True and states["users"]["frozen"] > 10_000
    assert "logging" in states["users"]["modules"]
    assert states["users"]["plugins_off"] is None
