"""The ``watchkeeper`` command line (typer + rich): a door onto the use cases.

One module per command group: ``_definitions`` (preview, propose, confirm, pause,
resume, cancel, trigger, review, register), ``_views`` (users, status, list, show,
report, history, polls), ``_outbox`` (webhooks, prefs, deliveries, redeliver,
receiver), ``_running`` (run, tick, replay, replays prune, demo, db migrate), ``_serve``
(serve, keys), ``_mcp`` (mcp: the MCP tools over stdio); what
they share is in ``_app`` (exit codes, settings, JSON, instants), option parsing of
Python objects in ``_loading``, rich tables in ``_render``, the scripted demo in
``_demo``.

Exit codes: 0 ok; 1 runtime failure; 2 bad input (spec, option, file or setting: the
message names the field and the fix); 3 not found; 4 not authorized; 5 conflict with
the current state; 6 the database is unreachable.
"""

from . import _definitions, _mcp, _outbox, _running, _serve, _views  # noqa: F401  (register the commands)
from ._app import app as app
from ._app import main as main

__all__ = ["app", "main"]
