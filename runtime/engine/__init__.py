"""The engine: what runs on its own once a definition is confirmed.

Lives here: the clock contract (``_clock``), the tick (``_tick`` plans, ``_admission``
admits in short set-based transactions, ``_scheduler`` drives one tick and the ``run``
terminals), the condition poller (``_poller``), workers with fenced leases
(``_worker``), the agent seam and its budget guard (``_agents``), the command agent's
answer contract (``_answer``), which supervisors are live and what they offer
(``_fleet``), the effect gate
(``_effects``), the output promise check (``_verify``), the outbox's PostgreSQL store
(``_delivery_store``), operator-registered definitions (``_registry``), the records the
engine and the use cases share (``_ledger``), the supervisor that runs all loops
(``_supervisor``) and its graceful shutdown (``_drain``).

May import: the store, ``watchkeeper.triggers``, ``sources`` and ``outbox``, and
``watchkeeper.runtime._errors``. Never a use case or a door.
"""

from ._agents import AgentCatalog as AgentCatalog
from ._agents import AgentContext as AgentContext
from ._agents import AgentResult as AgentResult
from ._agents import AgentRunner as AgentRunner
from ._agents import BudgetGuard as BudgetGuard
from ._agents import Continuation as Continuation
from ._agents import ContinuedFrom as ContinuedFrom
from ._agents import DigestAgent as DigestAgent
from ._agents import OccurrenceInfo as OccurrenceInfo
from ._agents import Usage as Usage
from ._answer import AnswerInvalid as AnswerInvalid
from ._clock import Clock as Clock
from ._clock import FakeClock as FakeClock
from ._clock import SystemClock as SystemClock
from ._command import CommandAgent as CommandAgent
from ._delivery_store import PgDeliveryStore as PgDeliveryStore
from ._drain import DrainReport as DrainReport
from ._drain import Shutdown as Shutdown
from ._effects import EffectGate as EffectGate
from ._effects import EffectNotApplied as EffectNotApplied
from ._fleet import SupervisorState as SupervisorState
from ._fleet import offered_agents as offered_agents
from ._fleet import supervisor_states as supervisor_states
from ._poller import PollEvent as PollEvent
from ._poller import PollReport as PollReport
from ._poller import poll_once as poll_once
from ._registry import Registry as Registry
from ._registry import RunContext as RunContext
from ._registry import ScheduleDef as ScheduleDef
from ._registry import register as register
from ._scheduler import tick as tick
from ._supervisor import LoopDied as LoopDied
from ._supervisor import Supervisor as Supervisor
from ._supervisor import SupervisorConfig as SupervisorConfig
from ._supervisor import SupervisorStatistics as SupervisorStatistics
from ._supervisor import close_channels as close_channels
from ._supervisor import default_channels as default_channels
from ._supervisor import make_dispatcher as make_dispatcher
from ._tools import ScopedSources as ScopedSources
from ._tools import ToolRefused as ToolRefused
from ._worker import TaskOutcome as TaskOutcome
from ._worker import Worker as Worker

__all__ = [
    "AgentCatalog", "AgentContext", "AgentResult", "AgentRunner", "BudgetGuard", "CommandAgent",
    "DigestAgent", "OccurrenceInfo", "Usage", "AnswerInvalid", "Clock", "FakeClock", "SystemClock",
    "PgDeliveryStore", "DrainReport", "Shutdown", "EffectGate", "EffectNotApplied",
    "SupervisorState", "offered_agents",
    "supervisor_states", "PollEvent", "PollReport", "poll_once",
    "Registry", "RunContext", "ScheduleDef", "register", "tick", "LoopDied", "Supervisor",
    "SupervisorConfig", "SupervisorStatistics", "close_channels", "default_channels",
    "make_dispatcher", "TaskOutcome", "Worker", "Continuation", "ContinuedFrom", "ScopedSources",
    "ToolRefused", "ModelAgent", "ModelEndpoint",
]

_LAZY = {"ModelAgent", "ModelEndpoint"}
"""Imported on first use: the model loop (pydantic-ai, openai) costs ~0.6 s to import and
a supervisor without a model endpoint never needs it."""


def __getattr__(name: str) -> object:
    if name in _LAZY:
        from . import _model_agent
        return getattr(_model_agent, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
