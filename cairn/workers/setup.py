"""An execution's set-up, the same however a worker comes to run it — from its own
message, or fused after an ephemeral node in the same go (:mod:`cairn.decider.fusion`):
what admits it (its concurrency pools and its dependencies' circuits), what it records as
it runs (checkpoints and model calls, fenced by a claim, its calls under its rate
limits), and the step context its handler is given."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any

from cairn.artifacts import Artifacts
from cairn.config import Settings
from cairn.decider.budget import allowance
from cairn.effects.ledger import EffectLedger, effect_scope
from cairn.engine.executions import Executions
from cairn.engine.reads import Restored
from cairn.engine.slots import SlotGate
from cairn.lease.heartbeat import Beat, Heartbeats
from cairn.lease.port import Leases
from cairn.limits.circuits import rate_dependency
from cairn.limits.concurrency import Pool, pools_for
from cairn.limits.limiter import RateLimiter
from cairn.limits.rates import Rates, buckets_for
from cairn.model.definition import (
    AnyNode,
    Dependency,
    PersistKind,
    TaskNode,
    WorkflowDefinition,
)
from cairn.model.events import Phase
from cairn.model.keys import Claim
from cairn.model.messages import NodeMessage
from cairn.model.state import RunState
from cairn.observe.logs import retag_node
from cairn.recording.calls import ModelCalls
from cairn.store.records import RunRecord
from cairn.workers.checkpoints import Checkpoints
from cairn.workers.circuit_watch import CircuitWatch, Guarded
from cairn.workers.context import StepContext


@dataclass(frozen=True)
class Claimed:
    """What one message's execution holds: its run as read, the definition, the state as
    the decider last left it, its claim's fencing token and heartbeat. A node fused after
    it runs under the same."""

    run: RunRecord
    definition: WorkflowDefinition
    known: Restored
    fence: int
    beat: Beat


@dataclass(frozen=True)
class Recorders:
    """What an execution records as it runs, each write fenced by a claim."""

    checkpoints: Checkpoints
    calls: ModelCalls


@dataclass
class StepSetup:
    executions: Executions  # the recorders' parts, and the store effects and artifacts use
    leases: Leases
    settings: Settings
    heartbeats: Heartbeats
    gate: SlotGate | None = None
    circuits: CircuitWatch | None = None
    rates: Rates | None = None

    # -- admission ------------------------------------------------------------------------

    def admission(
        self,
        definition: WorkflowDefinition,
        node: AnyNode,
        message: NodeMessage,
        run: RunRecord,
        state: RunState,
    ) -> tuple[list[Pool], Guarded | None]:
        """The pools the execution takes a slot of — its concurrency pools, and the
        pools of its circuits that are not closed — and its circuits as it found them
        (None: it has none to tell), one read of them."""
        guarded = (
            self.circuits.look(message, self.dependencies(definition, node, run, state))
            if self.circuits is not None
            else None
        )
        pools = self.pools(definition, node, message, run, state)
        if guarded is not None and self.gate is not None:
            pools += guarded.pools
        return pools, guarded

    def pools(
        self,
        definition: WorkflowDefinition,
        node: AnyNode,
        message: NodeMessage,
        run: RunRecord,
        state: RunState,
    ) -> list[Pool]:
        """The concurrency pools the execution takes a slot of."""
        if self.gate is None or message.phase is not Phase.RUN or not isinstance(node, TaskNode):
            return []
        return pools_for(
            definition,
            node,
            namespace=run.namespace,
            state=state.vars,
            run_input=run.input,
            namespace_limit=self.settings.namespace_concurrency,
            owner=run.workflow_namespace,
        )

    def dependencies(
        self, definition: WorkflowDefinition, node: AnyNode, run: RunRecord, state: RunState
    ) -> tuple[Dependency, ...]:
        """What the execution's circuits guard: the dependencies its node declares, and
        each rate limit's key (its provider), with the default thresholds."""
        if self.circuits is None or not isinstance(node, TaskNode):
            return ()
        if not node.rate and not definition.rate:
            return node.dependencies
        buckets = buckets_for(
            definition,
            node,
            namespace=run.namespace,
            state=state.vars,
            run_input=run.input,
            owner=run.workflow_namespace,
        )
        return (*node.dependencies, *(rate_dependency(bucket.name) for bucket in buckets))

    # -- recording ------------------------------------------------------------------------

    def recorders(
        self,
        message: NodeMessage,
        node: AnyNode,
        claim: Claim,
        beat: Beat,
        *,
        may_have_record: bool,
    ) -> Recorders | None:
        """What the execution records as it runs — its checkpoints and its model calls —
        each write fenced by ``claim``: its own, or (a node fused after an ephemeral
        one, with no row of its own yet) the chain's first, its records then stamped
        fence 0, which any claim of its own may overwrite. None for an ephemeral node:
        it may run again after a crash with nothing to answer from."""
        if not isinstance(node, TaskNode) or node.persist.kind is PersistKind.EPHEMERAL:
            return None
        own = claim.key == message.key
        fence = claim.fence if own else 0
        common: dict[str, Any] = {
            "max_bytes": self.settings.max_payload_bytes,
            "reconnect_within": self.settings.reconnect_within,
            "lease_trusted": partial(self.heartbeats.confirm, beat),
            "claim": None if own else claim,
        }
        door, key, attempt = self.executions, message.key, message.attempt
        return Recorders(
            Checkpoints(door.checkpoints, key, attempt, fence, policy=node.checkpoint, **common),
            ModelCalls(
                door.model_calls,
                key,
                attempt,
                fence,
                may_have_record=may_have_record,
                prices=self.settings.model_prices,
                publish_chunks=partial(self.leases.append_chunks, message.run_id),
                context=node.context,
                inline_bytes=self.settings.model_inline_bytes,
                **common,
            ),
        )

    def limiter(
        self,
        definition: WorkflowDefinition,
        node: AnyNode,
        run: RunRecord,
        state: RunState,
        beat: Beat,
    ) -> RateLimiter | None:
        """The rate buckets of the execution's model calls (None: no limit applies)."""
        if self.rates is None or not isinstance(node, TaskNode):
            return None
        if not node.rate and not definition.rate:
            return None
        buckets = buckets_for(
            definition,
            node,
            namespace=run.namespace,
            state=state.vars,
            run_input=run.input,
            owner=run.workflow_namespace,
        )
        settings = self.settings
        return RateLimiter(
            self.rates,
            buckets,
            default_output_tokens=settings.rate_output_tokens,
            max_refusals=settings.rate_max_refusals,
            default_pause_s=settings.rate_pause,
            reconnect_within=settings.reconnect_within,
            cancelled=beat.cancelled.is_set,
            lease_lost=lambda: not self.heartbeats.confirm(beat),
        )

    # -- the handler's view -----------------------------------------------------------------

    def context(
        self,
        claimed: Claimed,
        message: NodeMessage,
        state: RunState,
        *,
        queued_s: float | None,
        recorders: Recorders | None,
        restore: bool,
    ) -> StepContext:
        """The handler's ``ctx``; ``restore``: the execution may resume from a checkpoint
        an interrupted one left (a first attempt spends no read on it)."""
        definition, beat = claimed.definition, claimed.beat
        retag_node(message)  # a fused chain's next node logs as itself
        return StepContext(
            run_id=message.run_id,
            workflow=message.workflow,
            node=message.node,
            iteration=message.iteration,
            attempt=message.attempt,
            phase=message.phase.value,
            state=state,
            lease_valid=lambda: beat.valid,
            cancel_requested=beat.cancelled.is_set,
            resumed=message.resumed,
            allowance=allowance(definition, state, message.node)
            if message.phase is Phase.RUN
            else None,
            effects=self._effects(claimed, message),
            on_progress=lambda p: self.heartbeats.progress(
                beat, done=p.done, total=p.total, message=p.message
            ),
            artifacts=Artifacts.for_step(
                self.executions.store,
                self.settings,
                run_id=message.run_id,
                node=message.node,
                iteration=message.iteration,
                attempt=message.attempt,
                phase=message.phase.value,
            ),
            queued_s=queued_s,
            checkpoints=recorders.checkpoints if recorders is not None else None,
            model_calls=recorders.calls if recorders is not None else None,
            restored=recorders.checkpoints.load() if recorders is not None and restore else None,
        )

    def _effects(self, claimed: Claimed, message: NodeMessage) -> EffectLedger:
        node = claimed.definition.nodes[message.node]
        ephemeral = isinstance(node, TaskNode) and node.persist.kind is PersistKind.EPHEMERAL
        return EffectLedger(
            self.executions.store,
            namespace=claimed.run.namespace,
            run_id=message.run_id,
            node=message.node,
            iteration=message.iteration,
            attempt=message.attempt,
            fence=claimed.fence,
            max_payload_bytes=self.settings.max_payload_bytes,
            scope=effect_scope(claimed.run),  # a live fork's keys are its own
            phase=message.phase.value,  # with the key: whose PostgreSQL fence counts
            reconnect_within=self.settings.reconnect_within,
            # Past its own lease deadline this worker asks Redis before any call.
            lease_trusted=partial(self.heartbeats.confirm, claimed.beat),
            cancel_timeout_s=claimed.definition.cancel_timeout.total_seconds(),
            refusal=f"{message.node} is ephemeral: it may run again after a crash "
            "without a record, so it cannot have external effects"
            if ephemeral
            else None,
        )
