"""The use cases: what a person, an agent or an app asks watchkeeper to do.

Every door (the CLI today; the HTTP API, MCP tools and the history page next) calls
these functions and only these, so the doors cannot drift apart: a door parses its
input, authenticates, calls one use case and renders the answer.

Lives here: users and principals, propose / confirm / pause / resume / cancel
(``_definitions``), trigger-now and review (``_manual``), history and reports
(``_history``), webhook endpoints, preferences and redelivery (``_webhooks``), spec
files (``_specfile``), replay over a historical series (``_replay``), and the
supervisors and the tasks none of them can take (``_status``).

May import: the engine, the store, ``watchkeeper.triggers``, ``sources`` and
``outbox``. Never a door.
"""

from ._definitions import OPERATOR as OPERATOR
from ._definitions import Actor as Actor
from ._definitions import Confirmation as Confirmation
from ._definitions import Proposal as Proposal
from ._definitions import UserPrincipal as UserPrincipal
from ._definitions import add_user as add_user
from ._definitions import authenticate as authenticate
from ._definitions import cancel as cancel
from ._definitions import confirm as confirm
from ._definitions import pause as pause
from ._definitions import propose as propose
from ._definitions import resume as resume
from ._history import HISTORY_STATUSES as HISTORY_STATUSES
from ._history import HistoryEntry as HistoryEntry
from ._history import HistoryEvent as HistoryEvent
from ._history import HistoryPage as HistoryPage
from ._history import HistoryQuery as HistoryQuery
from ._history import history as history
from ._history import next_step as next_step
from ._manual import TriggerResult as TriggerResult
from ._manual import review as review
from ._manual import trigger_now as trigger_now
from ._replay import ReplayDefinition as ReplayDefinition
from ._replay import ReplaySummary as ReplaySummary
from ._replay import load_replay_definitions as load_replay_definitions
from ._replay import replay as replay
from ._specfile import load_data as load_data
from ._specfile import load_registrations as load_registrations
from ._specfile import load_spec as load_spec
from ._status import SupervisorState as SupervisorState
from ._status import UnclaimableTask as UnclaimableTask
from ._status import supervisors as supervisors
from ._status import unclaimable_tasks as unclaimable_tasks
from ._webhooks import PreferencesInput as PreferencesInput
from ._webhooks import add_endpoint as add_endpoint
from ._webhooks import check_secret as check_secret
from ._webhooks import get_preferences as get_preferences
from ._webhooks import parse_quiet as parse_quiet
from ._webhooks import redeliver as redeliver
from ._webhooks import remove_endpoint as remove_endpoint
from ._webhooks import rotate_secret as rotate_secret
from ._webhooks import set_preferences as set_preferences

__all__ = [
    "OPERATOR", "Actor", "Confirmation", "Proposal", "UserPrincipal", "add_user",
    "authenticate", "cancel", "confirm", "pause", "propose", "resume", "HISTORY_STATUSES",
    "HistoryEntry", "HistoryEvent", "HistoryPage", "HistoryQuery", "history", "next_step",
    "TriggerResult", "review", "trigger_now", "ReplayDefinition", "ReplaySummary",
    "load_replay_definitions", "replay", "load_data", "load_registrations", "load_spec",
    "SupervisorState", "UnclaimableTask", "supervisors", "unclaimable_tasks",
    "PreferencesInput", "add_endpoint", "check_secret", "get_preferences", "parse_quiet",
    "redeliver", "remove_endpoint", "rotate_secret", "set_preferences",
]
