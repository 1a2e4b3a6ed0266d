"""The ``watchkeeper`` command line (typer + rich): a door onto the use cases.

One module per command group: ``_definitions`` (preview, propose, confirm, pause,
resume, cancel, trigger, review, register), ``_views`` (users, status, list, show,
report, history, polls), ``_outbox`` (webhooks, prefs, deliveries, redeliver,
receiver), ``_running`` (run, tick, replay, replays prune, demo, db migrate), ``_serve``
(serve, keys; the HTTP server itself in ``_server``, imported by serve alone), ``_mcp``
(mcp: the MCP tools over stdio); what
they share is in ``_app`` (exit codes, settings, JSON, instants), option parsing of
Python objects in ``_loading``, rich tables in ``_render``, the scripted demo in
``_demo``.

``main`` imports the module of the command it runs (:data:`COMMANDS`), and that module
the rest (the database, the supervisor, the HTTP server) inside the command's function:
``--help``, ``preview`` and the other commands import only what they use.

Exit codes: 0 ok; 1 runtime failure; 2 bad input (spec, option, file or setting: the
message names the field and the fix); 3 not found; 4 not authorized; 5 conflict with
the current state; 6 the database is unreachable.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from . import _app

if TYPE_CHECKING:
    import typer

    from ._app import app as app

__all__ = ["app", "commands", "main"]

COMMANDS = {
    "_definitions": ("preview", "propose", "confirm", "pause", "resume", "cancel", "trigger",
                     "review", "register"),
    "_mcp": ("mcp",),
    "_outbox": ("deliveries", "redeliver", "receiver", "webhooks", "prefs", "secrets"),
    "_running": ("run", "tick", "replay", "demo", "db", "replays"),
    "_serve": ("serve", "keys"),
    "_views": ("status", "list", "show", "report", "history", "polls", "users"),
}
"""The module that registers each command (or a group's commands), imported in this
order for ``--help`` (``tests/test_cli_start.py`` checks it against what they register)."""


def commands(args: Sequence[str] | None = None) -> typer.Typer:
    """The app, with the commands ``args`` (a command line) can run registered: the
    module of the command it names, or every module when it names none (``--help``, no
    arguments, a mistyped name) or ``args`` is ``None``.

    The command is the first argument: the app takes no option but ``--help`` before it.
    Typer still parses the whole command line; this only spares a command the import of
    the others' modules and typer the building of their parameters.
    """
    first = args[0] if args else None
    chosen = [module for module, names in COMMANDS.items() if first in names] or list(COMMANDS)
    for module in chosen:
        importlib.import_module(f"{__name__}.{module}")
    return _app.app


def main() -> None:
    """Entry point of the ``watchkeeper`` script (and ``python -m watchkeeper``)."""
    commands(sys.argv[1:])
    _app.main()


def __getattr__(name: str) -> object:
    if name == "app":  # every command registered, as before
        return commands()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
