"""A run moved to another version of its workflow, and such a move undone.

A migration (``cairn runs migrate``, docs/versions.md) is decided under the *new*
definition: the run leaves where it stood on the old graph (its wait, or the node it
waited to retry), its state becomes the mapped one, and it enters the mapped node of the
new graph as any run enters a node — a wait opens (its timeout counted from the
migration), a task is dispatched. Its rollback is decided under the old definition: the
run returns to the state it had just before the migration, timers and all.

Only a run that stands still may move: waiting or between two nodes, nothing in flight,
nothing held for an operator, outside every parallel section. :func:`why_unmovable` says
why a run may not; the engine's checks report the same reasons before anything is written.
"""

from __future__ import annotations

from cairn.decider.moves import Moves
from cairn.decider.step import Transition
from cairn.errors import NotMigratable
from cairn.model.definition import WorkflowDefinition
from cairn.model.events import RunMigrated
from cairn.model.state import RunState
from cairn.model.statuses import NodeStatus, RunStatus

MIGRATE = "(migrate)"  # where a migrated run enters its new graph from
MOVABLE = (RunStatus.WAITING, RunStatus.RUNNING)


def why_unmovable(state: RunState) -> tuple[str, str] | None:
    """(code, why) if ``state`` may not move to another graph now; None if it may."""
    if state.status not in MOVABLE or state.compensation is not None or state.cancel:
        return (
            "not_waiting",
            f"it is {state.status.value}: only waiting runs and runs between nodes move",
        )
    active = sorted(f"{n.node}#{n.iteration}" for n in state.active_nodes)
    if active:
        return (
            "in_flight",
            f"{', '.join(active)} {'is' if len(active) == 1 else 'are'} in flight: "
            "a worker's result would arrive to a run on another graph",
        )
    held = sorted(
        f"{n.node}#{n.iteration}" for n in state.nodes.values() if n.status is NodeStatus.HELD
    )
    if held:
        return "held", f"{', '.join(held)} is held for an operator's decision: settle it first"
    open_joins = sorted(node for node, join in state.joins.items() if not join.done)
    if open_joins:
        return "parallel", f"it is inside the parallel section {', '.join(open_joins)}"
    return None


def position(state: RunState) -> str | None:
    """Where a movable run stands: its open wait, or the node it waits to run again."""
    for node in state.nodes.values():
        if node.status in (NodeStatus.WAITING, NodeStatus.RETRYING):
            return node.node
    return None


def placeable(definition: WorkflowDefinition, node: str) -> str | None:
    """Why a migrated run may not enter ``node`` of ``definition``; None if it may."""
    if node not in definition.nodes:
        return f"{definition.key} has no node {node!r}"
    parent = definition.branch_parents.get(node)
    if parent is not None:
        return f"{node!r} is a branch of the parallel node {parent!r} in {definition.key}"
    return None


def migrated(step: Moves, event: RunMigrated) -> str | None:
    """Apply a migration, or its rollback (``undoes``); :class:`NotMigratable` if the run
    may not move or the event does not fit the run and the definition it is decided by."""
    state, definition = step.state, step.definition
    if state.version != event.from_version or definition.version != event.to_version:
        raise NotMigratable(
            f"run {state.run_id} is on version {state.version}: a move from version "
            f"{event.from_version} to {event.to_version} does not apply "
            f"(decided under {definition.key})"
        )
    refused = why_unmovable(state)
    if refused is not None:
        raise NotMigratable(f"run {state.run_id} cannot move to {definition.key}: {refused[1]}")
    _leave(step, f"migrated to version {event.to_version}")
    if event.undoes is not None:
        _return(step, event)
        return None
    misplaced = placeable(definition, event.node)
    if misplaced is not None:
        raise NotMigratable(f"run {state.run_id} cannot move: {misplaced}")
    _forget_old_nodes(state, definition)
    state.vars = dict(event.vars)
    state.version = event.to_version
    step.set_run(RunStatus.RUNNING)
    step.enter(event.node, MIGRATE, "migrated")
    return None


def _leave(step: Moves, reason: str) -> None:
    """Where the run stood ends: its wait or pending retry is stopped, its timers go."""
    for current in list(step.state.nodes.values()):
        if not current.status.terminal:
            step.stop_execution(current, reason)
    step.disarm_all()


def _forget_old_nodes(state: RunState, definition: WorkflowDefinition) -> None:
    """What the state keeps per node, only for the new graph's nodes: whoever reads a
    state looks its nodes up in its definition. (Visit counts stay whole: a node of the
    old graph may come back with a rollback, and its execution keys are never reused.)"""
    known = definition.nodes
    state.nodes = {name: node for name, node in state.nodes.items() if name in known}
    state.joins = {name: join for name, join in state.joins.items() if name in known}
    state.early = {name: kept for name, kept in state.early.items() if name in known}


def _return(step: Moves, event: RunMigrated) -> None:
    """A migration undone: the state before it, on the old version, its timers armed
    again as they were (a deadline passed meanwhile fires at once). A visit count never
    goes down, so that no execution key of the new graph's visits is ever reused."""
    if event.rewind is None:
        raise NotMigratable("a migration's rollback carries the state to return to")
    state, target = step.state, RunState.from_dict(event.rewind)
    if target.version != event.to_version or why_unmovable(target) is not None:
        raise NotMigratable(
            f"run {state.run_id}: the state to return to is not a standing run on version "
            f"{event.to_version}"
        )
    visits = {
        node: max(state.visits.get(node, 0), target.visits.get(node, 0))
        for node in {*state.visits, *target.visits}
    }
    state.vars, state.messages = dict(target.vars), list(target.messages)
    state.sessions, state.artifacts = dict(target.sessions), dict(target.artifacts)
    state.nodes, state.joins = dict(target.nodes), dict(target.joins)
    state.compensable, state.early = list(target.compensable), dict(target.early)
    state.visits, state.version = visits, event.to_version
    for timer in target.timers.values():
        step.arm(timer)
    step.set_run(target.status)
    step.transitions.extend(
        Transition(MIGRATE, "migration_undone", node.node)
        for node in state.nodes.values()
        if not node.status.terminal
    )
