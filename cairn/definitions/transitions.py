"""The workflow's own transition table: every move a run of it can make, enumerated.

Each row is (from, event, guard, to). ``from`` and ``to`` are node ids or pseudo-nodes:
``(start)`` before the first node and ``(succeeded)``, ``(failed)``, ``(cancelled)``
for the run's ends. The decider records the moves it makes with the same (from, event,
to) triples, so a test can check that every move ever made is a row of this table.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from cairn.decider.anomaly import watched
from cairn.decider.step import FORK, OPERATOR, REWIND, START, outcome_node
from cairn.model.awaiting import RECOVERY_SIGNALS
from cairn.model.definition import (
    AnomalyKind,
    AnomalyPolicy,
    AnyNode,
    EndNode,
    ErrorClass,
    JoinPolicyKind,
    ParallelNode,
    TaskNode,
    WaitNode,
    WorkflowDefinition,
)
from cairn.model.durations import format_duration
from cairn.model.statuses import RunStatus


@dataclass(frozen=True)
class TransitionRow:
    source: str
    event: str
    guard: str
    target: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def transition_table(definition: WorkflowDefinition) -> list[TransitionRow]:
    rows = [TransitionRow(START, "started", "", definition.start)]
    for node_id, node in definition.nodes.items():
        rows.extend(_node_rows(definition, node_id, node))
    rows.extend(_run_rows(definition))
    return rows


def _node_rows(definition: WorkflowDefinition, node_id: str, node: AnyNode) -> list[TransitionRow]:
    """Every move out of one node: by its kind, on failure, past its visits, into its
    compensation, to and from an operator, and on an anomaly."""
    if isinstance(node, EndNode):
        return [TransitionRow(node_id, "end", "", outcome_node(node.status))]
    rows = []
    if isinstance(node, TaskNode):
        rows.extend(_task_rows(node))
    elif isinstance(node, WaitNode):
        rows.extend(_wait_rows(node))
    elif isinstance(node, ParallelNode):
        rows.extend(_parallel_rows(node))
    rows.extend(_failure_rows(definition, node_id, node))
    limit = definition.visit_limit(node_id)
    if limit is not None:
        rows.append(
            TransitionRow(
                node_id, "visits_exceeded", f"visit > {limit}", outcome_node(RunStatus.FAILED)
            )
        )
    if node.compensate is not None:
        rows.append(
            TransitionRow(
                node_id, "compensate", "a later step failed the run", f"{node.compensate.path}"
            )
        )
    rows.extend(_hold_rows(node))
    rows.extend(_anomaly_rows(definition, node_id))
    return rows


def _failure_rows(
    definition: WorkflowDefinition, node_id: str, node: AnyNode
) -> list[TransitionRow]:
    """Where a failed node goes: a retry while attempts are left, then its parent's join
    (in a branch) or its ``on_error`` target by error class (the run's failure unless
    named). A wait node does not fail: its timeout is one of its own moves."""
    rows = []
    failed = outcome_node(RunStatus.FAILED)
    # A task's timeout is a transient failure: say so where it leads.
    failure = (
        f"transient failure or timed out after {format_duration(node.timeout)}"
        if isinstance(node, TaskNode) and node.timeout is not None
        else ""
    )
    if node.retry.attempts > 1:
        failure = failure or "transient failure"
        rows.append(
            TransitionRow(node_id, "retry", f"{failure}, attempt < {node.retry.attempts}", node_id)
        )
    parent = definition.branch_parents.get(node_id)
    if parent is not None:
        rows.append(TransitionRow(node_id, "branch_succeeded", "", parent))
        rows.append(TransitionRow(node_id, "branch_failed", "", parent))
    elif not isinstance(node, WaitNode):
        classes = [ErrorClass.PERMANENT] if isinstance(node, ParallelNode) else list(ErrorClass)
        for error_class in classes:
            guard = ""
            if error_class is ErrorClass.TRANSIENT:
                guard = "retries exhausted" if node.retry.attempts > 1 else failure
            rows.append(
                TransitionRow(
                    node_id,
                    f"failed:{error_class.value}",
                    guard,
                    node.on_error.get(error_class, failed),
                )
            )
    return rows


def _run_rows(definition: WorkflowDefinition) -> list[TransitionRow]:
    """The moves of the whole run, from any node (``*``): re-planning, cancelling, rolling
    back; and where a rewind or a fork starts again."""
    rows = []
    if definition.on_resume is not None:
        rows.append(
            TransitionRow(
                "*",
                "replan",
                f"a recovered node, and {definition.on_resume.check.path} says the plan "
                "no longer holds",
                definition.on_resume.replan,
            )
        )
    rows.append(TransitionRow("*", "cancel", "", outcome_node(RunStatus.CANCELLED)))
    rows.append(
        TransitionRow(
            "*",
            "rollback",
            "confirmed by an operator; compensates every applied step",
            outcome_node(RunStatus.ROLLED_BACK),
        )
    )
    rows.append(
        TransitionRow("*", "rollback", "to a checkpoint: compensates the steps after it", REWIND)
    )
    rows.extend(
        TransitionRow(REWIND, "rewind", "in progress at the checkpoint", node_id)
        for node_id, node in definition.nodes.items()
        if isinstance(node, TaskNode | WaitNode) and node_id not in definition.branch_parents
    )
    rows.extend(
        TransitionRow(FORK, "fork", "in progress at the parent's checkpoint", node_id)
        for node_id, node in definition.nodes.items()
        if isinstance(node, TaskNode | WaitNode) and node_id not in definition.branch_parents
    )
    return rows


def _anomaly_rows(definition: WorkflowDefinition, node_id: str) -> list[TransitionRow]:
    """Each move into a watched node may complete an anomaly: the first detections of a
    kind are answered by an intervention (the run goes on into the node), the next one
    ends the run or hands it off."""
    policy = definition.anomaly
    if policy is None or not watched(definition, node_id):
        return []
    rows = []
    stop = policy.handoff or outcome_node(RunStatus.FAILED)
    for kind in policy.kinds:
        guard = _anomaly_guard(policy, kind)
        if policy.interventions:
            times = "once" if policy.interventions == 1 else f"{policy.interventions} times"
            rows.append(
                TransitionRow(
                    node_id, f"anomaly_intervened:{kind.value}", f"{guard}; {times}", node_id
                )
            )
        after = "after the interventions" if policy.interventions else "at once"
        rows.append(
            TransitionRow(node_id, f"anomaly_detected:{kind.value}", f"{guard}, {after}", stop)
        )
    return rows


def _anomaly_guard(policy: AnomalyPolicy, kind: AnomalyKind) -> str:
    no_progress, ping_pong, oscillation = policy.no_progress, policy.ping_pong, policy.oscillation
    if kind is AnomalyKind.NO_PROGRESS and no_progress is not None:
        return f"state unchanged for {no_progress.steps} moves round a loop"
    if kind is AnomalyKind.PING_PONG and ping_pong is not None:
        return f"a block of 2-{ping_pong.max_period} calls repeated {ping_pong.repeats} times"
    assert oscillation is not None
    return (
        f"{', '.join(oscillation.fields)} back to an earlier value {oscillation.returns} "
        f"times within {oscillation.window} moves"
    )


def _hold_rows(node: AnyNode) -> list[TransitionRow]:
    """A node that runs code may be held for an operator, who decides how it goes on."""
    why = []
    if isinstance(node, TaskNode) and node.handler is not None:
        if node.irreversible:
            why.append("irreversible, its worker was lost after claiming it")
        why.append("its worker kept dying (CAIRN_ON_MAX_RECOVERIES=hold)")
    if node.compensate is not None:
        why.append("its compensation failed, retries exhausted")
    if not why:
        return []
    return [
        TransitionRow(node.id, "held", "; or ".join(why), OPERATOR),
        *(TransitionRow(OPERATOR, signal, "it is held", node.id) for signal in RECOVERY_SIGNALS),
    ]


def _task_rows(node: TaskNode) -> list[TransitionRow]:
    rows = []
    if node.next is not None:
        rows.append(TransitionRow(node.id, "succeeded", "", node.next))
    if node.branch is not None:
        for label, target in node.branch.cases.items():
            rows.append(
                TransitionRow(
                    node.id, f"case:{label}", f"{node.branch.guard.path}(state) == {label}", target
                )
            )
    if node.route is not None:
        key = node.route.key
        for value, target in node.route.table.items():
            rows.append(TransitionRow(node.id, f"route:{value}", f"state.{key} == {value}", target))
        rows.append(
            TransitionRow(
                node.id,
                "route:default",
                f"state.{key} not in {sorted(node.route.table)}",
                node.route.default,
            )
        )
    return rows


def _wait_rows(node: WaitNode) -> list[TransitionRow]:
    rows = [
        TransitionRow(node.id, f"signal:{name}", "", target)
        for name, target in node.signals.items()
    ]
    timeout = format_duration(node.timeout) if node.timeout else "?"
    rows.append(TransitionRow(node.id, "timeout", f"no decision within {timeout}", node.on_timeout))
    return rows


def _parallel_rows(node: ParallelNode) -> list[TransitionRow]:
    rows = [TransitionRow(node.id, "fan_out", "", branch) for branch in node.branches]
    rows.append(TransitionRow(node.id, "joined", _join_guard(node), node.next))
    return rows


def _join_guard(node: ParallelNode) -> str:
    join = node.join
    if join.policy is JoinPolicyKind.ALL:
        text = "all branches succeeded"
    elif join.policy is JoinPolicyKind.QUORUM:
        text = f"{join.k} of {len(node.branches)} branches succeeded"
    else:
        text = f"critical {list(join.critical)} succeeded, the rest finished"
    if join.timeout is not None:
        text += f" (or timeout {format_duration(join.timeout)} with defaults)"
    return text


def transition_changes(
    before: WorkflowDefinition, after: WorkflowDefinition
) -> list[tuple[str, TransitionRow]]:
    """How ``after``'s transition table differs from ``before``'s: each row only one has,
    ``("-", row)`` for ``before``'s and ``("+", row)`` for ``after``'s, in table order —
    what a new version changes in the moves a run can make."""
    old, new = transition_table(before), transition_table(after)
    kept_old, kept_new = set(old), set(new)
    return [("-", row) for row in old if row not in kept_new] + [
        ("+", row) for row in new if row not in kept_old
    ]
