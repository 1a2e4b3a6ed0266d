"""The use cases: what a person, an agent or an app asks watchkeeper to do.

Every door (the CLI today; the HTTP API, MCP tools and the history page next) calls
these functions and only these, so the doors cannot drift apart: a door parses its
input, authenticates, calls one use case and renders the answer. Every decision —
who may act, what a status means, which filter applies before a limit — lives here.

Modules: principals and tokens (``_principals``); propose / confirm / pause / resume /
cancel (``_definitions``) and their read models (``_definition_views``); trigger-now and
review (``_manual``); history and reports (``_history``); a condition's poll timeline
(``_polls``); which server a read goes to, the hot standby or the primary (``_reads``);
the checks every door applies to its input (``_input``); the response shapes of
history and reports every door answers (``_response_models``);
supervisors, the tasks none of them can take and the outbox backlog
(``_status``); deliveries and
redelivery (``_deliveries``); webhook endpoints (``_webhooks``); notification
preferences (``_preferences``); spec files (``_specfile``); replay over a historical
series (``_replay``); where the database is, one tick, the supervisor's configuration
(``_operations``).

May import: the engine, the store, ``watchkeeper.triggers``, ``sources`` and
``outbox``. Never a door. Each name here is imported on first use (``watchkeeper._lazy``):
a door that reads a spec file does not import the supervisor.
"""

from typing import TYPE_CHECKING

from watchkeeper._lazy import lazy_exports

if TYPE_CHECKING:
    from ._access import Capability as Capability
    from ._access import authorize as authorize
    from ._access import principal_kind as principal_kind
    from ._access import reading_scope as reading_scope
    from ._access import visible_tenant as visible_tenant
    from ._cursors import DEFINITIONS_CURSOR as DEFINITIONS_CURSOR
    from ._cursors import HISTORY_CURSOR as HISTORY_CURSOR
    from ._cursors import POLLS_CURSOR as POLLS_CURSOR
    from ._cursors import decode_cursor as decode_cursor
    from ._cursors import encode_cursor as encode_cursor
    from ._definition_views import DefinitionReading as DefinitionReading
    from ._definition_views import DefinitionView as DefinitionView
    from ._definition_views import list_definitions as list_definitions
    from ._definition_views import read_definition as read_definition
    from ._definition_views import show_definition as show_definition
    from ._definition_views import stored_spec as stored_spec
    from ._definitions import Confirmation as Confirmation
    from ._definitions import Proposal as Proposal
    from ._definitions import cancel as cancel
    from ._definitions import confirm as confirm
    from ._definitions import pause as pause
    from ._definitions import propose as propose
    from ._definitions import reject as reject
    from ._definitions import resume as resume
    from ._deliveries import list_deliveries as list_deliveries
    from ._deliveries import redeliver as redeliver
    from ._history import HISTORY_STATUSES as HISTORY_STATUSES
    from ._history import HistoryEntry as HistoryEntry
    from ._history import HistoryEvent as HistoryEvent
    from ._history import HistoryPage as HistoryPage
    from ._history import HistoryQuery as HistoryQuery
    from ._history import history as history
    from ._history import next_step as next_step
    from ._history import report as report
    from ._history import shorten as shorten
    from ._history import task_entry as task_entry
    from ._input import INSTANT_RANGE as INSTANT_RANGE
    from ._input import Instant as Instant
    from ._input import check_identifiers as check_identifiers
    from ._input import check_input as check_input
    from ._input import check_instants as check_instants
    from ._keys import AgentPrincipal as AgentPrincipal
    from ._keys import ApiKey as ApiKey
    from ._keys import KeyKind as KeyKind
    from ._keys import NewKey as NewKey
    from ._keys import OperatorPrincipal as OperatorPrincipal
    from ._keys import Principal as Principal
    from ._keys import TickPrincipal as TickPrincipal
    from ._keys import authenticate_bearer as authenticate_bearer
    from ._keys import create_key as create_key
    from ._keys import list_keys as list_keys
    from ._keys import revoke_key as revoke_key
    from ._manual import TriggerResult as TriggerResult
    from ._manual import review as review
    from ._manual import trigger_now as trigger_now
    from ._operations import database_clock as database_clock
    from ._operations import database_server as database_server
    from ._operations import database_timeouts as database_timeouts
    from ._operations import keep_database_clock as keep_database_clock
    from ._operations import secret_keyring as secret_keyring
    from ._operations import supervisor_config as supervisor_config
    from ._operations import tick_once as tick_once
    from ._page_sessions import SESSION_SECONDS as SESSION_SECONDS
    from ._page_sessions import PageSession as PageSession
    from ._page_sessions import close_page_session as close_page_session
    from ._page_sessions import open_page_session as open_page_session
    from ._page_sessions import page_session_principal as page_session_principal
    from ._polls import PollCursor as PollCursor
    from ._polls import PollsPage as PollsPage
    from ._polls import PollsQuery as PollsQuery
    from ._polls import polls as polls
    from ._polls import require_definition as require_definition
    from ._preferences import CHANNELS as CHANNELS
    from ._preferences import PreferencesInput as PreferencesInput
    from ._preferences import get_preferences as get_preferences
    from ._preferences import parse_channels as parse_channels
    from ._preferences import parse_importance as parse_importance
    from ._preferences import parse_quiet as parse_quiet
    from ._preferences import set_preferences as set_preferences
    from ._principals import OPERATOR as OPERATOR
    from ._principals import REPLAY_TENANT_PREFIX as REPLAY_TENANT_PREFIX
    from ._principals import Actor as Actor
    from ._principals import UserPrincipal as UserPrincipal
    from ._principals import add_user as add_user
    from ._principals import authenticate as authenticate
    from ._principals import check_tenant as check_tenant
    from ._principals import list_users as list_users
    from ._principals import resolve_actor as resolve_actor
    from ._problems import PROBLEM_KINDS as PROBLEM_KINDS
    from ._problems import PROBLEM_TYPE_BASE as PROBLEM_TYPE_BASE
    from ._problems import ProblemKind as ProblemKind
    from ._problems import problem_kind as problem_kind
    from ._proposals import ProposalView as ProposalView
    from ._proposals import checked_proposal as checked_proposal
    from ._proposals import describe as describe
    from ._proposals import preview_spec as preview_spec
    from ._proposals import proposal_view as proposal_view
    from ._proposals import propose_spec as propose_spec
    from ._reads import ReadNote as ReadNote
    from ._reads import ReadSource as ReadSource
    from ._reads import current_reads as current_reads
    from ._reads import noting_reads as noting_reads
    from ._reads import read_standby as read_standby
    from ._replay import ReplayDefinition as ReplayDefinition
    from ._replay import ReplaySummary as ReplaySummary
    from ._replay import load_replay_definitions as load_replay_definitions
    from ._replay import prune_replays as prune_replays
    from ._replay import remove_replay as remove_replay
    from ._replay import replay as replay
    from ._replay import replay_window as replay_window
    from ._response_models import HistoryEntryOut as HistoryEntryOut
    from ._response_models import HistoryEventOut as HistoryEventOut
    from ._response_models import HistoryPageOut as HistoryPageOut
    from ._response_models import ReportOut as ReportOut
    from ._response_models import ReportSpending as ReportSpending
    from ._response_models import UsageTotals as UsageTotals
    from ._specfile import load_data as load_data
    from ._specfile import load_registrations as load_registrations
    from ._specfile import load_spec as load_spec
    from ._specfile import load_spec_data as load_spec_data
    from ._status import DELIVERY_STATUSES as DELIVERY_STATUSES
    from ._status import DeploymentStatus as DeploymentStatus
    from ._status import Readiness as Readiness
    from ._status import SupervisorState as SupervisorState
    from ._status import TenantStatus as TenantStatus
    from ._status import UnclaimableTask as UnclaimableTask
    from ._status import readiness as readiness
    from ._status import status as status
    from ._status import supervisors as supervisors
    from ._status import tenant_status as tenant_status
    from ._status import unclaimable_tasks as unclaimable_tasks
    from ._webhooks import RotatedKey as RotatedKey
    from ._webhooks import add_endpoint as add_endpoint
    from ._webhooks import check_secret as check_secret
    from ._webhooks import list_endpoints as list_endpoints
    from ._webhooks import new_secret as new_secret
    from ._webhooks import remove_endpoint as remove_endpoint
    from ._webhooks import rotate_secret as rotate_secret
    from ._webhooks import rotate_secret_key as rotate_secret_key

__all__ = [
    "HistoryEntryOut", "HistoryEventOut", "HistoryPageOut", "ReportOut", "ReportSpending",
    "UsageTotals",
    "PROBLEM_KINDS", "PROBLEM_TYPE_BASE", "ProblemKind", "problem_kind",
    "authorize", "Capability", "principal_kind", "reading_scope", "visible_tenant",
    "DEFINITIONS_CURSOR", "HISTORY_CURSOR", "POLLS_CURSOR", "decode_cursor", "encode_cursor",
    "DefinitionReading", "DefinitionView", "list_definitions", "read_definition",
    "show_definition", "stored_spec", "cancel", "confirm", "Confirmation", "pause",
    "Proposal", "propose", "reject", "resume", "list_deliveries", "redeliver", "history",
    "HISTORY_STATUSES", "HistoryEntry", "HistoryEvent", "HistoryPage", "HistoryQuery",
    "next_step", "report", "shorten", "task_entry", "INSTANT_RANGE", "Instant",
    "check_identifiers", "check_input", "check_instants", "AgentPrincipal", "ApiKey",
    "authenticate_bearer", "create_key", "KeyKind", "list_keys", "NewKey",
    "OperatorPrincipal", "Principal", "revoke_key", "TickPrincipal", "review",
    "trigger_now", "TriggerResult", "database_clock", "database_server",
    "database_timeouts", "keep_database_clock", "secret_keyring", "supervisor_config",
    "tick_once",
    "SESSION_SECONDS", "PageSession", "close_page_session", "open_page_session",
    "page_session_principal",
    "PollCursor", "polls", "PollsPage", "PollsQuery", "require_definition", "CHANNELS",
    "get_preferences", "parse_channels", "parse_importance", "parse_quiet",
    "PreferencesInput", "set_preferences", "Actor", "add_user", "authenticate",
    "check_tenant", "list_users", "OPERATOR", "REPLAY_TENANT_PREFIX", "resolve_actor",
    "UserPrincipal", "describe", "preview_spec", "ProposalView", "proposal_view", "propose_spec",
    "checked_proposal",
    "ReadNote", "ReadSource", "current_reads", "noting_reads", "read_standby",
    "load_replay_definitions", "prune_replays", "remove_replay", "replay", "replay_window",
    "ReplayDefinition", "ReplaySummary", "load_data", "load_registrations", "load_spec", "load_spec_data",
    "DELIVERY_STATUSES", "DeploymentStatus", "Readiness", "readiness", "status",
    "supervisors", "SupervisorState", "tenant_status", "TenantStatus", "unclaimable_tasks",
    "UnclaimableTask",
    "add_endpoint", "check_secret", "list_endpoints", "new_secret", "remove_endpoint",
    "rotate_secret", "RotatedKey", "rotate_secret_key",
]

__getattr__, __dir__ = lazy_exports(__name__, globals(), {
    "._access": (
        "Capability", "authorize", "principal_kind", "reading_scope", "visible_tenant",
    ),
    "._cursors": (
        "DEFINITIONS_CURSOR", "HISTORY_CURSOR", "POLLS_CURSOR", "decode_cursor", "encode_cursor",
    ),
    "._definition_views": (
        "DefinitionReading", "DefinitionView", "list_definitions", "read_definition",
        "show_definition", "stored_spec",
    ),
    "._definitions": (
        "Confirmation", "Proposal", "cancel", "confirm", "pause", "propose", "reject", "resume",
    ),
    "._deliveries": (
        "list_deliveries", "redeliver",
    ),
    "._history": (
        "HISTORY_STATUSES", "HistoryEntry", "HistoryEvent", "HistoryPage", "HistoryQuery",
        "history", "next_step", "report", "shorten", "task_entry",
    ),
    "._input": (
        "INSTANT_RANGE", "Instant", "check_identifiers", "check_input", "check_instants",
    ),
    "._keys": (
        "AgentPrincipal", "ApiKey", "KeyKind", "NewKey", "OperatorPrincipal", "Principal",
        "TickPrincipal", "authenticate_bearer", "create_key", "list_keys", "revoke_key",
    ),
    "._manual": (
        "TriggerResult", "review", "trigger_now",
    ),
    "._operations": (
        "database_clock", "database_server", "database_timeouts", "keep_database_clock",
        "secret_keyring", "supervisor_config",
        "tick_once",
    ),
    "._page_sessions": (
        "SESSION_SECONDS", "PageSession", "close_page_session", "open_page_session",
        "page_session_principal",
    ),
    "._polls": (
        "PollCursor", "PollsPage", "PollsQuery", "polls", "require_definition",
    ),
    "._preferences": (
        "CHANNELS", "PreferencesInput", "get_preferences", "parse_channels", "parse_importance",
        "parse_quiet", "set_preferences",
    ),
    "._principals": (
        "OPERATOR", "REPLAY_TENANT_PREFIX", "Actor", "UserPrincipal", "add_user", "authenticate",
        "check_tenant", "list_users", "resolve_actor",
    ),
    "._problems": (
        "PROBLEM_KINDS", "PROBLEM_TYPE_BASE", "ProblemKind", "problem_kind",
    ),
    "._proposals": (
        "ProposalView", "checked_proposal", "describe", "preview_spec", "proposal_view",
        "propose_spec",
    ),
    "._reads": (
        "ReadNote", "ReadSource", "current_reads", "noting_reads", "read_standby",
    ),
    "._replay": (
        "ReplayDefinition", "ReplaySummary", "load_replay_definitions", "prune_replays",
        "remove_replay", "replay", "replay_window",
    ),
    "._response_models": (
        "HistoryEntryOut", "HistoryEventOut", "HistoryPageOut", "ReportOut", "ReportSpending",
        "UsageTotals",
    ),
    "._specfile": (
        "load_data", "load_registrations", "load_spec", "load_spec_data",
    ),
    "._status": (
        "DELIVERY_STATUSES", "DeploymentStatus", "Readiness", "SupervisorState", "TenantStatus",
        "UnclaimableTask", "readiness", "status", "supervisors", "tenant_status",
        "unclaimable_tasks",
    ),
    "._webhooks": (
        "RotatedKey", "add_endpoint", "check_secret", "list_endpoints", "new_secret",
        "remove_endpoint", "rotate_secret", "rotate_secret_key",
    ),
})
