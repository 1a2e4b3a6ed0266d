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
``--help``, ``preview`` and the other commands import only what they use. Typer builds
only the command named (:func:`commands`), and the start runs with Python's cyclic
garbage collector off (:func:`main`).

Exit codes: 0 ok; 1 runtime failure; 2 bad input (spec, option, file or setting: the
message names the field and the fix); 3 not found; 4 not authorized; 5 conflict with
the current state; 6 the database is unreachable.
"""

from __future__ import annotations

import copy
import gc
import importlib
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import typer

    from ._app import app as app

__all__ = ["COMMANDS", "OFFLINE", "app", "commands", "main"]

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


OFFLINE = frozenset({"preview"})
"""Commands that open no database, serve nothing and start no process: nothing of
theirs logs, and they start without importing :mod:`logging` (``--help`` and a mistyped
command neither) or looking for pydantic plugins."""


def commands(args: Sequence[str] | None = None) -> typer.Typer:
    """The app that runs ``args`` (a command line): when its first argument names a
    command (or a group: ``users``, ``keys``, ...), a copy of the app holding that one
    command, its module alone imported; else (``--help``, no arguments, a mistyped name,
    or ``args`` is ``None``) the app with every command.

    The command is the first argument: the app takes no option but ``--help`` before it.
    Typer still parses the whole command line and prints the same help and usage for
    the command; this only spares a command the import of the others' modules and typer
    the building of their parameters (all of a module's commands: 13 ms of a 0.3 s
    ``preview``, bench/cli_start.py).
    """
    from . import _app

    first = args[0] if args else None
    chosen = [module for module, names in COMMANDS.items() if first in names]
    for module in chosen or COMMANDS:
        importlib.import_module(f"{__name__}.{module}")
    if not chosen:
        return _app.app
    one = copy.copy(_app.app)  # the same settings and help; only the named command
    one.registered_commands = [c for c in _app.app.registered_commands if c.name == first]
    one.registered_groups = [g for g in _app.app.registered_groups if g.name == first]
    # a callback keeps it a group, as typer documents: an app of one command would take
    # the command's name for its first argument
    one.callback()(_group)
    return one


def _group() -> None:
    """Keep watchkeeper's agreements with AI agents."""


def main() -> None:
    """Entry point of the ``watchkeeper`` script (and ``python -m watchkeeper``).

    Python's cyclic garbage collector stays off while the command starts: the imports
    build hundreds of thousands of objects that live as long as the process, and
    collecting while they are made cost ``preview`` about 5 % of its start. A command
    that opens the database or serves turns it back on first (:func:`_app.collect`);
    ``--help`` and ``preview`` end with it off (what they make is bounded: at most 10,000
    occurrences).
    """
    gc.disable()
    from . import _app

    args = sys.argv[1:]
    first = args[0] if args else None
    named = any(first in names for names in COMMANDS.values())
    if first in OFFLINE:
        # pure computation in a process that starts nothing else: pydantic need not look
        # for plugins among every installed package (a read of each one's entry points,
        # about 10 ms; typer does the same for its own models); an operator's own
        # setting of the variable is kept
        os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    _app.main(commands(args), logs=named and first not in OFFLINE)


def __getattr__(name: str) -> object:
    if name == "app":  # every command registered, as before
        return commands()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
