"""watchkeeper's runtime: the rooms around a PostgreSQL store.

::

    runtime/
      _errors.py   the exception tree (below), shared by every room
      _settings.py settings from the environment
      store/       connection, named queries, migrations, embedded server
      engine/      tick, admission, poller, workers, supervisor, effects, agents
      usecases/    propose, confirm, pause, trigger, review, history, webhooks, ...
      doors/       one folder per way in: cli/ (the HTTP API, MCP and a page next)

Dependencies point down: doors -> use cases -> engine -> store (import-linter
contracts in ``pyproject.toml``). This module is the runtime's front door: what an
application embedding watchkeeper, or a door, needs. The errors are imported with it;
every other name on first use (``watchkeeper._lazy``), so that importing a name costs only its own
module: the settings do not bring the database driver, nor the errors the supervisor.

Errors::

    WatchkeeperError
    ├── ConfigError
    ├── NotFound
    ├── Conflict
    ├── AuthError
    │   └── Forbidden
    ├── DatabaseUnavailable       (retryable)
    │   ├── CommitOutcomeUnknown  .backend_pid .backend_start
    │   └── LockStall             .setting
    ├── StaleLease
    ├── EffectOutcomeUnknown      .effect_key
    ├── AgentError                .retryable
    ├── BudgetExceeded            (never retried)
    ├── StoreError
    └── LoopDied                  .loop

asyncpg errors never leave this package.
"""

from typing import TYPE_CHECKING

from watchkeeper._lazy import lazy_exports

from ._errors import AgentError as AgentError
from ._errors import AuthError as AuthError
from ._errors import BudgetExceeded as BudgetExceeded
from ._errors import CommitOutcomeUnknown as CommitOutcomeUnknown
from ._errors import ConfigError as ConfigError
from ._errors import Conflict as Conflict
from ._errors import DatabaseUnavailable as DatabaseUnavailable
from ._errors import EffectOutcomeUnknown as EffectOutcomeUnknown
from ._errors import Forbidden as Forbidden
from ._errors import LockStall as LockStall
from ._errors import NotFound as NotFound
from ._errors import StaleLease as StaleLease
from ._errors import WatchkeeperError as WatchkeeperError

if TYPE_CHECKING:
    from ._settings import Settings as Settings
    from ._settings import load_settings as load_settings
    from ._settings import load_units_file as load_units_file
    from .engine import AgentCatalog as AgentCatalog
    from .engine import AgentContext as AgentContext
    from .engine import AgentResult as AgentResult
    from .engine import AgentRunner as AgentRunner
    from .engine import Clock as Clock
    from .engine import CommandAgent as CommandAgent
    from .engine import Continuation as Continuation
    from .engine import DigestAgent as DigestAgent
    from .engine import DrainReport as DrainReport
    from .engine import EffectGate as EffectGate
    from .engine import EffectNotApplied as EffectNotApplied
    from .engine import FakeClock as FakeClock
    from .engine import LoopDied as LoopDied
    from .engine import ModelAgent as ModelAgent
    from .engine import ModelEndpoint as ModelEndpoint
    from .engine import Registry as Registry
    from .engine import RunContext as RunContext
    from .engine import ScheduleDef as ScheduleDef
    from .engine import Shutdown as Shutdown
    from .engine import Supervisor as Supervisor
    from .engine import SupervisorConfig as SupervisorConfig
    from .engine import SupervisorStatistics as SupervisorStatistics
    from .engine import SystemClock as SystemClock
    from .engine import Usage as Usage
    from .engine import Worker as Worker
    from .engine import register as register
    from .engine import tick as tick
    from .store import Database as Database
    from .store import EmbeddedPostgresError as EmbeddedPostgresError
    from .store import StoreError as StoreError
    from .store import embedded_postgres as embedded_postgres
    from .usecases import OPERATOR as OPERATOR
    from .usecases import HistoryQuery as HistoryQuery
    from .usecases import UserPrincipal as UserPrincipal
    from .usecases import add_user as add_user
    from .usecases import authenticate as authenticate
    from .usecases import cancel as cancel
    from .usecases import confirm as confirm
    from .usecases import history as history
    from .usecases import pause as pause
    from .usecases import propose as propose
    from .usecases import resume as resume
    from .usecases import review as review
    from .usecases import trigger_now as trigger_now
    from .usecases import unclaimable_tasks as unclaimable_tasks

__all__ = [
    "AgentCatalog", "AgentContext", "AgentResult", "AgentRunner", "CommandAgent", "DigestAgent",
    "Usage", "Clock", "FakeClock", "SystemClock", "Database", "StoreError",
    "OPERATOR", "UserPrincipal", "add_user", "authenticate", "cancel", "confirm", "pause",
    "propose", "resume", "EmbeddedPostgresError", "embedded_postgres", "AgentError", "AuthError",
    "Forbidden",
    "BudgetExceeded", "CommitOutcomeUnknown", "ConfigError", "Conflict", "DatabaseUnavailable",
    "LockStall",
    "EffectOutcomeUnknown", "EffectGate", "EffectNotApplied", "NotFound", "StaleLease",
    "WatchkeeperError", "HistoryQuery",
    "history", "review", "trigger_now", "Registry", "RunContext", "ScheduleDef", "register",
    "tick", "Settings", "LoopDied", "DrainReport", "Shutdown", "Supervisor", "SupervisorConfig",
    "SupervisorStatistics",
    "Worker", "unclaimable_tasks", "load_units_file", "load_settings", "Continuation",
    "ModelAgent", "ModelEndpoint",
]


# Imported on first use (see watchkeeper._lazy): the engine and the store bring the database driver,
# the supervisor and the outbox; the settings, pydantic.
__getattr__, __dir__ = lazy_exports(__name__, globals(), {
    "._settings": (
        "Settings", "load_settings", "load_units_file",
    ),
    ".engine": (
        "AgentCatalog", "AgentContext", "AgentResult", "AgentRunner", "Clock", "CommandAgent",
        "Continuation", "DigestAgent", "DrainReport", "EffectGate", "EffectNotApplied",
        "FakeClock", "LoopDied", "Registry", "RunContext", "ScheduleDef", "Shutdown", "Supervisor",
        "SupervisorConfig", "SupervisorStatistics", "SystemClock", "Usage", "Worker", "register",
        "tick", "ModelAgent", "ModelEndpoint",
    ),
    ".store": (
        "Database", "EmbeddedPostgresError", "StoreError", "embedded_postgres",
    ),
    ".usecases": (
        "OPERATOR", "HistoryQuery", "UserPrincipal", "add_user", "authenticate", "cancel",
        "confirm", "history", "pause", "propose", "resume", "review", "trigger_now",
        "unclaimable_tasks",
    ),
})
