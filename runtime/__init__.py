"""watchkeeper's runtime: PostgreSQL store, definitions and confirmation, admission,
workers with fenced leases, the supervisor, the CLI and the embedded server.

Errors::

    WatchkeeperError
    ├── ConfigError
    ├── NotFound
    ├── Conflict
    ├── AuthError
    ├── DatabaseUnavailable       (retryable)
    │   └── CommitOutcomeUnknown  .backend_pid .backend_start
    ├── StaleLease
    ├── EffectOutcomeUnknown      .effect_key
    ├── BudgetExceeded
    ├── StoreError
    └── LoopDied                  .loop

asyncpg errors never leave this package.
"""

from ._agents import AgentCatalog as AgentCatalog
from ._agents import AgentContext as AgentContext
from ._agents import AgentResult as AgentResult
from ._agents import AgentRunner as AgentRunner
from ._agents import CommandAgent as CommandAgent
from ._agents import DigestAgent as DigestAgent
from ._agents import Importance as Importance
from ._agents import Usage as Usage
from ._clock import Clock as Clock
from ._clock import FakeClock as FakeClock
from ._clock import SystemClock as SystemClock
from ._db import Database as Database
from ._db import StoreError as StoreError
from ._definitions import OPERATOR as OPERATOR
from ._definitions import UserPrincipal as UserPrincipal
from ._definitions import add_user as add_user
from ._definitions import authenticate as authenticate
from ._definitions import cancel as cancel
from ._definitions import confirm as confirm
from ._definitions import pause as pause
from ._definitions import propose as propose
from ._definitions import resume as resume
from ._effects import EffectGate as EffectGate
from ._effects import EffectNotApplied as EffectNotApplied
from ._embedded import EmbeddedPostgresError as EmbeddedPostgresError
from ._embedded import embedded_postgres as embedded_postgres
from ._errors import AuthError as AuthError
from ._errors import BudgetExceeded as BudgetExceeded
from ._errors import CommitOutcomeUnknown as CommitOutcomeUnknown
from ._errors import ConfigError as ConfigError
from ._errors import Conflict as Conflict
from ._errors import DatabaseUnavailable as DatabaseUnavailable
from ._errors import EffectOutcomeUnknown as EffectOutcomeUnknown
from ._errors import NotFound as NotFound
from ._errors import StaleLease as StaleLease
from ._errors import WatchkeeperError as WatchkeeperError
from ._history import HistoryQuery as HistoryQuery
from ._history import history as history
from ._manual import review as review
from ._manual import trigger_now as trigger_now
from ._registry import Registry as Registry
from ._registry import RunContext as RunContext
from ._registry import ScheduleDef as ScheduleDef
from ._registry import register as register
from ._scheduler import tick as tick
from ._settings import Settings as Settings
from ._supervisor import LoopDied as LoopDied
from ._supervisor import Supervisor as Supervisor
from ._supervisor import SupervisorConfig as SupervisorConfig
from ._supervisor import SupervisorStatistics as SupervisorStatistics
from ._worker import Worker as Worker

__all__ = [
    "AgentCatalog", "AgentContext", "AgentResult", "AgentRunner", "CommandAgent", "DigestAgent",
    "Importance", "Usage", "Clock", "FakeClock", "SystemClock", "Database", "StoreError",
    "OPERATOR", "UserPrincipal", "add_user", "authenticate", "cancel", "confirm", "pause",
    "propose", "resume", "EmbeddedPostgresError", "embedded_postgres", "AuthError",
    "BudgetExceeded", "CommitOutcomeUnknown", "ConfigError", "Conflict", "DatabaseUnavailable",
    "EffectOutcomeUnknown", "EffectGate", "EffectNotApplied", "NotFound", "StaleLease",
    "WatchkeeperError", "HistoryQuery",
    "history", "review", "trigger_now", "Registry", "RunContext", "ScheduleDef", "register",
    "tick", "Settings", "LoopDied", "Supervisor", "SupervisorConfig", "SupervisorStatistics",
    "Worker",
]
