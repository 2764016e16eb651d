"""Graph checks on a parsed definition: targets, reachability, termination, bounded loops.

These run after parsing, on whatever parsed, and return faults rather than raising, so
that the loader can report every problem in one error.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator, Mapping

from cairn.decider.anomaly import watched
from cairn.errors import DefinitionFault
from cairn.model.awaiting import RECOVERY_PREFIX
from cairn.model.definition import (
    BRANCH_OUTCOMES,
    EndNode,
    ParallelNode,
    PersistKind,
    TaskNode,
    WaitNode,
    WorkflowDefinition,
)


def validate_graph(definition: WorkflowDefinition) -> list[DefinitionFault]:
    faults: list[DefinitionFault] = []
    nodes = definition.nodes
    if definition.start and definition.start not in nodes:
        faults.append(
            DefinitionFault("unknown_target", f"start {definition.start!r} is not a node")
        )
    faults.extend(_unknown_targets(definition))
    faults.extend(_on_resume_faults(definition))
    faults.extend(_anomaly_faults(definition))
    for node_id, node in nodes.items():
        if isinstance(node, WaitNode):
            faults.extend(
                DefinitionFault(
                    "reserved_name",
                    f"signal {name!r}: names starting with {RECOVERY_PREFIX!r} are cairn's own "
                    "(an operator's decision about a held node)",
                    node_id,
                )
                for name in node.signals
                if name.startswith(RECOVERY_PREFIX)
            )
    faults.extend(_join_faults(definition))
    faults.extend(_persist_faults(definition))
    if definition.start in definition.branch_parents:
        faults.append(
            DefinitionFault(
                "join_non_branch", "a parallel branch cannot be the start", definition.start
            )
        )
    edges = successors(definition)
    reachable = _closure([definition.start] if definition.start in nodes else [], edges)
    for node_id in nodes:
        if node_id not in reachable:
            faults.append(
                DefinitionFault(
                    "unreachable", f"no path from start {definition.start!r} leads here", node_id
                )
            )
    ends = [node_id for node_id, node in nodes.items() if isinstance(node, EndNode)]
    if not ends:
        faults.append(DefinitionFault("no_end", "the workflow has no end node"))
    finishing = _closure(ends, _reverse(edges))
    for node_id, node in nodes.items():
        if node_id in finishing:
            continue
        if (
            isinstance(node, TaskNode)
            and node.next is None
            and node.branch is None
            and node.route is None
            and node_id not in definition.branch_parents
        ):
            message = "has no next, branch or route and is not a parallel branch: a dead end"
        else:
            message = "no path from here reaches an end node"
        faults.append(DefinitionFault("no_path_to_end", message, node_id))
    faults.extend(_unbounded_cycles(definition, edges))
    return faults


def successors(definition: WorkflowDefinition) -> dict[str, list[str]]:
    """Node id -> the nodes the run may move to next (a branch's next is its join's next)."""
    edges: dict[str, list[str]] = {}
    for node_id, node in definition.nodes.items():
        targets = [target for _, target in node.targets() if target in definition.nodes]
        replan = definition.on_resume.replan if definition.on_resume else ""
        if replan in definition.nodes and isinstance(node, TaskNode) and node.handler:
            targets.append(replan)  # any recovered node may be sent to re-planning
        handoff = definition.anomaly.handoff if definition.anomaly else None
        if handoff is not None and handoff in definition.nodes and watched(definition, node_id):
            targets.append(handoff)  # an anomaly caught on the way in hands the run over
        parent = definition.branch_parents.get(node_id)
        if parent is not None:
            join_next = definition.nodes[parent]
            assert isinstance(join_next, ParallelNode)
            if join_next.next in definition.nodes:
                targets.append(join_next.next)
        edges[node_id] = list(dict.fromkeys(targets))
    return edges


def _unknown_targets(definition: WorkflowDefinition) -> Iterator[DefinitionFault]:
    for node_id, node in definition.nodes.items():
        branch_wait = isinstance(node, WaitNode) and node_id in definition.branch_parents
        for label, target in node.targets():
            if branch_wait and target in BRANCH_OUTCOMES:
                continue  # how the branch ends (see _join_faults)
            if target and target not in definition.nodes:
                yield DefinitionFault(
                    "unknown_target", f"{label} leads to {target!r}, which is not a node", node_id
                )


def _on_resume_faults(definition: WorkflowDefinition) -> Iterator[DefinitionFault]:
    if definition.on_resume is None:
        return
    replan = definition.on_resume.replan
    if replan not in definition.nodes:
        yield DefinitionFault(
            "unknown_target", f"on_resume.replan leads to {replan!r}, which is not a node"
        )
    elif replan in definition.branch_parents:
        yield DefinitionFault(
            "bad_value",
            "on_resume.replan must not be a parallel branch: re-planning takes the whole run",
            replan,
        )


def _anomaly_faults(definition: WorkflowDefinition) -> Iterator[DefinitionFault]:
    policy = definition.anomaly
    if policy is None or policy.handoff is None:
        return
    target = definition.nodes.get(policy.handoff)
    if target is None:
        yield DefinitionFault(
            "unknown_target",
            f"anomaly.on_detect.then hands off to {policy.handoff!r}, which is not a node",
        )
    elif not isinstance(target, WaitNode):
        yield DefinitionFault(
            "bad_anomaly",
            f"anomaly.on_detect.then hands off to {policy.handoff!r}, which is a "
            f"{target.kind} node, not a wait: a hand-off waits for a person",
        )


def _join_faults(definition: WorkflowDefinition) -> Iterator[DefinitionFault]:
    owners: dict[str, str] = {}
    for node_id, node in definition.nodes.items():
        if not isinstance(node, ParallelNode):
            continue
        for branch in node.branches:
            branch_node = definition.nodes.get(branch)
            if branch_node is None:
                yield DefinitionFault(
                    "join_unknown_branch", f"branch {branch!r} is not a node", node_id
                )
                continue
            if branch in owners:
                yield DefinitionFault(
                    "join_non_branch",
                    f"branch {branch!r} already belongs to parallel node {owners[branch]!r}",
                    node_id,
                )
            owners[branch] = node_id
            if isinstance(branch_node, WaitNode):
                ends = {target for _label, target in branch_node.targets() if target}
                if not ends <= BRANCH_OUTCOMES:
                    yield DefinitionFault(
                        "join_non_branch",
                        f"branch {branch!r} is a wait: its signals and its timeout end the "
                        f"branch (succeeded or failed), not {sorted(ends - BRANCH_OUTCOMES)}",
                        node_id,
                    )
            elif (
                not isinstance(branch_node, TaskNode)
                or (branch_node.handler is None and branch_node.child is None)
                or branch_node.next
                or branch_node.branch
                or branch_node.route
            ):
                yield DefinitionFault(
                    "join_non_branch",
                    f"branch {branch!r} must be a task with a handler (or a child workflow) and "
                    "no edges of its own (its continuation is the join), or a wait ending it",
                    node_id,
                )
    for node_id, node in definition.nodes.items():
        for label, target in node.targets():
            if target in owners and label != "fan_out":
                yield DefinitionFault(
                    "join_non_branch",
                    f"{label} leads into {target!r}, a branch of {owners[target]!r}; branches "
                    "run only through their parallel node",
                    node_id,
                )


def _persist_faults(definition: WorkflowDefinition) -> Iterator[DefinitionFault]:
    for node_id, node in definition.nodes.items():
        if not isinstance(node, TaskNode):
            continue
        kind = node.persist.kind
        if kind is not PersistKind.DURABLE and (
            node.irreversible or node.compensate is not None or node.child
        ):
            why = (
                "a cached result would stand in for running it"
                if kind is PersistKind.CACHED
                else "it may run again after a crash with no record of the first time"
            )
            yield DefinitionFault(
                "bad_persist",
                f"{why}: a node with external effects (irreversible, compensable) or a child "
                f"run must be durable, not {kind.value}",
                node_id,
            )
        if kind is not PersistKind.DURABLE and node.handler is None:
            yield DefinitionFault(
                "bad_persist", f"only a task with a handler can be {kind.value}", node_id
            )
        for target in node.invalidates:
            other = definition.nodes.get(target)
            if not isinstance(other, TaskNode) or other.persist.kind is not PersistKind.CACHED:
                yield DefinitionFault(
                    "bad_persist", f"invalidates {target!r}, which is not a cached task", node_id
                )


def _closure(roots: Iterable[str], edges: Mapping[str, list[str]]) -> set[str]:
    seen = set(roots)
    queue = deque(seen)
    while queue:
        for nxt in edges.get(queue.popleft(), ()):
            if nxt not in seen:
                seen.add(nxt)
                queue.append(nxt)
    return seen


def _reverse(edges: Mapping[str, list[str]]) -> dict[str, list[str]]:
    reverse: dict[str, list[str]] = {node: [] for node in edges}
    for source, targets in edges.items():
        for target in targets:
            reverse.setdefault(target, []).append(source)
    return reverse


def _unbounded_cycles(
    definition: WorkflowDefinition, edges: Mapping[str, list[str]]
) -> Iterator[DefinitionFault]:
    """A loop is bounded when it passes a node with a visit limit. Loops that avoid every
    bounded node are exactly the cycles of the graph with the bounded nodes taken out."""
    unbounded = {node for node in edges if definition.visit_limit(node) is None}
    free_edges = {node: [t for t in edges[node] if t in unbounded] for node in unbounded}
    for component in strongly_connected(free_edges):
        looped = len(component) > 1 or component[0] in free_edges.get(component[0], ())
        if not looped:
            continue
        cycle = " -> ".join(component)
        yield DefinitionFault(
            "unbounded_cycle",
            f"the loop {cycle} has no bound: give one of its nodes max_visits (or set a "
            "workflow-wide max_visits)",
            component[0],
        )


def strongly_connected(edges: Mapping[str, list[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative (definitions may be long chains)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    counter = 0
    for root in edges:
        if root in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(root, iter(edges.get(root, ())))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(edges.get(child, ()))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                components.append(component[::-1])
    return components
