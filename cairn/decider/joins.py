"""How a parallel node joins its branches: by policy, quorum, criticality, timeout."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from cairn.decider.step import Step, timer_id
from cairn.model.definition import ErrorClass, JoinPolicyKind, JoinRest, ParallelNode
from cairn.model.reducers import ReducerMismatch, reduced
from cairn.model.state import BranchOutcome, JoinState, TimerKind
from cairn.model.statuses import NodeStatus


class Joins(Step):
    # -- joins --------------------------------------------------------------------------

    def branch_finished(
        self, parent_id: str, branch: str, outcome: BranchOutcome, output: Mapping[str, Any] | None
    ) -> None:
        parent = self.definition.nodes[parent_id]
        assert isinstance(parent, ParallelNode)
        join = self.state.joins[parent_id]
        default = self.definition.nodes[branch].default
        if (
            outcome is BranchOutcome.FAILED
            and parent.join.policy is JoinPolicyKind.CRITICAL
            and branch not in parent.join.critical
            and default is not None
        ):
            outcome, output = BranchOutcome.DEFAULTED, default
        join = join.with_outcome(branch, outcome, output)
        self.state.joins[parent_id] = join
        if not join.done and self.moving:
            self.evaluate_join(parent, join)

    def evaluate_join(self, parent: ParallelNode, join: JoinState) -> None:
        outcomes = join.outcomes
        ok = sum(o in (BranchOutcome.SUCCEEDED, BranchOutcome.DEFAULTED) for o in outcomes.values())
        bad = sum(o in (BranchOutcome.FAILED, BranchOutcome.CANCELLED) for o in outcomes.values())
        pending = sum(o is BranchOutcome.PENDING for o in outcomes.values())
        policy = parent.join
        failure: str | None = None
        complete = False
        if policy.policy is JoinPolicyKind.ALL:
            if bad:
                failure = f"{bad} of {len(outcomes)} branches failed (policy all)"
            complete = pending == 0
        elif policy.policy is JoinPolicyKind.QUORUM:
            assert policy.k is not None
            complete = ok >= policy.k
            if not complete and ok + pending < policy.k:
                failure = f"only {ok} of {len(outcomes)} branches can succeed, quorum is {policy.k}"
        else:
            lost = [
                b
                for b in policy.critical
                if outcomes[b] in (BranchOutcome.FAILED, BranchOutcome.CANCELLED)
            ]
            if lost:
                failure = f"critical branch(es) {lost} failed"
            complete = pending == 0
        if failure is not None:
            self.join_failed(parent, join, failure)
        elif complete:
            self.join_complete(parent, join)

    def join_timed_out(self, parent_id: str) -> None:
        parent = self.definition.nodes[parent_id]
        assert isinstance(parent, ParallelNode)
        join = self.state.joins[parent_id]
        for branch, outcome in join.outcomes.items():
            if outcome is not BranchOutcome.PENDING:
                continue
            self.stop_execution(self.state.nodes[branch], "the join timed out")
            default = self.definition.nodes[branch].default
            join = (
                join.with_outcome(branch, BranchOutcome.DEFAULTED, default)
                if default is not None
                else join.with_outcome(branch, BranchOutcome.FAILED)
            )
        self.state.joins[parent_id] = join
        self.evaluate_join(parent, join)

    def join_complete(self, parent: ParallelNode, join: JoinState) -> None:
        self.disarm(timer_id(TimerKind.JOIN_TIMEOUT, parent.id, join.iteration))
        merged: dict[str, Any] = self.state.vars
        try:
            for branch in parent.branches:  # declared order, so the merge is deterministic
                if join.outcomes[branch] in (BranchOutcome.SUCCEEDED, BranchOutcome.DEFAULTED):
                    output = join.outputs.get(branch, {})
                    merged = reduced(self.definition.reducers, merged, output)
        except ReducerMismatch as exc:  # nothing of the branches' outputs is merged
            self.join_failed(parent, join, f"{exc.code}: {exc}")
            return
        if parent.join.rest is JoinRest.CANCEL:
            for branch, outcome in join.outcomes.items():
                if outcome is BranchOutcome.PENDING:
                    self.stop_branch(branch, "the join is complete")
                    join = join.with_outcome(branch, BranchOutcome.CANCELLED)
        self.state.joins[parent.id] = replace(join, done=True)
        self.state.vars = merged
        self.set_node(self.state.nodes[parent.id], NodeStatus.SUCCEEDED)
        self.enter(parent.next, parent.id, "joined")

    def join_failed(self, parent: ParallelNode, join: JoinState, reason: str) -> None:
        self.disarm(timer_id(TimerKind.JOIN_TIMEOUT, parent.id, join.iteration))
        for branch, outcome in join.outcomes.items():
            if outcome is BranchOutcome.PENDING:
                self.stop_branch(branch, "the join failed")
                join = join.with_outcome(branch, BranchOutcome.CANCELLED)
        self.state.joins[parent.id] = replace(join, done=True)
        current = self.set_node(
            self.state.nodes[parent.id],
            NodeStatus.FAILED,
            error_class=ErrorClass.PERMANENT.value,
            error=reason,
        )
        self.after_failure(parent, current, ErrorClass.PERMANENT, f"join failed: {reason}")

    def stop_branch(self, branch: str, reason: str) -> None:
        """Stop a pending branch — if it started: a branch that fails as it is entered
        (a child nested too deep) can decide the join before its siblings start."""
        current = self.state.nodes.get(branch)
        if current is not None and current.status is NodeStatus.WAITING:
            # A person's decision no longer awaited: the wait closes, its timer with it.
            self.disarm(timer_id(TimerKind.WAIT, branch, current.iteration))
            self.set_node(current, NodeStatus.CANCELLED)
        elif current is not None:
            self.stop_execution(current, reason)

    # -- ending: success, failure, cancellation, compensation ---------------------------
