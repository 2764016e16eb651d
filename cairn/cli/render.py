"""Text forms of a workflow's transition table: a rich table, Mermaid, JSON."""

from __future__ import annotations

import json
from typing import Any

from rich.table import Table

from cairn.definitions.transitions import TransitionRow, transition_table
from cairn.model.definition import (
    EndNode,
    ParallelNode,
    RetryPolicy,
    TaskNode,
    WaitNode,
    WorkflowDefinition,
)
from cairn.model.durations import format_duration


def as_table(definition: WorkflowDefinition) -> Table:
    table = Table(title=f"{definition.key}: transitions", title_justify="left")
    for column in ("from", "event", "guard", "to"):
        table.add_column(column, overflow="fold")
    for row in transition_table(definition):
        table.add_row(row.source, row.event, row.guard, row.target)
    return table


def as_json(definition: WorkflowDefinition) -> str:
    payload: dict[str, Any] = {
        "workflow": definition.name,
        "version": definition.version,
        "start": definition.start,
        # The default timeout of tasks running a handler (None: no default).
        "node_timeout": (
            format_duration(definition.node_timeout) if definition.node_timeout else None
        ),
        "nodes": {node_id: _node_summary(node) for node_id, node in definition.nodes.items()},
        "transitions": [row.to_dict() for row in transition_table(definition)],
    }
    return json.dumps(payload, indent=2)


def _node_summary(node: Any) -> dict[str, Any]:
    summary: dict[str, Any] = {"kind": node.kind}
    if isinstance(node, TaskNode) and node.handler is not None:
        summary["handler"] = node.handler.path
    if isinstance(node, EndNode):
        summary["status"] = node.status.value
    # The effective timeout and retry policy: the node's own, or the format's defaults.
    if node.timeout is not None:
        summary["timeout"] = format_duration(node.timeout)
    if node.max_visits is not None:
        summary["max_visits"] = node.max_visits
    if node.retry.attempts > 1:
        summary["retry_attempts"] = node.retry.attempts
        summary["retry"] = _retry_summary(node.retry)
    if isinstance(node, TaskNode) and node.queue is not None:
        summary["queue"] = node.queue
    if isinstance(node, TaskNode) and node.stall_after is not None:
        summary["stall_after"] = format_duration(node.stall_after)
    if node.compensate is not None:
        summary["compensate"] = node.compensate.path
    return summary


def _retry_summary(policy: RetryPolicy) -> dict[str, Any]:
    summary: dict[str, Any] = {
        "attempts": policy.attempts,
        "backoff": format_duration(policy.backoff),
        "max_delay": format_duration(policy.max_delay),
        "jitter": policy.jitter.value,
    }
    if policy.deadline is not None:
        summary["deadline"] = format_duration(policy.deadline)
    return summary


def as_mermaid(definition: WorkflowDefinition) -> str:
    """A ``flowchart`` of the graph; failure edges are dotted, ends are circles."""
    ids: dict[str, str] = {}

    def mermaid_id(name: str) -> str:
        return ids.setdefault(name, f"n{len(ids)}")

    lines = ["flowchart TD"]
    for node_id, node in definition.nodes.items():
        lines.append(f"    {mermaid_id(node_id)}{_shape(node_id, node)}")
    # Anomaly moves leave every watched node: drawn, they would bury the graph.
    rows = [
        row
        for row in transition_table(definition)
        if row.source != "*" and row.event != "compensate" and not row.event.startswith("anomaly_")
    ]
    for pseudo in sorted({r.source for r in rows} | {r.target for r in rows}):
        if pseudo.startswith("(") and pseudo.endswith(")"):
            lines.append(f'    {mermaid_id(pseudo)}(("{pseudo[1:-1]}"))')
    for row in rows:
        arrow = "-.->" if _is_failure(row) else "-->"
        label = row.event if not row.guard else f"{row.event} [{row.guard}]"
        lines.append(
            f'    {mermaid_id(row.source)} {arrow}|"{_escape(label)}"| {mermaid_id(row.target)}'
        )
    lines.append("    %% cancel is possible from every node: * --cancel--> (cancelled)")
    if definition.anomaly is not None:
        stop = definition.anomaly.handoff or "(failed)"
        lines.append(
            f"    %% an anomaly may stop the run at any node: * --anomaly_detected--> {stop}"
        )
    return "\n".join(lines)


def _shape(node_id: str, node: Any) -> str:
    text = _escape(node_id)
    if isinstance(node, WaitNode):
        return f'{{{{"⏸ {text}"}}}}'
    if isinstance(node, ParallelNode):
        return f'[/"⑂ {text}"/]'
    if isinstance(node, EndNode):
        return f'(["{text}: {node.status.value}"])'
    if isinstance(node, TaskNode) and node.handler is None:
        return f'{{"{text}"}}'
    return f'["{text}"]'


def _is_failure(row: TransitionRow) -> bool:
    return row.event.startswith(("failed:", "visits_exceeded", "branch_failed", "timeout", "retry"))


def _escape(text: str) -> str:
    return text.replace('"', "#quot;")


def change_lines(changes: list[dict[str, Any]]) -> list[str]:
    """``Change.to_dict()``s as lines: ``+`` added, ``-`` removed, ``~`` changed (a
    value the API hid without the payloads permission is left out)."""
    lines = []
    for change in changes:
        path, kind = change["path"], change["change"]
        if kind == "added":
            lines.append(f"+ {path}: {_short(change.get('new'))}")
        elif kind == "removed":
            lines.append(f"- {path}: {_short(change.get('old'))}")
        else:
            lines.append(f"~ {path}: {_short(change.get('old'))} -> {_short(change.get('new'))}")
    return lines


def _short(value: Any, limit: int = 120) -> str:
    text = json.dumps(value, separators=(", ", ": "))
    return text if len(text) <= limit else f"{text[: limit - 3]}..."
