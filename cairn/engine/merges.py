"""A fan-out branch's success, merged onto its run as the run is by then.

A one-statement completion is conditional on the run's seq being the one it was planned
on, so the branches of a fan-out finishing together in different processes lose it to
one another: each loser locks the run, plans again on what it finds and writes again —
for eight branches over two processes, about four in ten. Yet a branch's success that
does not decide its join changes only what is its own — its node, its outcome and output
in the join, its node's timers — and two things every step changes the same way (the
step count, the time of the last step): whatever the siblings did meanwhile, the
decider would decide the same for it on the run as it is. So such a success is written
as a merge (:class:`~cairn.model.outcomes.BranchMerge`): its changes to the state as
operations the store applies to the run as the run's lock hands it over, under the seq
that lock gives it, on two conditions the statement checks there:

* every step since the one it was planned on was a merge too (nothing else moved the
  run: not its status, its budget, its vars), and
* its join is still undecided once it counts: for a join of all the branches (or of the
  critical ones), some sibling has yet to finish; for a quorum, fewer successes than the
  quorum wait.

The last branch of a join fails the second: it plans again on the run as it finds it and
takes the ordinary path, which decides the join. Replaying the log gives the same state:
the decider folds the merged successes in the order of their seqs, which is the order
they took the lock in, and each changes what it changes whatever came before it.

What is not merged, and goes the ordinary way: anything but a branch's success (a
failure can decide its join), a success that charges a budget, adds messages, sessions,
artifacts or patches, arms a timer or dispatches; a step due a snapshot; a state the row
does not cache, or would not once merged.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from cairn.config import Settings
from cairn.engine.plan import Plan
from cairn.engine.reads import Restored
from cairn.model.definition import JoinPolicyKind, ParallelNode, WorkflowDefinition
from cairn.model.events import Event, NodeSucceeded, Phase
from cairn.model.outcomes import BranchMerge
from cairn.model.state import BranchOutcome, JoinState, RunState, TimerState, plain
from cairn.model.statuses import RunStatus

# Operations on the state, as the store applies them (migration 0031's cairn_merged).
Op = dict[str, Any]

_ABSENT = object()


def may_merge(state: RunState, event: Event) -> bool:
    """Whether ``event`` is a branch's success its join waits on: a step that may be
    written as a merge, so planned without serializing the whole state (a merge writes
    only what it changes; :meth:`~cairn.engine.plan.Planner.serialize` if not)."""
    if not (isinstance(event, NodeSucceeded) and event.phase is Phase.RUN):
        return False
    pending = BranchOutcome.PENDING
    return any(
        not join.done and join.outcomes.get(event.node) is pending for join in state.joins.values()
    )


def branch_merge(
    known: Restored,
    definition: WorkflowDefinition,
    event: Event,
    plan: Plan,
    settings: Settings,
) -> BranchMerge | None:
    """The merge that writes ``plan`` (the step ``event`` leads to from ``known``), or
    None where the step must be written the ordinary way (see the module's docstring)."""
    if not (may_merge(known.state, event) and _writes_only_its_step(known, plan, settings)):
        return None
    assert isinstance(event, NodeSucceeded)
    before, after = known.state, plan.decision.state
    ops = _own_changes(before, after, event.node, event.iteration)
    if ops is None:
        return None
    joins = {op["path"][1] for op in ops if op["path"][0] == "joins"}
    if len(joins) != 1:
        return None
    (join,) = joins
    guard = _undecided(definition, before, join)
    if guard is None:
        return None
    current = {f"{n.node}#{n.iteration}" for n in before.active_nodes}
    if not set(plan.run.current) <= current:
        return None
    counted, at_least, at_most = guard
    return BranchMerge(
        ops=ops,
        left=sorted(current - set(plan.run.current)),
        join=join,
        counted=counted,
        at_least=at_least,
        at_most=at_most,
        snapshot_every=settings.snapshot_every_events,
        snapshot_every_s=settings.snapshot_every_s,
        cache_bytes=settings.state_cache_bytes,
    )


def _writes_only_its_step(known: Restored, plan: Plan, settings: Settings) -> bool:
    """Whether the plan writes nothing but the step (no message, timer, snapshot or other
    row) and leaves the run running, on a row that caches its state."""
    run = plan.run
    return (
        known.cached
        and settings.state_cache_bytes > 0
        and known.row.status is RunStatus.RUNNING
        and run.status is RunStatus.RUNNING
        and run.reason == known.row.reason
        and not (plan.dispatches or plan.armed or plan.snapshot is not None)
        and not plan.writes_other_rows
    )


# The state's fields a branch's success may change, each compared its own way; every
# other field must come out of the step as it went in.
_OWN = ("nodes", "joins", "timers", "steps", "updated_at")
_REST = tuple(f.name for f in fields(RunState) if f.name not in _OWN)


def _own_changes(before: RunState, after: RunState, node: str, iteration: int) -> list[Op] | None:
    """The step's changes to the state as operations on its JSON form, if every one is
    the branch's own or a step counter's; else None."""
    for name in _REST:
        old, new = getattr(before, name), getattr(after, name)
        if old is not new and old != new:
            return None
    ops: list[Op] = []
    if before.nodes != after.nodes:
        if _changed(before.nodes, after.nodes) != {node} or node not in after.nodes:
            return None
        ops.append(_set(["nodes", node], plain(after.nodes[node])))
    joins = _join_changes(before.joins, after.joins, node)
    timers = _timers_dropped(before.timers, after.timers, node, iteration)
    if joins is None or timers is None:
        return None
    ops += joins + timers
    if after.steps != before.steps:
        ops.append({"op": "add", "path": ["steps"], "value": after.steps - before.steps})
    if after.updated_at != before.updated_at:
        ops.append(_set(["updated_at"], after.updated_at))
    return ops


def _join_changes(
    old: Mapping[str, JoinState], new: Mapping[str, JoinState], node: str
) -> list[Op] | None:
    """A branch's outcome and output in its one join, undecided before and after."""
    changed = _changed(old, new)
    if len(changed) != 1 or old.keys() != new.keys():
        return None
    (join,) = changed
    was, now = old[join], new[join]
    if (
        was.done
        or now.done
        or (was.node, was.iteration, was.allowances)
        != (
            now.node,
            now.iteration,
            now.allowances,
        )
    ):
        return None
    outcomes, outputs = _changed(was.outcomes, now.outcomes), _changed(was.outputs, now.outputs)
    if outcomes != {node} or not outputs <= {node} or (outputs and node not in now.outputs):
        return None
    ops = [_set(["joins", join, "outcomes", node], now.outcomes[node].value)]
    if outputs:
        ops.append(_set(["joins", join, "outputs", node], dict(now.outputs[node])))
    return ops


def _timers_dropped(
    old: Mapping[str, TimerState], new: Mapping[str, TimerState], node: str, iteration: int
) -> list[Op] | None:
    """The branch's own timers, disarmed (its node's timeout)."""
    ops: list[Op] = []
    for timer in _changed(old, new):
        entry = old.get(timer)
        if timer in new or entry is None or (entry.node, entry.iteration) != (node, iteration):
            return None
        ops.append({"op": "drop", "path": ["timers", timer]})
    return ops


def _undecided(
    definition: WorkflowDefinition, before: RunState, join: str
) -> tuple[list[str], int, int] | None:
    """What keeps ``join`` undecided once the branch counts, as the statement checks it:
    between ``at_least`` and ``at_most`` of its siblings with an outcome in the list."""
    parent = definition.nodes.get(join)
    state = before.joins.get(join)
    if not isinstance(parent, ParallelNode) or state is None:
        return None
    siblings = len(state.outcomes) - 1
    if parent.join.policy is JoinPolicyKind.QUORUM:
        assert parent.join.k is not None
        # Successes so far: the quorum still waits after this one.
        ok = [BranchOutcome.SUCCEEDED.value, BranchOutcome.DEFAULTED.value]
        return (ok, 0, parent.join.k - 2) if parent.join.k >= 2 else None
    # All (or all critical) branches: some sibling must still be pending.
    return [BranchOutcome.PENDING.value], 1, siblings


def _changed(old: Mapping[str, Any], new: Mapping[str, Any]) -> set[str]:
    return {k for k in old.keys() | new.keys() if old.get(k, _ABSENT) != new.get(k, _ABSENT)}


def _set(path: list[Any], value: Any) -> Op:
    return {"op": "set", "path": path, "value": value}
