"""What a run starts from: its input, checked against the definition, and its row; a
child run's link to its parent, or why it could not start."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from cairn.errors import InvalidInput
from cairn.model.commands import StartChild
from cairn.model.definition import WorkflowDefinition
from cairn.model.events import ChildFinished
from cairn.model.payloads import storable_json
from cairn.model.statuses import RunStatus
from cairn.store.records import RunRecord, from_epoch


def check_input(
    definition: WorkflowDefinition, run_input: object, *, limit_bytes: int
) -> dict[str, Any]:
    """The input as it will be stored and read back: a JSON object PostgreSQL can hold,
    within the size limit, matching the definition's schema; otherwise
    :class:`InvalidInput`."""
    if run_input is None:
        run_input = {}
    if not isinstance(run_input, Mapping):
        raise InvalidInput(f"the input must be a JSON object, not {type(run_input).__name__}")
    # As the database will keep it (a tuple a list, an integer key a string): the state
    # this process plans the first step on is the one any worker restores.
    payload: dict[str, Any] = json.loads(
        storable_json(dict(run_input), what="the input", limit_bytes=limit_bytes)
    )
    if definition.input_schema is not None:
        # Here, not with the module: whoever only reads runs (the CLI) never checks one.
        from jsonschema import Draft202012Validator  # noqa: PLC0415

        errors = sorted(
            Draft202012Validator(definition.input_schema).iter_errors(payload),
            key=lambda error: list(error.path),
        )
        if errors:
            details = "; ".join(
                f"{'/'.join(map(str, error.path)) or '(input)'}: {error.message}"
                for error in errors
            )
            raise InvalidInput(f"input does not match {definition.key}: {details}")
    return payload


def new_run(
    run_id: str,
    namespace: str,
    definition: WorkflowDefinition,
    payload: Mapping[str, Any],
    *,
    request_id: str | None,
    at: float,
    webhook: str | None = None,
    priority: int = 0,
) -> dict[str, Any]:
    """The row of a run about to start."""
    stamp = from_epoch(at)
    return {
        "id": run_id,
        "namespace": namespace,
        "workflow": definition.name,
        "workflow_namespace": definition.namespace,
        "version": definition.version,
        "status": RunStatus.PENDING.value,
        "input": payload,
        "request_id": request_id,
        "webhook_url": webhook,
        "priority": priority,
        "current": [],
        "created_at": stamp,
        "updated_at": stamp,
    }


def child_link(parent_id: str, command: StartChild) -> dict[str, Any]:
    """What a child run's first event says of the execution that started it."""
    return {
        "run_id": parent_id,
        "node": command.node,
        "iteration": command.iteration,
        "attempt": command.attempt,
        "correlation_id": command.correlation_id,
        "depth": command.depth,
    }


def child_refused(command: StartChild, at: float, refused: str) -> ChildFinished:
    """What the parent is told of a child run that could not start: its node failed."""
    return ChildFinished(
        at=at,
        node=command.node,
        iteration=command.iteration,
        attempt=command.attempt,
        child_run_id=command.run_id,
        correlation_id=command.correlation_id,
        status=RunStatus.FAILED.value,
        reason=f"the child run could not start: {refused}",
    )


@dataclass(frozen=True)
class FreshRun:
    """What planning a run's first step reads of its row, before the row exists."""

    id: str
    created_at: datetime
    namespace: str
    webhook_url: str | None
    last_seq: int = 0
    snapshot_seq: int = 0
    snapshot_at: datetime | None = None
    priority: int = 0

    @classmethod
    def of(cls, values: Mapping[str, Any]) -> FreshRun:
        return cls(
            values["id"],
            values["created_at"],
            values["namespace"],
            values["webhook_url"],
            priority=values.get("priority", 0),
        )

    @staticmethod
    def record(values: Mapping[str, Any]) -> RunRecord:
        """The row of a run about to start, as its insert will leave it (no step yet)."""
        return RunRecord(
            id=values["id"],
            namespace=values["namespace"],
            workflow=values["workflow"],
            version=values["version"],
            status=RunStatus(values["status"]),
            input=values["input"],
            request_id=values["request_id"],
            last_seq=0,
            snapshot_seq=0,
            snapshot_at=None,
            current=list(values["current"]),
            state=None,
            reason=None,
            parent_run_id=None,
            fork_seq=None,
            webhook_url=values["webhook_url"],
            created_at=values["created_at"],
            updated_at=values["updated_at"],
            finished_at=None,
            priority=values.get("priority", 0),
            workflow_namespace=values["workflow_namespace"],
            build=values.get("build"),
        )
