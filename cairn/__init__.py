"""cairn: a durable workflow engine for long-running, multi-step work such as AI-agent skills.

The public surface. Everything else is internal and may change between releases.
"""

from cairn.client import Client, get_run, submit
from cairn.config import Settings
from cairn.errors import (
    CairnError,
    ConfigError,
    DefinitionFault,
    EventRejected,
    IllegalTransition,
    NotWaiting,
    StoreUnavailable,
    UnknownSignal,
    WorkflowDefinitionError,
)
from cairn.failures import (
    BudgetExceeded,
    BusinessError,
    Cancelled,
    HandlerError,
    NotApplied,
    PermanentError,
    StaleClaim,
    TransientError,
    classified,
    not_applied,
)
from cairn.orchestrator.builder import Workflow
from cairn.orchestrator.decider import Decision, decide
from cairn.orchestrator.definition import ErrorClass, WorkflowDefinition
from cairn.orchestrator.loader import load_definition, load_file
from cairn.orchestrator.state import RunState
from cairn.orchestrator.statuses import NodeStatus, RunStatus

__version__ = "0.1.0"

__all__ = [
    # definitions
    "ErrorClass",
    "Workflow",
    "WorkflowDefinition",
    "load_definition",
    "load_file",
    # handlers
    "BusinessError",
    "BudgetExceeded",
    "Cancelled",
    "HandlerError",
    "NotApplied",
    "PermanentError",
    "StaleClaim",
    "TransientError",
    "classified",
    "not_applied",
    # running
    "Client",
    "get_run",
    "submit",
    "Decision",
    "NodeStatus",
    "RunState",
    "RunStatus",
    "decide",
    # settings
    "Settings",
    # errors
    "CairnError",
    "ConfigError",
    "DefinitionFault",
    "EventRejected",
    "IllegalTransition",
    "NotWaiting",
    "StoreUnavailable",
    "UnknownSignal",
    "WorkflowDefinitionError",
]
