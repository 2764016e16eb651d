"""What one decision writes, worked out before any write: the run row's new values, the
event, a snapshot if one is due, the dispatches (outbox rows and execution rows), the
run's timers, and the commands that change other rows. Either path carries a plan out:
the backend's one-statement step, or the locking transaction (:mod:`cairn.engine.advance`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from cairn.config import Settings
from cairn.decider import Decision, decide
from cairn.engine.inputs import FreshRun
from cairn.engine.notices import Notice, notices
from cairn.model.commands import (
    ArmTimer,
    CancelNode,
    Command,
    DetachNode,
    DisarmTimer,
    Dispatch,
    HoldExecution,
    NotifyParent,
    SettleExecution,
    StartChild,
)
from cairn.model.definition import WorkflowDefinition
from cairn.model.events import Event, RunMigrated, event_to_dict
from cairn.model.messages import NodeMessage, message_namespace
from cairn.model.outcomes import NodeOutcome, RunWrite, StepWrites
from cairn.model.payloads import json_text
from cairn.model.state import STATE_FORMAT, RunState
from cairn.model.statuses import RunStatus
from cairn.store.records import RunRecord, encode_snapshot, from_epoch, to_epoch, utcnow

# Commands that change rows besides the step's own (the fast path takes none of them;
# the run's timers are the step's own: see StepWrites).
ROW_COMMANDS = (
    CancelNode,
    DetachNode,
    HoldExecution,
    SettleExecution,
    StartChild,
    NotifyParent,
)


@dataclass
class Plan:
    """What one decision writes: computed before any write, carried out by either path."""

    decision: Decision
    run: RunWrite  # the run row as the step leaves it
    snapshot: str | None  # the state as JSON text, when a snapshot is due
    dispatches: list[NodeMessage]
    row_commands: Sequence[Command]  # cancellations, holds, children: other rows
    notices: Sequence[Notice]  # for the run's webhook
    armed: Sequence[tuple[str, float]]  # the run's timers: (id, due at) ...
    disarmed: Sequence[str]  # ... and ids, the decision's net effect on them

    @property
    def writes_other_rows(self) -> bool:
        """Rows besides the run's, its event and its dispatches: not for the
        one-statement paths."""
        return bool(self.row_commands or self.notices)


class Planner:
    """Plans steps under the settings' snapshot and cache policy."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def plan(
        self,
        row: RunRecord | FreshRun,
        definition: WorkflowDefinition,
        state: RunState,
        event: Event,
        *,
        cached: bool = True,
        serialized: bool = True,
    ) -> tuple[Decision, Plan | None]:
        """Decide, and work out every row the decision writes (None if it was ignored).
        ``cached``: whether the run's row held its state before this step;
        ``serialized``: whether the row's cache is written from the new state (else only
        a snapshot is, when due: for a step that may not write the state whole — a
        branch's merge — until :meth:`serialize` says otherwise)."""
        decision = decide(definition, state, event)
        if decision.ignored:
            return decision, None
        new = decision.state
        seq = row.last_seq + 1
        run, snapshot = self._run_write(row, new, seq, event, cached and serialized)
        dispatches = [
            NodeMessage(
                row.id,
                definition.qualified,
                definition.version,
                c.node,
                c.iteration,
                c.attempt,
                c.phase,
                resumed=c.resumed,
                queue=definition.queue_of(c.node),
                priority=row.priority,
                namespace=message_namespace(row.namespace),
            )
            for c in decision.commands
            if isinstance(c, Dispatch)
        ]
        row_commands = [c for c in decision.commands if isinstance(c, ROW_COMMANDS)]
        announced = (
            notices(state, new, decision.commands, seq, row.namespace) if row.webhook_url else []
        )
        armed, disarmed = net_timers(decision.commands)
        return decision, Plan(
            decision, run, snapshot, dispatches, row_commands, announced, armed, disarmed
        )

    def _run_write(
        self, row: RunRecord | FreshRun, new: RunState, seq: int, event: Event, cached: bool
    ) -> tuple[RunWrite, str | None]:
        """The run row after the step, and the snapshot (the state as JSON text) when one
        is due."""
        at = from_epoch(event.at)
        # A migration's snapshot is the run's first state on its new version: restoring
        # the run never replays across the change of definition.
        snapshot_due = isinstance(event, RunMigrated) or self.snapshot_due(row, new, seq, event.at)
        # Serialized once, for the row's cache and a snapshot alike — and only for them: an
        # agent's state with its message history is the largest thing a step writes, and
        # a state the row could not cache last step (too large) is not serialized again
        # at every step of a long run to learn so; the next snapshot tells.
        state_json = None
        if snapshot_due or (cached and self.settings.state_cache_bytes > 0):
            state_json = json_text(new.to_dict())
        cacheable = state_json is not None and len(state_json) <= self.settings.state_cache_bytes
        run = RunWrite(
            status=new.status,
            last_seq=seq,
            updated_at=at,
            current=sorted(f"{n.node}#{n.iteration}" for n in new.active_nodes),
            reason=new.reason,
            state_json=state_json if cacheable else None,
            finished_at=at if new.status.terminal else None,
            snapshot_seq=seq if snapshot_due else None,
            snapshot_at=at if snapshot_due else None,
        )
        return run, state_json if snapshot_due else None

    def serialize(self, plan: Plan, *, cached: bool) -> Plan:
        """``plan`` (planned with ``serialized=False``) writing the row's cache after all,
        as the cache policy says (``cached``: whether the row held it before the step)."""
        run = plan.run
        if run.state_json is not None or not cached or self.settings.state_cache_bytes <= 0:
            return plan
        state_json = json_text(plan.decision.state.to_dict())
        if len(state_json) > self.settings.state_cache_bytes:
            return plan
        return replace(plan, run=replace(run, state_json=state_json))

    def snapshot_due(self, row: RunRecord | FreshRun, new: RunState, seq: int, at: float) -> bool:
        """Snapshots compress the log: every K events, every T seconds, and whenever the
        run parks (waits) or ends, so that restoring a parked run replays nothing."""
        if new.status in (RunStatus.WAITING,) or new.status.terminal:
            return True
        if seq - row.snapshot_seq >= self.settings.snapshot_every_events:
            return True
        last = to_epoch(row.snapshot_at or row.created_at)
        return bool(at - last >= self.settings.snapshot_every_s)

    def writes(self, plan: Plan, event: Event, sent: Sequence[int]) -> StepWrites:
        """The plan as the store's step writes it (``sent``: outbox marks riding along)."""
        snapshot = None
        if plan.snapshot is not None:
            codec, body = encode_snapshot(plan.snapshot, self.settings.snapshot_compress_bytes)
            snapshot = (STATE_FORMAT, codec, body)
        return StepWrites(
            run=plan.run,
            event=event_to_dict(event),
            outcome=outcome_record(plan.decision),
            sent=sent,
            dispatches=[(m.key, m.attempt, m.to_dict()) for m in plan.dispatches],
            snapshot=snapshot,
            armed=plan.armed,
            disarmed=plan.disarmed,
        )


def result_values(outcome: NodeOutcome, worker: str) -> dict[str, Any]:
    """The idempotency row's columns for a worker's result."""
    return {
        "status": outcome.status.value,
        "result": dict(outcome.result) if outcome.result is not None else None,
        "error_class": outcome.error_class,
        "error": outcome.error,
        "finished_at": utcnow(),
        "duration_s": outcome.duration_s,
        "worker": worker,
    }


def outcome_record(decision: Decision) -> dict[str, Any]:
    """What the decision did, kept beside its event for people reading the history."""
    commands = []
    for command in decision.commands:
        entry = {"command": type(command).__name__}
        entry.update(
            {k: (v.value if hasattr(v, "value") else v) for k, v in command.__dict__.items()}
        )
        commands.append(entry)
    return {
        "status": decision.state.status.value,
        "transitions": [[t.source, t.label, t.target] for t in decision.transitions],
        "commands": commands,
    }


def net_timers(commands: Sequence[Command]) -> tuple[list[tuple[str, float]], list[str]]:
    """What a decision's timer commands leave, in order: the timers armed (id, due at)
    and those disarmed, disjoint — one statement writes both, so no row may be in both."""
    final: dict[str, float | None] = {}
    for command in commands:
        if isinstance(command, ArmTimer):
            final[command.timer_id] = command.due_at
        elif isinstance(command, DisarmTimer):
            final[command.timer_id] = None
    armed = [(timer_id, due) for timer_id, due in final.items() if due is not None]
    return armed, [timer_id for timer_id, due in final.items() if due is None]
