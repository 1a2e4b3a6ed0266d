"""watchkeeper's pure domain core: specs, calendars, and the decisions about them.

Nothing here does I/O or reads a clock: every instant is an argument. ``runtime``
reads and writes around these functions (DESIGN "Layout").

Errors::

    TriggerError
    ├── SpecError (ValueError)  .problems (each .field .problem .fix); .to_json()
    │   ├── NoOccurrenceError
    │   └── BindingSetError     .messages
    └── NonAdvancingScheduleError
"""

from typing import TYPE_CHECKING

from watchkeeper._lazy import lazy_exports

from ._errors import NonAdvancingScheduleError as NonAdvancingScheduleError
from ._errors import NoOccurrenceError as NoOccurrenceError
from ._errors import SpecError as SpecError
from ._errors import SpecProblem as SpecProblem
from ._errors import SpecProblems as SpecProblems
from ._errors import SpecWarning as SpecWarning
from ._errors import TriggerError as TriggerError

if TYPE_CHECKING:
    from ._agent_params import MODEL_AGENT as MODEL_AGENT
    from ._agent_params import ModelAgentParams as ModelAgentParams
    from ._bindings import IDENTIFIER_PATTERN as IDENTIFIER_PATTERN
    from ._bindings import OPERATOR_TENANT as OPERATOR_TENANT
    from ._bindings import RESERVED_PARAM_KEYS as RESERVED_PARAM_KEYS
    from ._bindings import USER_BINDING_ID as USER_BINDING_ID
    from ._bindings import Binding as Binding
    from ._bindings import BindingSetError as BindingSetError
    from ._bindings import check_identifier as check_identifier
    from ._bindings import validate_bindings as validate_bindings
    from ._calendar import AtSchedule as AtSchedule
    from ._calendar import Calendar as Calendar
    from ._calendar import DueWindow as DueWindow
    from ._calendar import IntervalSchedule as IntervalSchedule
    from ._calendar import SlotRange as SlotRange
    from ._calendar import due_window as due_window
    from ._compiled import COMPILED_VERSION as COMPILED_VERSION
    from ._compiled import CompiledSpec as CompiledSpec
    from ._compiled import compile_spec as compile_spec
    from ._compiled import user_payload as user_payload
    from ._conditions import MAX_DEPTH as MAX_DEPTH
    from ._conditions import MAX_LEAVES as MAX_LEAVES
    from ._conditions import AllOf as AllOf
    from ._conditions import AnyOf as AnyOf
    from ._conditions import Comparison as Comparison
    from ._conditions import Evaluation as Evaluation
    from ._conditions import Leaf as Leaf
    from ._conditions import NotOf as NotOf
    from ._conditions import Predicate as Predicate
    from ._conditions import Verdict as Verdict
    from ._conditions import evaluate as evaluate
    from ._conditions import subjects_of as subjects_of
    from ._cron import CronExpression as CronExpression
    from ._cron import CronSchedule as CronSchedule
    from ._cron import DstGap as DstGap
    from ._cron import preload_zones as preload_zones
    from ._decisions import ActiveTask as ActiveTask
    from ._decisions import AdmissionVerdict as AdmissionVerdict
    from ._decisions import BudgetState as BudgetState
    from ._decisions import Decision as Decision
    from ._decisions import EventKind as EventKind
    from ._decisions import LatenessVerdict as LatenessVerdict
    from ._decisions import LatePolicy as LatePolicy
    from ._decisions import OverrunPolicy as OverrunPolicy
    from ._decisions import OverrunVerdict as OverrunVerdict
    from ._decisions import Period as Period
    from ._decisions import Timing as Timing
    from ._decisions import budget_period as budget_period
    from ._decisions import decide_admission as decide_admission
    from ._decisions import decide_budget as decide_budget
    from ._decisions import decide_lateness as decide_lateness
    from ._decisions import decide_overrun as decide_overrun
    from ._decisions import jitter_offset as jitter_offset
    from ._decisions import occurrence_timing as occurrence_timing
    from ._edges import ConditionMode as ConditionMode
    from ._edges import ConditionState as ConditionState
    from ._edges import EdgeAction as EdgeAction
    from ._edges import EdgeStep as EdgeStep
    from ._edges import not_admitted as not_admitted
    from ._edges import step as step
    from ._fixes import FixableValueError as FixableValueError
    from ._fixes import problem_of_error as problem_of_error
    from ._fixes import validation_problems as validation_problems
    from ._observations import Observation as Observation
    from ._observations import ObservationStatus as ObservationStatus
    from ._polls import DefinitionFacts as DefinitionFacts
    from ._polls import PollJudgement as PollJudgement
    from ._polls import StoredCondition as StoredCondition
    from ._polls import admitted as admitted
    from ._polls import judge_poll as judge_poll
    from ._polls import quiet_run as quiet_run
    from ._polls import refused as refused
    from ._preview import PreviewItem as PreviewItem
    from ._preview import preview as preview
    from ._slots import Slot as Slot
    from ._slots import SlotSkip as SlotSkip
    from ._slots import cron_slot_key as cron_slot_key
    from ._slots import format_utc as format_utc
    from ._slots import utc_slot_key as utc_slot_key
    from ._spec import DEFAULT_MIN_INTERVAL as DEFAULT_MIN_INTERVAL
    from ._spec import ENDPOINT_NAME_PATTERN as ENDPOINT_NAME_PATTERN
    from ._spec import INSTANT_RANGE as INSTANT_RANGE
    from ._spec import AgentSpec as AgentSpec
    from ._spec import AtTrigger as AtTrigger
    from ._spec import ConditionTrigger as ConditionTrigger
    from ._spec import CronTrigger as CronTrigger
    from ._spec import Delivery as Delivery
    from ._spec import Ends as Ends
    from ._spec import IntervalTrigger as IntervalTrigger
    from ._spec import Lateness as Lateness
    from ._spec import Limits as Limits
    from ._spec import OutputPromise as OutputPromise
    from ._spec import SourceRef as SourceRef
    from ._spec import Spec as Spec
    from ._spec import SpecV1 as SpecV1
    from ._spec import canonical_json as canonical_json
    from ._spec import check_endpoint_name as check_endpoint_name
    from ._spec import check_instant as check_instant
    from ._spec import parse_spec as parse_spec
    from ._storable import refuse_unstorable as refuse_unstorable
    from ._storable import storable_problems as storable_problems
    from ._unit_file import MAX_UNITS_TEXT as MAX_UNITS_TEXT
    from ._unit_file import define_units as define_units
    from ._units import Quantity as Quantity
    from ._units import Unit as Unit
    from ._units import check_currency as check_currency
    from ._units import check_unit as check_unit
    from ._units import in_range as in_range
    from ._units import parse_quantity as parse_quantity
    from ._units import registry as unit_registry
    from ._units import threshold_in as threshold_in
    from ._values import Importance as Importance
    from ._values import plain_decimal as plain_decimal
    from ._zones import WallKind as WallKind
    from ._zones import WallTime as WallTime
    from ._zones import ZoneChoice as ZoneChoice
    from ._zones import ZoneKind as ZoneKind
    from ._zones import check_zone as check_zone
    from ._zones import classify_wall as classify_wall
    from ._zones import load_zone as load_zone
    from ._zones import require_aware as require_aware
    from ._zones import resolve_zone as resolve_zone
    from ._zones import tzdata_version as tzdata_version

__all__ = [
    "MODEL_AGENT", "ModelAgentParams", "FixableValueError", "problem_of_error",
    "validation_problems",
    "IDENTIFIER_PATTERN", "ENDPOINT_NAME_PATTERN", "OPERATOR_TENANT", "RESERVED_PARAM_KEYS",
    "USER_BINDING_ID", "Binding", "BindingSetError",
    "check_identifier", "validate_bindings", "AtSchedule", "Calendar", "DueWindow",
    "IntervalSchedule", "SlotRange", "due_window", "CronExpression", "CronSchedule", "DstGap", "ActiveTask",
    "BudgetState", "Decision", "AdmissionVerdict", "decide_admission", "EventKind",
    "LatenessVerdict", "LatePolicy", "OverrunPolicy",
    "OverrunVerdict", "Period", "Timing", "budget_period", "decide_budget", "decide_lateness",
    "decide_overrun", "jitter_offset", "occurrence_timing", "NoOccurrenceError",
    "NonAdvancingScheduleError", "SpecError", "TriggerError", "PreviewItem", "preview", "Slot",
    "SlotSkip", "cron_slot_key", "format_utc", "utc_slot_key", "DEFAULT_MIN_INTERVAL",
    "AgentSpec", "AtTrigger", "CronTrigger", "Delivery", "Ends", "IntervalTrigger", "Lateness",
    "Limits", "OutputPromise", "Spec", "SpecV1", "canonical_json", "check_endpoint_name",
    "parse_spec", "WallKind",
    "WallTime", "classify_wall", "Importance", "plain_decimal", "load_zone", "require_aware",
    "tzdata_version",
    "ConditionTrigger", "SourceRef", "MAX_DEPTH", "MAX_LEAVES", "AllOf", "AnyOf", "Comparison",
    "Evaluation", "Leaf", "NotOf", "Predicate", "Verdict", "evaluate", "subjects_of",
    "ConditionMode", "ConditionState", "EdgeAction", "EdgeStep", "not_admitted", "step",
    "Observation", "ObservationStatus", "Quantity", "Unit", "check_unit", "parse_quantity",
    "unit_registry", "in_range", "threshold_in", "SpecProblem", "SpecProblems", "SpecWarning",
    "check_zone", "ZoneChoice", "ZoneKind", "resolve_zone",
    "define_units", "refuse_unstorable", "storable_problems", "INSTANT_RANGE",
    "check_instant", "MAX_UNITS_TEXT", "COMPILED_VERSION", "CompiledSpec",
    "compile_spec", "user_payload", "DefinitionFacts", "PollJudgement", "StoredCondition",
    "admitted", "judge_poll", "quiet_run", "refused",
]

# Imported on first use (PEP 562): the errors above come with the package; each other
# name with its own module, so that reading an error, a slot key or a zone does not
# build the spec models (pydantic) nor import croniter.
_SOURCES = {
    "._agent_params": (
        "MODEL_AGENT", "ModelAgentParams",
    ),
    "._bindings": (
        "IDENTIFIER_PATTERN", "OPERATOR_TENANT", "RESERVED_PARAM_KEYS", "USER_BINDING_ID",
        "Binding", "BindingSetError", "check_identifier", "validate_bindings",
    ),
    "._calendar": (
        "AtSchedule", "Calendar", "DueWindow", "IntervalSchedule", "SlotRange", "due_window",
    ),
    "._compiled": (
        "COMPILED_VERSION", "CompiledSpec", "compile_spec", "user_payload",
    ),
    "._conditions": (
        "MAX_DEPTH", "MAX_LEAVES", "AllOf", "AnyOf", "Comparison", "Evaluation", "Leaf", "NotOf",
        "Predicate", "Verdict", "evaluate", "subjects_of",
    ),
    "._cron": (
        "CronExpression", "CronSchedule", "DstGap", "preload_zones",
    ),
    "._decisions": (
        "ActiveTask", "AdmissionVerdict", "BudgetState", "Decision", "EventKind",
        "LatenessVerdict", "LatePolicy", "OverrunPolicy", "OverrunVerdict", "Period", "Timing",
        "budget_period", "decide_admission", "decide_budget", "decide_lateness", "decide_overrun",
        "jitter_offset", "occurrence_timing",
    ),
    "._edges": (
        "ConditionMode", "ConditionState", "EdgeAction", "EdgeStep", "not_admitted", "step",
    ),
    "._observations": (
        "Observation", "ObservationStatus",
    ),
    "._polls": (
        "DefinitionFacts", "PollJudgement", "StoredCondition", "admitted", "judge_poll",
        "quiet_run", "refused",
    ),
    "._preview": (
        "PreviewItem", "preview",
    ),
    "._slots": (
        "Slot", "SlotSkip", "cron_slot_key", "format_utc", "utc_slot_key",
    ),
    "._spec": (
        "DEFAULT_MIN_INTERVAL", "ENDPOINT_NAME_PATTERN", "AgentSpec", "AtTrigger",
        "ConditionTrigger", "CronTrigger", "Delivery", "Ends", "IntervalTrigger", "Lateness",
        "Limits", "OutputPromise", "SourceRef", "Spec", "SpecV1", "canonical_json",
        "check_endpoint_name", "parse_spec", "INSTANT_RANGE", "check_instant",
    ),
    "._fixes": (
        "FixableValueError", "problem_of_error", "validation_problems",
    ),
    "._storable": (
        "refuse_unstorable", "storable_problems",
    ),
    "._unit_file": (
        "MAX_UNITS_TEXT", "define_units",
    ),
    "._units": (
        "Quantity", "Unit", "check_currency", "check_unit", "in_range", "parse_quantity",
        "unit_registry", "threshold_in",
    ),
    "._values": (
        "Importance", "plain_decimal",
    ),
    "._zones": (
        "WallKind", "WallTime", "ZoneChoice", "ZoneKind", "check_zone", "classify_wall",
        "load_zone", "require_aware", "resolve_zone", "tzdata_version",
    ),
}
_RENAMED = {"unit_registry": "registry"}  # exported under another name
__getattr__, __dir__ = lazy_exports(__name__, globals(), _SOURCES, _RENAMED)
