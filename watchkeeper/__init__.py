"""watchkeeper keeps the standing agreements people make with their AI agents.

This is the front door for an application that embeds watchkeeper in-process (the
README's "Python API" shows a complete integration). Its packages:

* :mod:`watchkeeper.triggers` — the pure core: specs, calendars, DST, lateness,
  three-valued conditions (no I/O, no clock reads);
* :mod:`watchkeeper.sources` — read-only, versioned observation sources;
* :mod:`watchkeeper.outbox` — the notification outbox and its channels;
* :mod:`watchkeeper.runtime` — the PostgreSQL store, the engine (supervisor, tick,
  workers), the use cases every door calls, and the doors (the CLI).

What is here, by the order an app meets it:

* opening the store: :func:`load_settings` -> :class:`Settings` (from the
  environment; bad variables raise :class:`ConfigError`), :func:`database_server`
  (``DATABASE_URL`` or the embedded PostgreSQL), :class:`Database`;
* users and principals: :func:`add_user` (returns the token, shown once),
  :func:`authenticate`, :class:`UserPrincipal`, :data:`OPERATOR`;
* the agreement: :func:`parse_spec` -> :class:`Spec` (``spec_hash``, ``effective()``),
  :func:`preview`, :func:`propose` -> :class:`Proposal`, :func:`confirm` (the owner,
  presenting the hash), :func:`pause`, :func:`resume`, :func:`cancel`,
  :func:`trigger_now`, :func:`review`;
* running it: :class:`Supervisor` with :class:`SupervisorConfig` and an
  :class:`AgentCatalog` of :class:`AgentRunner` objects (``run(ctx: AgentContext) ->
  AgentResult``); operator schedules: :class:`ScheduleDef`, :class:`Registry`,
  :func:`register`; condition sources: :class:`Source`, :class:`Observation`;
* reading what happened: :func:`history` with :class:`HistoryQuery` (keyset pages),
  :func:`report` (a task's committed markdown and its receipt);
* errors: :class:`WatchkeeperError` and its subclasses :class:`NotFound`,
  :class:`Conflict`, :class:`AuthError`, :class:`ConfigError`,
  :class:`DatabaseUnavailable`; bad specs raise :class:`SpecError` (a ``ValueError``)
  naming each field and its fix.

Each name is imported on first use (PEP 562): ``import watchkeeper`` alone imports
none of the runtime, and ``from watchkeeper import parse_spec`` only the pure core.
"""

from typing import TYPE_CHECKING

from watchkeeper._lazy import lazy_exports

if TYPE_CHECKING:
    from watchkeeper.runtime import OPERATOR as OPERATOR
    from watchkeeper.runtime import AgentCatalog as AgentCatalog
    from watchkeeper.runtime import AgentContext as AgentContext
    from watchkeeper.runtime import AgentResult as AgentResult
    from watchkeeper.runtime import AgentRunner as AgentRunner
    from watchkeeper.runtime import AuthError as AuthError
    from watchkeeper.runtime import Clock as Clock
    from watchkeeper.runtime import ConfigError as ConfigError
    from watchkeeper.runtime import Conflict as Conflict
    from watchkeeper.runtime import Database as Database
    from watchkeeper.runtime import DatabaseUnavailable as DatabaseUnavailable
    from watchkeeper.runtime import FakeClock as FakeClock
    from watchkeeper.runtime import HistoryQuery as HistoryQuery
    from watchkeeper.runtime import NotFound as NotFound
    from watchkeeper.runtime import Registry as Registry
    from watchkeeper.runtime import ScheduleDef as ScheduleDef
    from watchkeeper.runtime import Settings as Settings
    from watchkeeper.runtime import Supervisor as Supervisor
    from watchkeeper.runtime import SupervisorConfig as SupervisorConfig
    from watchkeeper.runtime import SystemClock as SystemClock
    from watchkeeper.runtime import Usage as Usage
    from watchkeeper.runtime import UserPrincipal as UserPrincipal
    from watchkeeper.runtime import WatchkeeperError as WatchkeeperError
    from watchkeeper.runtime import add_user as add_user
    from watchkeeper.runtime import authenticate as authenticate
    from watchkeeper.runtime import cancel as cancel
    from watchkeeper.runtime import confirm as confirm
    from watchkeeper.runtime import history as history
    from watchkeeper.runtime import load_settings as load_settings
    from watchkeeper.runtime import pause as pause
    from watchkeeper.runtime import propose as propose
    from watchkeeper.runtime import register as register
    from watchkeeper.runtime import resume as resume
    from watchkeeper.runtime import review as review
    from watchkeeper.runtime import trigger_now as trigger_now
    from watchkeeper.runtime.usecases import Proposal as Proposal
    from watchkeeper.runtime.usecases import database_server as database_server
    from watchkeeper.runtime.usecases import report as report
    from watchkeeper.sources import Source as Source
    from watchkeeper.triggers import Importance as Importance
    from watchkeeper.triggers import Observation as Observation
    from watchkeeper.triggers import Spec as Spec
    from watchkeeper.triggers import SpecError as SpecError
    from watchkeeper.triggers import parse_spec as parse_spec
    from watchkeeper.triggers import preview as preview

__all__ = [
    "OPERATOR", "AgentCatalog", "AgentContext", "AgentResult", "AgentRunner", "AuthError",
    "Clock", "ConfigError", "Conflict", "Database", "DatabaseUnavailable", "FakeClock",
    "HistoryQuery", "NotFound", "Registry", "ScheduleDef", "Settings", "Supervisor",
    "SupervisorConfig", "SystemClock", "Usage", "UserPrincipal", "WatchkeeperError", "add_user",
    "authenticate", "load_settings", "cancel", "confirm", "history", "pause", "propose", "register", "resume",
    "review", "trigger_now", "Proposal", "database_server", "report", "Source", "Importance",
    "Observation", "Spec", "SpecError", "parse_spec", "preview",
]

__getattr__, __dir__ = lazy_exports(__name__, globals(), {
    "watchkeeper.runtime": (
        "OPERATOR", "AgentCatalog", "AgentContext", "AgentResult", "AgentRunner", "AuthError",
        "Clock", "ConfigError", "Conflict", "Database", "DatabaseUnavailable", "FakeClock",
        "HistoryQuery", "NotFound", "Registry", "ScheduleDef", "Settings", "Supervisor",
        "SupervisorConfig", "SystemClock", "Usage", "UserPrincipal", "WatchkeeperError",
        "add_user", "authenticate", "cancel", "confirm", "history", "load_settings", "pause",
        "propose", "register", "resume", "review", "trigger_now",
    ),
    "watchkeeper.runtime.usecases": (
        "Proposal", "database_server", "report",
    ),
    "watchkeeper.sources": (
        "Source",
    ),
    "watchkeeper.triggers": (
        "Importance", "Observation", "Spec", "SpecError", "parse_spec", "preview",
    ),
})
