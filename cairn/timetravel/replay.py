"""Handlers run again, isolated from the real world: ``cairn replay`` (and, through
:mod:`cairn.timetravel.fork`, a fork's dry run).

A replay re-executes, for each recorded result of a run from ``--from SEQ`` on, the
handler *registered in code now* on the state that execution was given, in a replay
context (:class:`ReplaySpace`), and compares what it returns with what was recorded:

- **input state** — the run's state just before the result's event, rebuilt from the
  log by the decider: the same definition ``cairn history`` uses for its inputs digest
  (:mod:`cairn.timetravel.timeline`): ``ctx.state`` is its vars, ``ctx.messages`` and
  ``ctx.sessions`` its agent context;
- **effects** (``ctx.effect``) go through a read-only :class:`~cairn.timetravel.ledger.
  ReplayLedger`: recorded outcomes are returned (or raised) again, anything else is a
  stub's fake result or :class:`~cairn.timetravel.ledger.ReplayRefused`; ``call`` never runs;
- **artifacts**: reads see the real store (the latest version *as of the input state*);
  puts go to an in-memory sandbox tagged ``replay`` (never registered on the run);
- ``ctx.charge``, ``ctx.progress``: noted in the report only. No lease, no heartbeat,
  no Sentry report. Nothing is written to the database.

Each step's verdict is ``same``, ``diverged`` (its output — canonical JSON, with the
messages, sessions and artifact digests it added — or its error class differs; a
readable diff says where), ``refused`` (an effect the replay could not answer) or
``skipped`` (nothing a handler returned: a child run, a cancellation, an operator's
decision). For a diverged step the decider is asked too: fed the replayed result in the
recorded state, does it take the same transitions?
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cairn.artifacts import Artifacts, _check_name, _content
from cairn.artifacts.stores import MemoryStore, digest, open_store
from cairn.config import Settings
from cairn.decider.budget import allowance
from cairn.decider.graph import decide
from cairn.effects.ledger import effect_scope
from cairn.engine.orchestrator import Orchestrator
from cairn.engine.reads import replay
from cairn.errors import CairnError, InvalidInput, RunNotFound, UnknownNode
from cairn.model.classify import classify
from cairn.model.definition import (
    ErrorClass,
    PersistKind,
    TaskNode,
    WorkflowDefinition,
)
from cairn.model.events import (
    Event,
    NodeCancelled,
    NodeFailed,
    NodeSucceeded,
    Phase,
    event_from_dict,
    event_to_dict,
)
from cairn.model.failures import Cancelled
from cairn.model.payloads import storable_json
from cairn.model.state import RunState
from cairn.store.artifacts import ArtifactInfo, ArtifactRegistry
from cairn.store.sql import Store
from cairn.timetravel.ledger import Answer, EffectUse, ReplayLedger
from cairn.timetravel.timeline import (
    Change,
    SeqOutOfRange,
    Step,
    build_history,
    diff_values,
)
from cairn.workers.context import StepContext

REPLAY_TAG = "replay"
REPLAYED_EVENTS = frozenset({"node_succeeded", "node_failed"})
# A node_failed the scheduler wrote for a node whose worker died every time: no handler
# returned it (see Scheduler._give_up).
GIVEN_UP_PREFIX = "max_attempts:"


def replay_namespace(namespace: str) -> str:
    """Where a replay's (or a dry run's) writes are said to go: never the run's own."""
    return f"{namespace}.{REPLAY_TAG}"


class Verdict:
    SAME = "same"
    DIVERGED = "diverged"
    REFUSED = "refused"
    SKIPPED = "skipped"


# -- artifacts ----------------------------------------------------------------------------


class ArtifactSandbox:
    """Where the artifacts a replay puts go: blobs in this process's memory, their
    registrations in a dict — never the object store or the ``artifacts`` table."""

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        self.objects = MemoryStore(f"{namespace}/{uuid.uuid4().hex[:12]}")
        self._infos: dict[str, list[ArtifactInfo]] = {}

    def find(self, name: str, version: int) -> ArtifactInfo | None:
        return next((i for i in self._infos.get(name, ()) if i.version == version), None)

    def latest_version(self, name: str) -> int:
        return max((i.version for i in self._infos.get(name, ())), default=0)

    def add(self, info: ArtifactInfo) -> None:
        self._infos.setdefault(info.name, []).append(info)

    def holds(self, info: ArtifactInfo) -> bool:
        return info.uri.startswith(self.objects.url + "/")

    def infos(self) -> list[ArtifactInfo]:
        return [info for infos in self._infos.values() for info in infos]


class ReplayArtifacts(Artifacts):
    """``ctx.artifacts`` in a replay. Reads: the sandbox's puts, else the real registry
    and object store — this run's artifacts are ``source_run``'s (the run itself in a
    replay, the parent in a fork's dry run), and "the latest" means the latest as of the
    input state (``known``: its artifact references). Puts: the sandbox, tagged
    ``replay``; content the replayed execution already registered gets that
    registration back (read, not written), as a real retry would."""

    def __init__(
        self,
        store: Store,
        settings: Settings,
        sandbox: ArtifactSandbox,
        *,
        run_id: str,
        source_run: str,
        known: Mapping[str, Mapping[str, Any]],
        node: str,
        iteration: int,
        attempt: int,
        phase: str,
    ) -> None:
        super().__init__(
            ArtifactRegistry(store),
            lambda: open_store(settings.effective_artifacts_url),
            run_id=run_id,
            node=node,
            iteration=iteration,
            attempt=attempt,
            phase=phase,
        )
        self.sandbox = sandbox
        self.source_run = source_run
        self.known = dict(known)

    def put(
        self, name: str, data: bytes | bytearray | memoryview | str, **meta: Any
    ) -> dict[str, Any]:
        content = _content(data)
        _check_name(name)
        provenance = self._provenance(meta)
        sha256 = digest(content)
        info = None
        if self.source_run == self.run_id:  # a replay: what the execution registered then
            info = self.registry.find(self.run_id, self.node, self.iteration, name, sha256)
        if info is None:
            self.sandbox.objects.ensure(sha256, content)
            known = int((self.known.get(name) or {}).get("version", 0))
            info = ArtifactInfo(
                run_id=self.run_id,
                name=name,
                version=max(known, self.sandbox.latest_version(name)) + 1,
                sha256=sha256,
                size=len(content),
                uri=self.sandbox.objects.uri(sha256),
                node=self.node,
                iteration=self.iteration,
                attempt=self.attempt,
                phase=self.phase,
                call_id=provenance.call_id,
                model=provenance.model,
                tool=provenance.tool,
                params=dict(provenance.params) if provenance.params is not None else None,
                meta={**(provenance.meta or {}), REPLAY_TAG: self.sandbox.namespace},
                created_at=time.time(),
            )
            self.sandbox.add(info)
        ref = info.ref()
        kept = self._created.get(name)
        if kept is None or kept["version"] <= ref["version"]:
            self._created[name] = ref
        return ref

    def info(
        self, name: str, version: int | None = None, *, run_id: str | None = None
    ) -> ArtifactInfo:
        wanted = run_id or self.run_id
        if wanted not in (self.run_id, self.source_run):
            return self.registry.get(wanted, name, version)
        if version is None:
            ref = self._created.get(name) or self.known.get(name)
            version = int(ref["version"]) if ref is not None else None
        if version is not None:
            found = self.sandbox.find(name, version)
            if found is not None:
                return found
        return self.registry.get(self.source_run, name, version)

    def get(self, name: str, version: int | None = None, *, run_id: str | None = None) -> bytes:
        info = self.info(name, version, run_id=run_id)
        if self.sandbox.holds(info):
            return self.sandbox.objects.read(info.sha256)
        return self.objects.read(info.sha256)

    def versions(self, name: str | None = None, *, run_id: str | None = None) -> list[ArtifactInfo]:
        wanted = run_id or self.run_id
        if wanted not in (self.run_id, self.source_run):
            return self.registry.versions(wanted, name)
        found = self.registry.versions(self.source_run, name)
        found += [i for i in self.sandbox.infos() if name is None or i.name == name]
        return sorted(found, key=lambda info: (info.name, info.version))


# -- running a handler in a replay context -------------------------------------------------


class BadOutput(CairnError):
    code = "bad_output"
    error_class = ErrorClass.PERMANENT.value


@dataclass(frozen=True)
class Executed:
    """One handler execution in a replay context, and everything it did there."""

    event: NodeSucceeded | NodeFailed | NodeCancelled
    effects: tuple[EffectUse, ...] = ()
    progress: tuple[dict[str, Any], ...] = ()
    puts: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    @property
    def status(self) -> str:
        return self.event.type.removeprefix("node_")

    @property
    def output(self) -> Mapping[str, Any] | None:
        return self.event.output if isinstance(self.event, NodeSucceeded) else None

    @property
    def error(self) -> str | None:
        if isinstance(self.event, NodeFailed):
            return f"{self.event.error_class.value}: {self.event.message}"
        return "cancelled at a safe point" if isinstance(self.event, NodeCancelled) else None

    @property
    def refused(self) -> list[EffectUse]:
        return [use for use in self.effects if use.answer == Answer.REFUSED]

    def to_dict(self) -> dict[str, Any]:
        charges = getattr(self.event, "charges", None)
        return {
            "status": self.status,
            "output": dict(self.output) if self.output is not None else None,
            "error": self.error,
            "effects": [use.to_dict() for use in self.effects],
            "charges": dict(charges) if charges else {},
            "progress": list(self.progress),
            "artifacts": {name: dict(ref) for name, ref in self.puts.items()},
        }


@dataclass
class ReplaySpace:
    """Where one replay (or dry run) reads and where its writes go.

    ``namespace`` and ``scope`` locate the recorded effects (the real run's, or a fork's
    parent's); ``source_run`` is the run whose artifacts stand for the replayed run's;
    ``sandbox`` takes every artifact put. Nothing here writes the database."""

    store: Store
    settings: Settings
    namespace: str
    scope: str | None
    source_run: str
    sandbox: ArtifactSandbox

    @classmethod
    def of(cls, store: Store, settings: Settings, run: Any) -> ReplaySpace:
        """Reading the real run ``run`` (its row)."""
        return cls(
            store,
            settings,
            run.namespace,
            effect_scope(run),
            str(run.id),
            ArtifactSandbox(replay_namespace(run.namespace)),
        )

    def execute(
        self,
        definition: WorkflowDefinition,
        state: RunState,
        *,
        run_id: str,
        node: str,
        iteration: int,
        attempt: int,
        phase: Phase,
        at: float,
        resumed: bool = False,
    ) -> Executed:
        """Run the handler (or compensation) registered now for ``node`` on ``state``,
        in a replay context; its result as the event a worker would have reported."""
        declared = definition.nodes.get(node)
        if declared is None:
            raise UnknownNode(f"{definition.key} has no node {node!r}")
        ref = (
            declared.compensate
            if phase is Phase.COMPENSATE
            else (declared.handler if isinstance(declared, TaskNode) else None)
        )
        if ref is None:
            raise InvalidInput(f"{definition.key} node {node!r} has nothing to run in {phase}")
        ephemeral = (
            isinstance(declared, TaskNode) and declared.persist.kind is PersistKind.EPHEMERAL
        )
        ledger = ReplayLedger(
            self.store,
            namespace=self.namespace,
            run_id=run_id,
            node=node,
            iteration=iteration,
            attempt=attempt,
            fence=0,
            max_payload_bytes=self.settings.max_payload_bytes,
            refusal=f"{node} is ephemeral: it cannot have external effects" if ephemeral else None,
            scope=self.scope,
        )
        progress: list[dict[str, Any]] = []
        artifacts = ReplayArtifacts(
            self.store,
            self.settings,
            self.sandbox,
            run_id=run_id,
            source_run=self.source_run,
            known=state.artifacts,
            node=node,
            iteration=iteration,
            attempt=attempt,
            phase=phase.value,
        )
        ctx = StepContext(
            run_id=run_id,
            workflow=definition.name,
            node=node,
            iteration=iteration,
            attempt=attempt,
            phase=phase.value,
            state=state,
            on_progress=lambda p: progress.append(
                {"done": p.done, "total": p.total, "message": p.message}
            ),
            resumed=resumed,
            allowance=allowance(definition, state, node) if phase is Phase.RUN else None,
            artifacts=artifacts,
            effects=ledger,
        )
        event = _run(ref.resolve(), ctx, phase, at, self.settings.max_payload_bytes)
        return Executed(event, tuple(ledger.uses), tuple(progress), ctx.added_artifacts())


def _run(
    handler: Callable[..., Any], ctx: StepContext, phase: Phase, at: float, limit: int
) -> NodeSucceeded | NodeFailed | NodeCancelled:
    """The handler's result as the worker would report it (see NodeRunner._execute)."""
    common: dict[str, Any] = {
        "at": at,
        "node": ctx.node,
        "iteration": ctx.iteration,
        "attempt": ctx.attempt,
        "phase": phase,
    }
    started = time.perf_counter()
    try:
        output = _checked_output(handler(ctx, ctx.handler_state()), limit)
    except Cancelled:
        return NodeCancelled(**common, charges=ctx.charges or None)
    except Exception as exc:  # the handler's failure is the result being compared
        ctx.log.info("replayed handler failed: %s: %s", type(exc).__name__, exc)
        return NodeFailed(
            **common,
            error_class=classify(exc),
            message=f"{type(exc).__name__}: {exc}",
            charges=ctx.charges or None,
            timings=ctx.execution_timings(time.perf_counter() - started),
        )
    return NodeSucceeded(
        **common,
        output=output,
        messages=ctx.added_messages(),
        sessions=ctx.changed_sessions() or None,
        charges=ctx.charges or None,
        artifacts=ctx.added_artifacts() or None,
        timings=ctx.execution_timings(time.perf_counter() - started),
    )


def _checked_output(output: Any, limit: int) -> dict[str, Any]:
    if output is None:
        return {}
    if not isinstance(output, dict):
        raise BadOutput(
            f"a handler returns a dict (merged into the state) or None, not {type(output).__name__}"
        )
    try:
        storable_json(output, what="the handler's output", limit_bytes=limit)
    except InvalidInput as exc:
        raise BadOutput(str(exc)) from exc
    return output


# -- comparing ----------------------------------------------------------------------------


def comparable(event: Mapping[str, Any]) -> dict[str, Any]:
    """What a succeeded result is compared by: its output, and the messages, sessions and
    artifact contents (digests) it added to the agent context. Plain JSON data."""
    artifacts = {
        name: {"sha256": ref.get("sha256"), "size": ref.get("size")}
        for name, ref in (event.get("artifacts") or {}).items()
    }
    data = {
        "output": event.get("output") or {},
        "messages": list(event.get("messages") or []),
        "sessions": event.get("sessions") or {},
        "artifacts": artifacts,
    }
    copied: dict[str, Any] = json.loads(json.dumps(data))
    return copied


def error_type(message: str) -> str:
    """``ValueError`` of ``ValueError: boom``: what a failure is compared by, besides its
    class (messages may hold times, ids, addresses)."""
    head, sep, _rest = message.partition(":")
    return head.strip() if sep and head.strip().isidentifier() else ""


def compare(recorded: Mapping[str, Any], replayed: Event) -> tuple[bool, list[Change], str]:
    """(same, changes, a note in words) for a recorded result event's data and the
    replayed result event."""
    recorded_status = str(recorded["type"]).removeprefix("node_")
    replayed_status = replayed.type.removeprefix("node_")
    if recorded_status != replayed_status:
        return False, [], f"recorded {_outcome(recorded)}; replayed {_outcome_of(replayed)}"
    if isinstance(replayed, NodeSucceeded):
        changes = diff_values(comparable(recorded), comparable(event_to_dict(replayed)))
        return not changes, changes, ""
    if isinstance(replayed, NodeFailed):
        same_class = recorded.get("error_class") == replayed.error_class.value
        same_type = error_type(str(recorded.get("message", ""))) == error_type(replayed.message)
        if same_class and same_type:
            return True, [], ""
        return False, [], f"recorded {_outcome(recorded)}; replayed {_outcome_of(replayed)}"
    return True, [], ""


def _outcome(recorded: Mapping[str, Any]) -> str:
    if recorded["type"] == "node_failed":
        return f"failed ({recorded.get('error_class')}: {recorded.get('message')})"
    return str(recorded["type"]).removeprefix("node_")


def _outcome_of(event: Event) -> str:
    if isinstance(event, NodeFailed):
        return f"failed ({event.error_class.value}: {event.message})"
    return event.type.removeprefix("node_")


def decider_check(
    definition: WorkflowDefinition, before: RunState, recorded: Event, replayed: Event
) -> str | None:
    """None if the decider, fed the replayed result in the recorded state, moves the run
    as it did with the recorded one; otherwise what differs, in words."""

    def moves(event: Event) -> tuple[str, list[str]]:
        decision = decide(definition, before, event)
        if decision.ignored:
            return f"ignored ({decision.ignored})", []
        path = [f"{t.source} -{t.label}-> {t.target}" for t in decision.transitions]
        return decision.state.status.value, path

    expected = moves(recorded)
    try:
        got = moves(replayed)
    except CairnError as refused:
        return f"the decider would refuse the replayed result: {refused}"
    if got == expected:
        return None
    return (
        f"the decider would move the run differently: recorded {expected[0]} via "
        f"{', '.join(expected[1]) or 'no transition'}; replayed {got[0]} via "
        f"{', '.join(got[1]) or 'no transition'}"
    )


# -- replaying a run ----------------------------------------------------------------------


@dataclass(frozen=True)
class StepReplay:
    """One recorded step, replayed (or skipped), and its verdict."""

    step: Step
    verdict: str
    executed: Executed | None = None
    changes: tuple[Change, ...] = ()
    note: str = ""
    decider: str | None = None  # how the decider would move differently, if it would

    def to_dict(self) -> dict[str, Any]:
        step = self.step
        return {
            "seq": step.seq,
            "node": step.node,
            "iteration": step.iteration,
            "attempt": step.attempt,
            "phase": step.phase,
            "label": step.label,
            "verdict": self.verdict,
            "recorded": step.status,
            "replayed": self.executed.to_dict() if self.executed is not None else None,
            "changes": [change.to_dict() for change in self.changes],
            "note": self.note,
            "decider": self.decider,
        }


@dataclass(frozen=True)
class ReplayReport:
    run_id: str
    workflow: str
    version: int
    namespace: str  # where the replay's writes went (never the run's): "<namespace>.replay"
    from_seq: int
    last_seq: int
    steps: tuple[StepReplay, ...]
    artifacts: tuple[ArtifactInfo, ...] = ()  # what the replay put, in its sandbox

    @property
    def first_divergence(self) -> StepReplay | None:
        return next((s for s in self.steps if s.verdict == Verdict.DIVERGED), None)

    @property
    def diverged(self) -> bool:
        return self.first_divergence is not None

    @property
    def refused(self) -> list[StepReplay]:
        return [s for s in self.steps if s.verdict == Verdict.REFUSED]

    def counts(self) -> dict[str, int]:
        found = dict.fromkeys((Verdict.SAME, Verdict.DIVERGED, Verdict.REFUSED, Verdict.SKIPPED), 0)
        for step in self.steps:
            found[step.verdict] += 1
        return found

    def to_dict(self) -> dict[str, Any]:
        first = self.first_divergence
        return {
            "run_id": self.run_id,
            "workflow": self.workflow,
            "version": self.version,
            "namespace": self.namespace,
            "from_seq": self.from_seq,
            "last_seq": self.last_seq,
            "diverged": self.diverged,
            "first_divergence": first.to_dict() if first is not None else None,
            "refused": [s.step.seq for s in self.refused],
            "counts": self.counts(),
            "steps": [step.to_dict() for step in self.steps],
            "artifacts": [info.to_dict() for info in self.artifacts],
        }


@dataclass
class Replayer:
    """``cairn replay``: re-execute a run's recorded steps in a replay context."""

    orchestrator: Orchestrator
    run_id: str

    def run(
        self, from_seq: int = 1, on_step: Callable[[StepReplay], None] | None = None
    ) -> ReplayReport:
        orchestrator = self.orchestrator
        with orchestrator.store.reading() as tx:
            row = tx.run(self.run_id)
            if row is None:
                raise RunNotFound(f"no run {self.run_id}")
            if not 1 <= from_seq <= max(row.last_seq, 1):
                raise SeqOutOfRange(
                    f"run {self.run_id} has events 1 to {row.last_seq}; there is no seq {from_seq}"
                )
            definition = orchestrator.registry.get(row.workflow, row.version, tx)
            event_rows = tx.events_after(self.run_id, 0, row.last_seq)
            executions = tx.executions_of(self.run_id)
        steps, _others = build_history(definition, self.run_id, event_rows, executions)
        wanted = [step for step in steps if step.seq >= from_seq]
        before = states_before(definition, self.run_id, event_rows, {s.seq for s in wanted})
        data = {event_row.seq: event_row.data for event_row in event_rows}
        space = ReplaySpace.of(orchestrator.store, orchestrator.settings, row)
        replayed = []
        for step in wanted:
            result = self._step(space, definition, step, before[step.seq], data[step.seq])
            replayed.append(result)
            if on_step is not None:
                on_step(result)
        return ReplayReport(
            self.run_id,
            row.workflow,
            row.version,
            space.sandbox.namespace,
            from_seq,
            row.last_seq,
            tuple(replayed),
            tuple(space.sandbox.infos()),
        )

    def _step(
        self,
        space: ReplaySpace,
        definition: WorkflowDefinition,
        step: Step,
        before: RunState,
        recorded: Mapping[str, Any],
    ) -> StepReplay:
        skipped = _why_skipped(definition, step, recorded)
        if skipped is not None:
            return StepReplay(step, Verdict.SKIPPED, note=skipped)
        executed = space.execute(
            definition,
            before,
            run_id=self.run_id,
            node=step.node,
            iteration=step.iteration,
            attempt=step.attempt,
            phase=Phase(step.phase),
            at=step.at,
            resumed="resumed" in step.marks,
        )
        same, changes, note = compare(recorded, executed.event)
        refused = executed.refused
        if refused:
            note = "; ".join(
                f"effect {use.name} {use.key!r} {use.detail}: refused" for use in refused
            )
            return StepReplay(step, Verdict.REFUSED, executed, tuple(changes), note)
        if same:
            return StepReplay(step, Verdict.SAME, executed)
        moved = decider_check(definition, before, event_from_dict(recorded), executed.event)
        return StepReplay(step, Verdict.DIVERGED, executed, tuple(changes), note, moved)


def states_before(
    definition: WorkflowDefinition, run_id: str, event_rows: Sequence[Any], seqs: Iterable[int]
) -> dict[int, RunState]:
    """The run's state just before each event in ``seqs``: the log folded once through
    the decider (:func:`cairn.engine.orchestrator.replay`, as the timeline folds it)."""
    wanted = set(seqs)
    found: dict[int, RunState] = {}
    state = RunState(run_id, definition.name, definition.version)
    for event_row, after in replay(definition, state, event_rows):
        if event_row.seq in wanted:
            found[event_row.seq] = state
        state = after
    return found


def _why_skipped(
    definition: WorkflowDefinition, step: Step, recorded: Mapping[str, Any]
) -> str | None:
    if "operator" in step.marks:
        return "settled by an operator: no handler returned it"
    if step.event not in REPLAYED_EVENTS:
        return {
            "child_finished": "executed by a child run (replay that run)",
            "node_cancelled": "cancelled at a safe point: nothing returned to compare",
            "plan_invalidated": "the on_resume check re-planned: no handler result",
        }.get(step.event, f"{step.event}: no handler result")
    if step.event == "node_failed" and str(recorded.get("message", "")).startswith(GIVEN_UP_PREFIX):
        return "failed by the scheduler (its worker died every time): no handler result"
    node = definition.nodes.get(step.node)
    if node is None:
        return f"node {step.node!r} is no longer in {definition.key}"
    if step.phase == Phase.COMPENSATE.value and node.compensate is None:
        return "no compensation declared now"
    if step.phase == Phase.RUN.value and not (
        isinstance(node, TaskNode) and node.handler is not None
    ):
        return "no handler declared now"
    return None


__all__ = [
    "REPLAY_TAG",
    "ArtifactSandbox",
    "Executed",
    "ReplayArtifacts",
    "ReplayReport",
    "ReplaySpace",
    "Replayer",
    "StepReplay",
    "Verdict",
    "compare",
    "comparable",
    "decider_check",
    "replay_namespace",
    "states_before",
]
