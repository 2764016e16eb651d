"""Stage 4, execute: the handler on the restored state with its step context, its
recorders fenced by the chain's claim, its model calls under its rate limits, held to its
node's timeout (:mod:`cairn.workers.deadlines`) — or a cached node's result taken from the
cache. After an ephemeral node, what it leads to runs here and now through the same
admission and the same execution (:func:`run_on`), to be committed together.

An async handler of a durable node may be awaited instead (:func:`awaitable`, then
:func:`execute_awaited` on the process's loop): equipped and given its context here, by
the thread that holds it, then awaited with no thread waiting for it (a Celery worker's
pool slot goes back to the pool meanwhile: :mod:`cairn.workers.awaiting`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from cairn.decider.fusion import MAX_FUSED, fused_next
from cairn.lease.waits import current_wait
from cairn.model.definition import OnResume, PersistKind, TaskNode
from cairn.model.events import Phase
from cairn.model.handlers import is_async
from cairn.model.messages import NodeMessage
from cairn.model.outcomes import NodeOutcome
from cairn.model.state import RunState
from cairn.model.statuses import NodeStatus
from cairn.workers.cache import keep, node_entry
from cairn.workers.circuit_watch import Guarded
from cairn.workers.context import StepContext
from cairn.workers.execute import execute as run_handler
from cairn.workers.execute import execute_awaited as await_handler
from cairn.workers.execute import succeeded
from cairn.workers.setup import Claimed, Recorders
from cairn.workers.step.admit import Chain, admit_successor
from cairn.workers.step.hold import Held

if TYPE_CHECKING:
    from cairn.workers.runner import NodeRunner


@dataclass
class Ran:
    """The chain's results, in order (the held node's first), and the step's parts'
    timings for the fleet's histograms."""

    steps: list[tuple[NodeMessage, NodeOutcome]]
    timings: dict[str, float] = field(default_factory=dict)


def execute(runner: NodeRunner, held: Held) -> Ran:
    message = held.message
    outcome = execute_node(
        runner,
        held.claimed,
        held.chain,
        message,
        state=held.claimed.known.state,
        guarded=held.admitted.guarded,
        handler=held.admitted.read.handler.resolve(),
        queued_s=current_wait(),
        # Only a re-execution can find a checkpoint: a first attempt spends no read on it.
        restore=message.resumed or message.attempt > 1,
    )
    ran = Ran([(message, outcome)])
    if outcome.duration_s is not None:
        ran.timings["execution"] = outcome.duration_s
    ran.steps += run_on(runner, held, message, outcome)
    return ran


@dataclass(frozen=True)
class Awaitable:
    """A held node ready to be awaited on the loop: its handler, its context (recorders
    made, a checkpoint restored), and how it is run."""

    held: Held
    handler: Any
    ctx: StepContext
    how: dict[str, Any]


def awaitable(runner: NodeRunner, held: Held) -> Awaitable | None:
    """The held node, made ready to be awaited by :func:`execute_awaited` — or None: it
    runs as ever (:func:`execute`). Awaited: an async handler of a durable node. An
    ephemeral node's successors run on after it, a cached node's result may come from
    the cache: both are run by the thread that holds them, as is a plain handler (with
    an async on_resume check or not)."""
    read, message, claimed = held.admitted.read, held.message, held.claimed
    node = read.node
    if not isinstance(node, TaskNode) or node.persist.kind is not PersistKind.DURABLE:
        return None
    handler = read.handler.resolve()
    if not is_async(handler):  # a plain one is run by a thread, whatever its check is
        return None
    definition = claimed.definition
    check = definition.on_resume if message.resumed and message.phase is Phase.RUN else None
    state = claimed.known.state
    recorders = _equip(runner, claimed, message, state, held.chain)
    ctx = runner.setup.context(
        claimed,
        message,
        state,
        queued_s=current_wait(),
        recorders=recorders,
        restore=message.resumed or message.attempt > 1,
    )
    return Awaitable(held, handler, ctx, _how(runner, claimed, message, ctx, check))


async def execute_awaited(runner: NodeRunner, ready: Awaitable) -> Ran:
    """The handler awaited on this process's loop: no thread waits for it. What follows
    (its circuits told, the commit, the release) is for a thread to do."""
    message = ready.held.message
    outcome = await await_handler(ready.handler, ready.ctx, message, **ready.how)
    ran = Ran([(message, outcome)])
    if outcome.duration_s is not None:
        ran.timings["execution"] = outcome.duration_s
    return ran


def execute_node(
    runner: NodeRunner,
    claimed: Claimed,
    chain: Chain,
    message: NodeMessage,
    *,
    state: RunState,
    guarded: Guarded | None,
    handler: Any,
    queued_s: float | None,
    restore: bool,
) -> NodeOutcome:
    """One node of the chain run: equipped, given its context, its outcome reported to
    the circuits it depends on. The held node and each one run on after it pass here."""
    recorders = _equip(runner, claimed, message, state, chain)
    ctx = runner.setup.context(
        claimed, message, state, queued_s=queued_s, recorders=recorders, restore=restore
    )
    outcome = _outcome(runner, claimed, message, state=state, ctx=ctx, handler=handler)
    if runner.circuits is not None and guarded is not None:
        runner.circuits.report(message, guarded, outcome)
    return outcome


def run_on(
    runner: NodeRunner, held: Held, message: NodeMessage, outcome: NodeOutcome
) -> list[tuple[NodeMessage, NodeOutcome]]:
    """After an ephemeral node: run what it leads to here and now, so that both
    results are committed together (one commit, no broker round trip) — as long as
    the decision is simply "run that task next" (see persist: ephemeral). Each node
    run on is admitted to its own pools and circuits (one full or open ends the chain
    before it: its message goes out with the commit, and waits there), and executed as
    the held node was: its checkpoints and model calls recorded under the chain's claim,
    its calls under its rate limits, its HTTP recorded if it says so."""
    claimed, chain = held.claimed, held.chain
    definition = claimed.definition
    steps: list[tuple[NodeMessage, NodeOutcome]] = []
    state = claimed.known.state
    while len(steps) < MAX_FUSED and claimed.beat.valid:
        following = fused_next(definition, state, message, outcome, claimed.known.now())
        if following is None or runner.pauses.holds(following[1]):
            break  # a paused queue's message goes out with the commit, and waits
        node = definition.nodes[following[1].node]
        assert isinstance(node, TaskNode) and node.handler is not None
        admitted, guarded = admit_successor(
            runner, claimed, chain, message=following[1], node=node, state=following[0]
        )
        if not admitted:
            break
        state, message = following
        # Run here and now, right after the step before it: it never waited in a queue.
        handler = node.handler.resolve()
        outcome = execute_node(
            runner,
            claimed,
            chain,
            message,
            state=state,
            guarded=guarded,
            handler=handler,
            queued_s=0.0,
            restore=chain.resumed,
        )
        steps.append((message, outcome))
    return steps


def _equip(
    runner: NodeRunner, claimed: Claimed, message: NodeMessage, state: RunState, chain: Chain
) -> Recorders | None:
    """The execution's recorders, fenced by the chain's claim (its own, for the
    chain's first), its model calls under its rate limits; kept with the chain, to
    forget their checkpoints once the results are committed."""
    node = claimed.definition.nodes[message.node]
    own = chain.claim.key == message.key
    recorders = runner.setup.recorders(
        message,
        node,
        chain.claim,
        claimed.beat,
        # A re-execution may find calls an interrupted one made; so may a node run
        # on in a chain that runs again (the chain before it may have got that far).
        may_have_record=chain.resumed or (own and message.attempt > 1),
    )
    if recorders is not None:
        recorders.calls.limiter = runner.setup.limiter(
            claimed.definition, node, claimed.run, state, claimed.beat
        )
        chain.recorders.append(recorders)
    return recorders


def _outcome(
    runner: NodeRunner,
    claimed: Claimed,
    message: NodeMessage,
    *,
    state: RunState,
    ctx: StepContext,
    handler: Any,
) -> NodeOutcome:
    """Run the handler — or take a cached node's result from the cache."""
    definition, namespace = claimed.definition, claimed.run.namespace
    check = definition.on_resume if message.resumed and message.phase is Phase.RUN else None
    entry = node_entry(namespace, definition, message, state.vars)
    cached = runner.cache.get(entry) if entry is not None else None
    if cached is not None:
        ctx.log.info("result taken from the cache (%s)", entry)
        return succeeded(ctx, message, cached, 0.0)
    outcome = run_handler(handler, ctx, message, **_how(runner, claimed, message, ctx, check))
    if entry is not None and outcome.status is NodeStatus.SUCCEEDED:
        keep(runner.cache, definition, message, entry, outcome.result or {})
    return outcome


def _how(
    runner: NodeRunner,
    claimed: Claimed,
    message: NodeMessage,
    ctx: StepContext,
    check: OnResume | None,
) -> dict[str, Any]:
    """How a node's handler is run: its check, its timeout and grace, its lease given up
    at an overrun, its output's limit, its HTTP recorded if it says so."""
    node = claimed.definition.nodes[message.node]
    records_http = isinstance(node, TaskNode) and node.record_http
    timeout = node.timeout if isinstance(node, TaskNode) else None
    return {
        "check": check,
        "timeout_s": timeout.total_seconds() if timeout is not None else None,
        "heartbeats": runner.heartbeats,
        "beat": claimed.beat,
        "grace_s": runner.settings.timeout_grace,
        "give_up": partial(runner._give_up_lease, claimed.beat.lease),
        "limit_bytes": runner.settings.max_payload_bytes,
        "http_calls": ctx.model_calls if records_http else None,
    }
