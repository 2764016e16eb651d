"""The compiled workflow model: what the YAML/JSON form and the Python builder both become.

A definition is immutable and already validated (see :mod:`cairn.definitions.loader`):
the decider and the workers can rely on every target existing, every handler being
importable, every loop being bounded. Durations are :class:`~datetime.timedelta`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from enum import StrEnum
from functools import cached_property
from typing import Any

from cairn.model.builds import Versioning
from cairn.model.reducers import Reducer
from cairn.model.schedules import ScheduleSpec
from cairn.model.statuses import RunStatus
from cairn.model.workflow_names import DEFAULT_NAMESPACE, qualified


@dataclass(frozen=True, eq=False)
class Ref:
    """A reference to a handler, guard or compensation as ``"package.module:attribute"``.

    Equality is by path: the same definition loaded from a file and built in Python
    compares equal. ``target`` is the imported object once resolved.
    """

    path: str
    target: Callable[..., Any] | None = None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Ref) and other.path == self.path

    def __hash__(self) -> int:
        return hash(self.path)

    def __repr__(self) -> str:
        return f"Ref({self.path!r})"

    def resolve(self) -> Callable[..., Any]:
        """The callable, importing it on first use."""
        if self.target is not None:
            return self.target
        target = import_ref(self.path)
        object.__setattr__(self, "target", target)
        return target


def import_ref(path: str) -> Callable[..., Any]:
    """Import ``"module:attr.attr"``; raise ImportError/AttributeError/TypeError on failure."""
    module_name, sep, attribute = path.partition(":")
    if not sep or not module_name or not attribute:
        raise ImportError(f"{path!r} is not of the form 'package.module:function'")
    obj: Any = importlib.import_module(module_name)
    for part in attribute.split("."):
        obj = getattr(obj, part)
    if not callable(obj):
        raise TypeError(f"{path!r} is not callable")
    return obj  # type: ignore[no-any-return]


def ref_path_of(obj: Callable[..., Any]) -> str:
    """The import path a worker in another process would use to find ``obj``."""
    return f"{obj.__module__}:{obj.__qualname__}"


class ErrorClass(StrEnum):
    """How a failure should be answered. See ``docs/definitions.md``."""

    TRANSIENT = "transient"  # retry: network blips, rate limits, timeouts
    PERMANENT = "permanent"  # fail now (or take the fallback edge): bad input, 4xx
    BUSINESS = "business"  # a rule said no: take the business edge


class Jitter(StrEnum):
    FULL = "full"
    NONE = "none"


@dataclass(frozen=True)
class RetryPolicy:
    """``attempts`` counts every try including the first: 1 means no retry."""

    attempts: int = 1
    backoff: timedelta = timedelta(seconds=1)
    max_delay: timedelta = timedelta(minutes=5)
    deadline: timedelta | None = None
    jitter: Jitter = Jitter.FULL

    def ceiling(self, attempt: int) -> timedelta:
        """The backoff cap before the retry that follows failed ``attempt`` (1-based)."""
        exponent = min(attempt - 1, 62)  # beyond this the cap is max_delay anyway
        seconds = self.backoff.total_seconds() * 2.0**exponent
        return timedelta(seconds=min(self.max_delay.total_seconds(), seconds))


NO_RETRY = RetryPolicy()
# What a task that runs a handler gets when it says nothing about retries (definition
# format 2; ``retry: none`` opts out): a transient failure is tried 3 times in all, the
# retries 0-1 s and 0-2 s later (full jitter, at most 30 s). Irreversible tasks do not
# get it (a payment that timed out must not be sent again by a default), nor do child
# runs, decisions, waits and parallel nodes.
DEFAULT_RETRY = RetryPolicy(
    attempts=3, backoff=timedelta(seconds=1), max_delay=timedelta(seconds=30), jitter=Jitter.FULL
)
# The ``timeout`` of a task that runs a handler and gives none of its own, unless the
# workflow sets ``node_timeout`` (a duration, or ``none``) (definition format 2).
DEFAULT_NODE_TIMEOUT = timedelta(hours=1)


@dataclass(frozen=True)
class Branch:
    """A conditional edge: ``guard(state)`` returns a label; ``cases`` maps labels to nodes."""

    guard: Ref
    cases: Mapping[str, str]


@dataclass(frozen=True)
class Route:
    """A routing table: look ``state[key]`` up in ``table``, else go to ``default``."""

    key: str
    table: Mapping[str, str]
    default: str


class JoinPolicyKind(StrEnum):
    ALL = "all"
    QUORUM = "quorum"
    CRITICAL = "critical"


class JoinRest(StrEnum):
    """What happens to branches still running when a quorum is reached."""

    CANCEL = "cancel"
    FINISH = "finish"


@dataclass(frozen=True)
class Join:
    policy: JoinPolicyKind = JoinPolicyKind.ALL
    k: int | None = None
    critical: tuple[str, ...] = ()
    timeout: timedelta | None = None
    rest: JoinRest = JoinRest.CANCEL


@dataclass(frozen=True)
class Node:
    """Fields every kind of node shares."""

    id: str
    max_visits: int | None = None
    retry: RetryPolicy = NO_RETRY  # the effective policy (DEFAULT_RETRY, by the loader)
    on_error: Mapping[ErrorClass, str] = field(default_factory=dict)
    compensate: Ref | None = None
    # How long one execution may take (a wait: how long it waits for a decision): the
    # effective value, the workflow's ``node_timeout`` for a task running a handler that
    # gives none. The decider arms a timer for it; a timeout is a transient failure.
    timeout: timedelta | None = None
    # What a branch contributes when it fails or times out and the join accepts that.
    default: Mapping[str, Any] | None = None
    # What one visit of this node may spend, per unit (``{"tokens": 20000}``), across its
    # attempts; for a parallel node, what its branches together may spend.
    budget: Mapping[str, float] | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    kind = "node"

    def targets(self) -> Iterator[tuple[str, str]]:
        """Every (label, target node) edge that leaves this node."""
        for error_class, target in self.on_error.items():
            yield f"failed:{error_class.value}", target


class PersistKind(StrEnum):
    DURABLE = "durable"  # every execution's result is a checkpoint (the default)
    CACHED = "cached"  # ...and reusable: kept in Redis for ``ttl``, by ``key`` fields
    EPHEMERAL = "ephemeral"  # recomputed after a crash: committed with the node after it


@dataclass(frozen=True)
class Persist:
    """How a task's result is kept. ``cached``: a result is reused, without running the
    handler, by any execution of the same node (any run of the workflow) whose state has
    the same values in ``key`` (every field, if empty) within ``ttl`` of it being stored."""

    kind: PersistKind = PersistKind.DURABLE
    ttl: timedelta | None = None
    key: tuple[str, ...] = ()


DURABLE = Persist()


@dataclass(frozen=True)
class ChildRun:
    """A task that runs another registered workflow as a child run: ``input`` names the
    state fields passed as its input (all, if None); ``output`` the fields of its final
    state merged back (all, if None)."""

    workflow: str
    version: int | None = None
    input: tuple[str, ...] | None = None
    output: tuple[str, ...] | None = None


@dataclass(frozen=True)
class CheckpointPolicy:
    """When a running handler's working context is saved without its asking
    (``ctx.checkpoint()`` saves it at once): at a safe point — ``ctx.progress``,
    ``ctx.raise_if_cancelled`` — once ``turns`` model turns (assistant messages) were
    added, or ``every`` passed, since the last checkpoint."""

    every: timedelta | None = None
    turns: int | None = None


@dataclass(frozen=True)
class ContextPolicy:
    """How a handler's model calls keep to a context budget: when a call's messages come
    to more than ``max_tokens`` (estimated), the older ones are compacted by
    ``summarize`` before it is sent — all but the pinned ones (system and developer
    messages, the first user message, and those ``pin`` says) and the last ``keep``."""

    max_tokens: int
    summarize: Ref
    keep: int = 4
    pin: Ref | None = None


@dataclass(frozen=True)
class ConcurrencyLimit:
    """At most ``limit`` executions at a time share the slots of each value of ``key``:
    a path into the run's state or input (``state.tenant``, ``input.customer.id``), or
    a constant (``openai``: one pool for every run that names it)."""

    key: str
    limit: int

    @property
    def path(self) -> tuple[str, ...] | None:
        """(``state``|``input``, field, ...) for a path; None for a constant."""
        head, _, rest = self.key.partition(".")
        return (head, *rest.split(".")) if head in {"state", "input"} and rest else None


@dataclass(frozen=True)
class Dependency:
    """An outside system a task's handler calls (``dependency: payments``), watched by a
    fleet-wide circuit breaker: once ``failures`` runs in a row (no success between
    them) failed transiently against it within ``window``, its circuit opens — new
    attempts wait, parked, instead of retrying into it — and after ``open_for`` one
    probe attempt tests whether it has recovered."""

    name: str
    failures: int = 5
    window: timedelta = timedelta(seconds=60)
    open_for: timedelta = timedelta(seconds=30)


@dataclass(frozen=True)
class Rate:
    """``amount`` per ``per_s`` seconds (``600/min``: 600 per 60 s)."""

    amount: int
    per_s: float

    def __str__(self) -> str:
        unit = {1.0: "s", 60.0: "min", 3600.0: "h"}.get(self.per_s)
        return f"{self.amount}/{unit}" if unit else f"{self.amount}/{self.per_s:g}s"


@dataclass(frozen=True)
class RateLimit:
    """At most ``requests`` model calls and ``tokens`` tokens per period share each value
    of ``key`` (a path into the run's state or input, or a constant), fleet-wide: every
    model call made through ``ctx.model`` under it takes its share first, and waits for
    it."""

    key: str
    requests: Rate | None = None
    tokens: Rate | None = None

    @property
    def path(self) -> tuple[str, ...] | None:
        """(``state``|``input``, field, ...) for a path; None for a constant."""
        head, _, rest = self.key.partition(".")
        return (head, *rest.split(".")) if head in {"state", "input"} and rest else None


@dataclass(frozen=True)
class TaskNode(Node):
    """Runs ``handler`` (or a ``child`` workflow run, or nothing), then follows ``next``,
    ``branch`` or ``route``.

    A task with none of the three is a parallel branch: its continuation is its join.
    """

    handler: Ref | None = None
    child: ChildRun | None = None
    next: str | None = None
    branch: Branch | None = None
    route: Route | None = None
    # Its effect cannot be taken back or safely repeated (a payment, a sent message):
    # once a worker may have started it, only an operator decides whether it runs again.
    irreversible: bool = False
    persist: Persist = DURABLE
    # Nodes whose cached results this node's success makes stale.
    invalidates: tuple[str, ...] = ()
    # Heartbeats arriving while ``ctx.progress`` has not moved for this long: the node
    # is flagged stalled (nothing is stopped). None: not watched.
    stall_after: timedelta | None = None
    # Automatic checkpoints of the handler's working context (None: only when it asks).
    checkpoint: CheckpointPolicy | None = None
    # Its handler's own outbound HTTP (httpx, requests, urllib) is recorded with the step
    # and answered from the record in replays (``record: http``).
    record_http: bool = False
    # A context budget for its model calls, kept by compacting older messages.
    context: ContextPolicy | None = None
    # Limits on how many executions run at once (besides its workflow's): each holds a
    # slot of each limit's pool while it runs, and waits, parked, for a free one.
    concurrency: tuple[ConcurrencyLimit, ...] = ()
    # The outside systems its handler depends on, each behind a fleet-wide circuit.
    dependencies: tuple[Dependency, ...] = ()
    # Rate limits on its handler's model calls (besides its workflow's): each call takes
    # a request (and its tokens) of each limit's bucket first, waiting for them.
    rate: tuple[RateLimit, ...] = ()
    # The broker queue its messages go to, so that only the workers consuming it run it
    # (``queue: gpu``; the workflow's ``queue`` already applied). None: the deployment's
    # default queue (CAIRN_QUEUE).
    queue: str | None = None

    kind = "task"

    def targets(self) -> Iterator[tuple[str, str]]:
        if self.next is not None:
            yield "succeeded", self.next
        if self.branch is not None:
            for label, target in self.branch.cases.items():
                yield f"case:{label}", target
        if self.route is not None:
            for value, target in self.route.table.items():
                yield f"route:{value}", target
            yield "route:default", self.route.default
        yield from super().targets()


# A wait that is a parallel branch ends its branch: its signals and its timeout name how
# the branch ended (``succeeded`` or ``failed``) instead of a node to go to; the join
# decides what follows.
BRANCH_OUTCOMES = frozenset({"succeeded", "failed"})


@dataclass(frozen=True)
class WaitContext:
    """What a person deciding a wait is shown (docs/access.md#approvals): these fields of
    the run's state, its last ``messages`` messages, what it has spent."""

    fields: tuple[str, ...] = ()
    messages: int = 0
    budget: bool = False


@dataclass(frozen=True)
class WaitNode(Node):
    """Holds the run (no worker, no lease, no message) until a signal or the timeout.

    ``approvers``: who may decide it — ``role:<role>`` (that role or a higher one) or a
    principal (``alice``, any kind; ``key:alice``, ``person:alice@x``); empty: anyone
    whose role may approve. ``quorum``: a signal takes effect once that many distinct
    principals sent it (each vote recorded). ``response``: a JSON Schema per signal for
    its payload — the decider may edit the answer, within it. ``context``: what the
    decider is shown. ``accept_early``: a signal that arrives before the wait opens is
    kept (one per wait) and applied when it opens; never with ``approvers``."""

    signals: Mapping[str, str] = field(default_factory=dict)
    on_timeout: str = ""  # where the run goes when ``timeout`` passes with no decision
    approvers: tuple[str, ...] = ()
    quorum: int = 1
    response: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    context: WaitContext | None = None
    accept_early: bool = False

    kind = "wait"

    def targets(self) -> Iterator[tuple[str, str]]:
        for name, target in self.signals.items():
            yield f"signal:{name}", target
        yield "timeout", self.on_timeout
        yield from super().targets()


@dataclass(frozen=True)
class ParallelNode(Node):
    """Fans out to ``branches``; the join (kept in the run state) decides when to go on."""

    branches: tuple[str, ...] = ()
    join: Join = field(default_factory=Join)
    next: str = ""
    # How the budget left for the fan-out is split: weight per branch (default 1 each).
    shares: Mapping[str, float] = field(default_factory=dict)

    kind = "parallel"

    def targets(self) -> Iterator[tuple[str, str]]:
        for branch in self.branches:
            yield "fan_out", branch
        yield "joined", self.next
        yield from super().targets()


@dataclass(frozen=True)
class EndNode(Node):
    status: RunStatus = RunStatus.SUCCEEDED

    kind = "end"


AnyNode = TaskNode | WaitNode | ParallelNode | EndNode


@dataclass(frozen=True)
class OnResume:
    """Before a recovered node runs again, ``check(ctx, state)`` says whether the plan
    still holds (None or True) or not (False, or a reason): then the run goes to
    ``replan`` instead. ``after``: so does the first node a run dispatches after sitting
    still that long — woken from a wait, a long retry backoff, a rewind to an old
    checkpoint (None: only after an interruption)."""

    check: Ref
    replan: str
    after: timedelta | None = None


class AnomalyKind(StrEnum):
    NO_PROGRESS = "no_progress"  # the fingerprint stayed the same round a loop
    PING_PONG = "ping_pong"  # the same calls (nodes or tools) repeat, A-B-A-B...
    OSCILLATION = "oscillation"  # a watched field keeps going back to earlier values


@dataclass(frozen=True)
class NoProgressRule:
    """``steps`` moves in a row left the fingerprint as it was, and a node came round
    again among them (a chain of nodes that write nothing is not a loop)."""

    steps: int = 6


@dataclass(frozen=True)
class PingPongRule:
    """The last calls are one block of 2..``max_period`` calls (with at least two
    different calls in it) repeated ``repeats`` times. A node call is the node with the
    fingerprint it was entered with; a tool call is the tool with its arguments."""

    max_period: int = 3
    repeats: int = 3


@dataclass(frozen=True)
class OscillationRule:
    """Within the last ``window`` steps, one of ``fields`` went back ``returns`` times to
    a value it had held earlier in the window (x: 1, 2, 1, 2 is two returns)."""

    fields: tuple[str, ...]
    window: int = 12
    returns: int = 3


@dataclass(frozen=True)
class AnomalyPolicy:
    """What the decider watches for while a run moves (the ``anomaly:`` block), and what
    it does on a detection: intervene ``interventions`` times per kind (append ``hint``
    to the messages, drop ``drop`` and set ``assign`` in the state), then end the run
    failed — or, with ``handoff``, hand it to that wait node (a person)."""

    no_progress: NoProgressRule | None = None
    ping_pong: PingPongRule | None = None
    oscillation: OscillationRule | None = None
    # The fingerprint: these state fields (every field if empty) less ``ignore``, and the
    # content digest of every artifact.
    fields: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    hint: str | None = None
    drop: tuple[str, ...] = ()
    assign: Mapping[str, Any] = field(default_factory=dict)
    interventions: int = 1
    handoff: str | None = None

    @property
    def kinds(self) -> tuple[AnomalyKind, ...]:
        rules = (
            (AnomalyKind.NO_PROGRESS, self.no_progress),
            (AnomalyKind.PING_PONG, self.ping_pong),
            (AnomalyKind.OSCILLATION, self.oscillation),
        )
        return tuple(kind for kind, rule in rules if rule is not None)


DEFAULT_CANCEL_TIMEOUT = timedelta(minutes=5)

END_STATUSES = (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED)


@dataclass(frozen=True)
class WorkflowDefinition:
    """A validated, compiled workflow, as every form compiles to and the decider runs:
    immutable, and equal to any other compiled from the same text or builder calls."""

    name: str
    version: int
    start: str
    nodes: Mapping[str, AnyNode]
    description: str = ""
    max_visits: int | None = None  # for every node without its own
    compensate_on_cancel: bool = False
    # How long a cancelled run waits for running nodes to stop before detaching them.
    cancel_timeout: timedelta = DEFAULT_CANCEL_TIMEOUT
    # The timeout every task running a handler without a ``timeout`` of its own was given
    # (already applied to those nodes' ``timeout``); None: no default.
    node_timeout: timedelta | None = None
    # The definition format it was compiled under (its semantics: format 2's defaults).
    format: int = 1
    # JSON Schemas of the run's input (checked at submit) and state (docs/versions.md).
    input_schema: Mapping[str, Any] | None = None
    state_schema: Mapping[str, Any] | None = None
    on_resume: OnResume | None = None
    budget: Mapping[str, float] = field(default_factory=dict)  # per unit: ``ctx.charge``
    anomaly: AnomalyPolicy | None = None  # loops, ping-pong, oscillation; off if None
    # Limits every execution of its tasks' handlers holds a slot of, and rate limits on
    # the model calls of every task's handler (see TaskNode).
    concurrency: tuple[ConcurrencyLimit, ...] = ()
    rate: tuple[RateLimit, ...] = ()
    # Cron schedules that start runs of it (``cairn register`` keeps them); not part of
    # ``spec``: a schedule is when runs start, not how they run, and changes freely.
    schedules: tuple[ScheduleSpec, ...] = ()
    # The queue of its tasks that name none (already applied to them), and of the
    # compensations of its other nodes; None: the deployment's default queue.
    queue: str | None = None
    reducers: Mapping[str, Reducer] = field(default_factory=dict)  # keys that accumulate
    # Which build of the code runs its nodes: any, the run's own, or the newest compatible.
    versioning: Versioning = Versioning.ANY
    extra: Mapping[str, Any] = field(default_factory=dict)
    # The definition in file form (callables as import paths): what is registered.
    spec: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    namespace: str = DEFAULT_NAMESPACE  # where it is registered (the registry says; a file never)

    @property
    def key(self) -> str:
        """``name@version``, as the CLI and the logs name it."""
        return f"{self.name}@{self.version}"

    @property
    def qualified(self) -> str:
        """Its name as messages and task names carry it (cairn.model.workflow_names)."""
        return qualified(self.namespace, self.name)

    def node(self, node_id: str) -> AnyNode:
        """The node ``node_id`` (``KeyError`` if there is none)."""
        return self.nodes[node_id]

    def queue_of(self, node_id: str) -> str | None:
        """The queue a message for ``node_id`` goes to (None: the default queue). A
        compensation goes where its node runs: that is where its code is installed."""
        node = self.nodes.get(node_id)
        return node.queue if isinstance(node, TaskNode) else self.queue

    def queues(self) -> dict[str, str]:
        """Node id -> the queue its messages go to, for every node a worker runs (a task,
        or another node's compensation) that is sent to a queue other than the default."""
        named: dict[str, str] = {}
        for node_id, node in self.nodes.items():
            runs_on_worker = isinstance(node, TaskNode) or node.compensate is not None
            queue = self.queue_of(node_id)
            if runs_on_worker and queue is not None:
                named[node_id] = queue
        return named

    def visit_limit(self, node_id: str) -> int | None:
        """How often a run may visit ``node_id``: its own ``max_visits``, else the
        workflow's; None for no bound."""
        own = self.nodes[node_id].max_visits
        return own if own is not None else self.max_visits

    @cached_property
    def branch_parents(self) -> Mapping[str, str]:
        """Branch node id -> the parallel node that fans out to it."""
        return {
            branch: node.id
            for node in self.nodes.values()
            if isinstance(node, ParallelNode)
            for branch in node.branches
        }
