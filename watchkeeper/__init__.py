"""watchkeeper keeps the standing agreements people make with their AI agents.

This is the front door for an application that embeds watchkeeper in-process. Its
packages:

* :mod:`watchkeeper.triggers` — the pure core: specs, calendars, DST, lateness,
  three-valued conditions (no I/O, no clock reads);
* :mod:`watchkeeper.sources` — read-only, versioned observation sources;
* :mod:`watchkeeper.outbox` — the notification outbox and its channels;
* :mod:`watchkeeper.runtime` — the PostgreSQL store, the engine (supervisor, tick,
  workers), the use cases every door calls, and the doors (the CLI).
"""

from watchkeeper.runtime import OPERATOR as OPERATOR
from watchkeeper.runtime import AgentContext as AgentContext
from watchkeeper.runtime import AgentResult as AgentResult
from watchkeeper.runtime import AgentRunner as AgentRunner
from watchkeeper.runtime import AuthError as AuthError
from watchkeeper.runtime import Clock as Clock
from watchkeeper.runtime import Conflict as Conflict
from watchkeeper.runtime import Database as Database
from watchkeeper.runtime import FakeClock as FakeClock
from watchkeeper.runtime import HistoryQuery as HistoryQuery
from watchkeeper.runtime import NotFound as NotFound
from watchkeeper.runtime import Supervisor as Supervisor
from watchkeeper.runtime import SupervisorConfig as SupervisorConfig
from watchkeeper.runtime import SystemClock as SystemClock
from watchkeeper.runtime import UserPrincipal as UserPrincipal
from watchkeeper.runtime import WatchkeeperError as WatchkeeperError
from watchkeeper.runtime import add_user as add_user
from watchkeeper.runtime import authenticate as authenticate
from watchkeeper.runtime import cancel as cancel
from watchkeeper.runtime import confirm as confirm
from watchkeeper.runtime import history as history
from watchkeeper.runtime import pause as pause
from watchkeeper.runtime import propose as propose
from watchkeeper.runtime import resume as resume
from watchkeeper.runtime import trigger_now as trigger_now
from watchkeeper.sources import Source as Source
from watchkeeper.triggers import Spec as Spec
from watchkeeper.triggers import SpecError as SpecError
from watchkeeper.triggers import parse_spec as parse_spec

__all__ = [
    "OPERATOR", "AgentContext", "AgentResult", "AgentRunner", "AuthError", "Clock", "Conflict",
    "Database", "FakeClock", "HistoryQuery", "NotFound", "Supervisor", "SupervisorConfig",
    "SystemClock", "UserPrincipal", "WatchkeeperError", "add_user", "authenticate", "cancel",
    "confirm", "history", "pause", "propose", "resume", "trigger_now", "Source", "Spec",
    "SpecError", "parse_spec",
]
