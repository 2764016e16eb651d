"""cairn: a durable workflow engine for long-running, multi-step work such as AI-agent skills.

The public surface. Everything else is internal and may change between releases.

Names are resolved when first used (PEP 562): ``import cairn`` costs nothing, and
``import cairn.decider`` loads the pure decider, not Celery, SQLAlchemy and Redis.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# name -> the module that defines it
_EXPORTS = {
    # definitions
    "ErrorClass": "cairn.model.definition",
    "Workflow": "cairn.definitions.builder",
    "WorkflowDefinition": "cairn.model.definition",
    "load_definition": "cairn.definitions.loader",
    "load_file": "cairn.definitions.loader",
    "workflow": "cairn.definitions.decorators",
    # handlers
    "StepContext": "cairn.workers.context",
    "Progress": "cairn.workers.context",
    "Artifacts": "cairn.artifacts",
    "State": "cairn.model.handlers",
    "JSONValue": "cairn.model.handlers",
    "Message": "cairn.model.handlers",
    "Handler": "cairn.workers.context",
    "Guard": "cairn.model.handlers",
    "BusinessError": "cairn.model.failures",
    "BudgetExceeded": "cairn.model.failures",
    "Cancelled": "cairn.model.failures",
    "DeadlineExceeded": "cairn.model.failures",
    "HandlerError": "cairn.model.failures",
    "NotApplied": "cairn.model.failures",
    "PermanentError": "cairn.model.failures",
    "StaleClaim": "cairn.model.failures",
    "TransientError": "cairn.model.failures",
    "classified": "cairn.model.failures",
    "not_applied": "cairn.model.failures",
    # running
    "Client": "cairn.client",
    "get_run": "cairn.client",
    "submit": "cairn.client",
    "Decision": "cairn.decider.graph",
    "NodeStatus": "cairn.model.statuses",
    "RunState": "cairn.model.state",
    "RunStatus": "cairn.model.statuses",
    "decide": "cairn.decider.graph",
    # settings
    "Settings": "cairn.config",
    # errors
    "CairnError": "cairn.errors",
    "ConfigError": "cairn.errors",
    "DefinitionFault": "cairn.errors",
    "EventRejected": "cairn.errors",
    "IllegalTransition": "cairn.errors",
    "NotWaiting": "cairn.errors",
    "StoreUnavailable": "cairn.errors",
    "UndeclaredQueue": "cairn.errors",
    "UnknownSignal": "cairn.errors",
    "WorkflowDefinitionError": "cairn.errors",
}

__all__ = [
    # definitions
    "ErrorClass",
    "Workflow",
    "WorkflowDefinition",
    "load_definition",
    "load_file",
    "workflow",
    # handlers
    "StepContext",
    "Progress",
    "Artifacts",
    "State",
    "JSONValue",
    "Message",
    "Handler",
    "Guard",
    "BusinessError",
    "BudgetExceeded",
    "Cancelled",
    "DeadlineExceeded",
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
    "UndeclaredQueue",
    "UnknownSignal",
    "WorkflowDefinitionError",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'cairn' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # resolved once
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])


if TYPE_CHECKING:
    from cairn.artifacts import Artifacts
    from cairn.client import Client, get_run, submit
    from cairn.config import Settings
    from cairn.decider.graph import Decision, decide
    from cairn.definitions.builder import Workflow
    from cairn.definitions.decorators import workflow
    from cairn.definitions.loader import load_definition, load_file
    from cairn.errors import (
        CairnError,
        ConfigError,
        DefinitionFault,
        EventRejected,
        IllegalTransition,
        NotWaiting,
        StoreUnavailable,
        UndeclaredQueue,
        UnknownSignal,
        WorkflowDefinitionError,
    )
    from cairn.model.definition import ErrorClass, WorkflowDefinition
    from cairn.model.failures import (
        BudgetExceeded,
        BusinessError,
        Cancelled,
        DeadlineExceeded,
        HandlerError,
        NotApplied,
        PermanentError,
        StaleClaim,
        TransientError,
        classified,
        not_applied,
    )
    from cairn.model.handlers import Guard, JSONValue, Message, State
    from cairn.model.state import RunState
    from cairn.model.statuses import NodeStatus, RunStatus
    from cairn.workers.context import Handler, Progress, StepContext
