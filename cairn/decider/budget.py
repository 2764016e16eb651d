"""Cost budgets: what a run may spend (model tokens, dollars, API calls), how a fan-out
splits what is left across its branches, and what one execution may still spend.

Handlers report what they spent with ``ctx.charge(tokens=...)``; the amount rides on the
execution's result event and the decider adds it to the node's visit and to the run.
Limits nest: the run's ``budget``, a parallel node's share of it split across its
branches (by ``shares``, equal by default, fixed when the branches start), and a node's
own ``budget`` per visit. An execution may spend the least of what each leaves, so one
branch that burns its part cannot take its siblings'. Pure functions of the definition
and the state, like the decider that uses them.
"""

from __future__ import annotations

from collections.abc import Mapping

from cairn.model.definition import ParallelNode, WorkflowDefinition
from cairn.model.state import RunState

Amounts = Mapping[str, float]


def added(spent: Amounts | None, charges: Amounts | None) -> dict[str, float]:
    """``spent`` plus ``charges``, unit by unit."""
    total = dict(spent or {})
    for unit, amount in (charges or {}).items():
        total[unit] = total.get(unit, 0.0) + amount
    return total


def run_left(definition: WorkflowDefinition, state: RunState) -> dict[str, float]:
    """What the run may still spend, for each unit its budget limits."""
    limits = run_limits(definition, state)
    return {unit: max(0.0, limit - state.spent.get(unit, 0.0)) for unit, limit in limits.items()}


def branch_allowances(
    definition: WorkflowDefinition, state: RunState, parallel: ParallelNode
) -> dict[str, dict[str, float]]:
    """Each branch's part of what the fan-out may spend: the parallel node's own budget,
    never more than the run has left, split by the branches' shares."""
    pool = _least(run_left(definition, state), parallel.budget or {})
    if not pool:
        return {}
    weights = {branch: parallel.shares.get(branch, 1.0) for branch in parallel.branches}
    total = sum(weights.values()) or 1.0
    return {
        branch: {unit: amount * weight / total for unit, amount in pool.items()}
        for branch, weight in weights.items()
    }


def allowance(definition: WorkflowDefinition, state: RunState, node_id: str) -> dict[str, float]:
    """What the current execution of ``node_id`` may spend, for each limited unit: the
    least of what the run, its branch's part and the node's own budget leave."""
    current = state.nodes.get(node_id)
    spent = (current.spent if current is not None else None) or {}
    limits: list[Amounts] = [run_left(definition, state)]
    parent = definition.branch_parents.get(node_id)
    join = state.joins.get(parent) if parent is not None else None
    if join is not None and node_id in join.allowances:
        limits.append(_minus(join.allowances[node_id], spent))
    own = definition.nodes[node_id].budget
    if own:
        limits.append(_minus(own, spent))
    return _least(*limits)


def run_limits(definition: WorkflowDefinition, state: RunState) -> dict[str, float]:
    """The definition's budget, narrowed by what a child run's parent gave it."""
    return _least(definition.budget, state.budget or {})


def _minus(limits: Amounts, spent: Amounts) -> dict[str, float]:
    return {unit: max(0.0, limit - spent.get(unit, 0.0)) for unit, limit in limits.items()}


def _least(*limits: Amounts) -> dict[str, float]:
    """Unit by unit, the smallest of the given limits (a unit one of them leaves out is
    limited by the others)."""
    least: dict[str, float] = {}
    for limit in limits:
        for unit, amount in limit.items():
            least[unit] = min(amount, least.get(unit, amount))
    return least
