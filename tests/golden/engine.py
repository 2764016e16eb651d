"""The harness that records golden logs: the real engine, driven step by step.

The embedded engine — registry, planner, store and scheduler — on a SQLite file of its
own, with the workers played by a script: :class:`Engine` runs each dispatched node's
handler in-process (``handler(None, state)``, as :class:`cairn.testing.driver.Driver`
does) or reports the failure, cancellation or loss a case is about, through the same
calls a worker and the scheduler make (``Orchestrator.complete``,
``Scheduler.fire_timers``, ``RecoveryPolicy.hold``). The wall clock is a fake that moves
only when the script says, and run ids are numbered, so recording twice writes the same
files.
"""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest import mock

from cairn import clock
from cairn.config import Settings
from cairn.definitions import format as definition_format
from cairn.definitions.loader import load_definition
from cairn.definitions.text import parse_text
from cairn.engine.migrations import MigrationRequest
from cairn.engine.orchestrator import Orchestrator
from cairn.engine.recovery import RecoveryPolicy
from cairn.lease.memory import MemoryLeases
from cairn.model.definition import ErrorClass, TaskNode
from cairn.model.events import (
    NodeCancelled,
    NodeFailed,
    NodeSucceeded,
    Phase,
    PlanInvalidated,
)
from cairn.model.keys import lease_key
from cairn.model.messages import NodeMessage
from cairn.model.migrations import Where
from cairn.model.outcomes import NodeOutcome
from cairn.model.state import RunState, TimerKind
from cairn.model.statuses import NodeStatus
from cairn.scheduler.process import Scheduler
from cairn.store.backends import store_for
from cairn.store.database import make_engine, upgrade
from cairn.store.sql import Store

# 2026-01-01T00:00:00Z: every recorded time counts from here.
EPOCH = 1_767_225_600.0
# Small, so that every case has a few snapshots to check.
SNAPSHOT_EVERY_EVENTS = 4
HANDLERS = "tests.golden.handlers"
WORKER = "golden-recorder"


class Broker:
    """A publisher that keeps what it is given: the script plays the workers."""

    def __init__(self) -> None:
        self.messages: list[NodeMessage] = []

    def publish(self, messages: Sequence[NodeMessage]) -> bool:
        self.messages.extend(messages)
        return True

    def backlog(self, queue: str | None = None) -> int | None:
        return len(self.messages)

    def take(self, run_id: str, node: str, phase: Phase | None = None) -> NodeMessage:
        """The oldest message for ``node`` of ``run_id`` (in ``phase``, if given)."""
        for message in self.messages:
            if (message.run_id, message.node) == (run_id, node) and phase in (None, message.phase):
                self.messages.remove(message)
                return message
        queued = [(m.run_id[-4:], m.node, m.phase.value) for m in self.messages]
        raise AssertionError(f"{node} of run {run_id} is not queued; queued: {queued}")


class FakeWall:
    """The process's wall clock (:func:`cairn.clock.wall`, which the SQLite store reads
    as the database's clock), standing still until the script moves it."""

    def __init__(self, start: float) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


class RunIds:
    """``uuid.uuid4`` for the engine: numbered ids, so a recording is reproducible."""

    def __init__(self) -> None:
        self.issued = 0

    def __call__(self) -> uuid.UUID:
        self.issued += 1
        return uuid.UUID(f"00000000-0000-4000-8000-{self.issued:012d}")


@dataclass
class Engine:
    """The embedded engine, driven one step at a time; ``run_id`` is the run the step
    methods act on unless they are told another."""

    store: Store
    orchestrator: Orchestrator
    scheduler: Scheduler
    leases: MemoryLeases
    settings: Settings
    wall: FakeWall
    broker: Broker
    run_id: str = ""
    signals: int = 0
    runs: list[str] = field(default_factory=list)

    # -- time ---------------------------------------------------------------------------

    def tick(self, seconds: float = 1.0) -> None:
        self.wall.now += seconds

    def state(self, run_id: str | None = None) -> RunState:
        view = self.orchestrator.get_run(run_id or self.run_id)
        assert view.state is not None
        return view.state

    def fire(self, prefix: str, run_id: str | None = None) -> None:
        """Move the clock to the due time of the run's one timer starting with ``prefix``
        and let the scheduler fire what is due."""
        run_id = run_id or self.run_id
        timers = self.state(run_id).timers
        matches = [timer for timer in timers if timer.startswith(prefix)]
        assert len(matches) == 1, f"timers matching {prefix!r}: {matches} of {sorted(timers)}"
        timer_id = matches[0]
        self.wall.now = max(self.wall.now, timers[timer_id].due_at)
        assert self.scheduler.fire_timers() >= 1
        assert timer_id not in self.state(run_id).timers, f"{timer_id} did not fire"

    def time_out(self, node: str, run_id: str | None = None) -> None:
        """``node``'s attempt runs past its timeout and cannot be stopped: its worker
        holds the lease and has reported running that long, so the scheduler fires the
        node's timeout instead of moving it on."""
        run_id = run_id or self.run_id
        self.broker.take(run_id, node)  # the worker running it has the message
        current = self.state(run_id).nodes[node]
        spec = self.orchestrator.registry.get(
            self.state(run_id).workflow, self.state(run_id).version
        ).nodes[node]
        assert spec.timeout is not None
        key = lease_key(run_id, node, current.iteration, Phase.RUN.value)
        running_s = spec.timeout.total_seconds() + 1
        record = {"worker": WORKER, "attempt": current.attempt, "running_s": running_s}
        lease = self.leases.acquire(key, 3600.0, record, attempt=current.attempt)
        assert lease is not None
        self.fire(f"{TimerKind.NODE_TIMEOUT.value}:{node}:", run_id)
        self.leases.release(lease)

    # -- runs ---------------------------------------------------------------------------

    def submit(self, workflow: str, *, version: int | None = None, **run_input: Any) -> str:
        self.tick()
        self.run_id = self.orchestrator.submit(workflow, run_input, version=version)
        self.runs.append(self.run_id)
        return self.run_id

    def migrate(self, to_version: int, mapping: str) -> None:
        """Move the run to ``to_version`` of its workflow through ``mapping``, as ``cairn
        runs migrate`` does (selected by its id)."""
        self.tick()
        state = self.state()
        request = MigrationRequest(
            "default",
            state.workflow,
            state.version,
            to_version,
            mapping,
            Where(ids=(self.run_id,)),
            reason="the review is an approval now",
        )
        report = self.orchestrator.migrate_runs(request, actor="alice", dry_run=False)
        assert [verdict.moved for verdict in report.runs] == [True], report

    def unmigrate(self) -> None:
        """Undo the run's migration: back to its old version, as it was."""
        self.tick()
        self.orchestrator.rollback_migration(self.run_id, actor="alice", reason="too soon")

    def signal(
        self,
        name: str,
        payload: Mapping[str, Any] | None = None,
        *,
        actor: str | None = "alice",
        node: str | None = None,
    ) -> None:
        self.tick()
        self.signals += 1
        decision = self.orchestrator.signal(
            self.run_id, name, payload, actor=actor, signal_id=f"signal-{self.signals}", node=node
        )
        assert not decision.ignored, decision.ignored

    def cancel(self, reason: str, actor: str = "alice") -> None:
        self.tick()
        self.orchestrator.cancel(self.run_id, reason, actor=actor)

    def rollback(self, reason: str, **options: Any) -> None:
        self.tick()
        self.orchestrator.rollback(self.run_id, reason, actor="alice", confirm=True, **options)

    def fork(self, at_seq: int, patch: Mapping[str, Any] | None = None) -> str:
        self.tick()
        orchestrator = self.orchestrator
        checkpoint = orchestrator.checkpoint(self.run_id, at_seq)
        self.run_id = orchestrator.fork(self.run_id, at_seq, checkpoint, patch=patch, confirm=True)
        self.runs.append(self.run_id)
        return self.run_id

    # -- the workers --------------------------------------------------------------------

    def run(self, node: str, *, phase: Phase | None = None, **reported: Any) -> None:
        """Run ``node``'s handler (its compensation, for a compensation message) on the
        run's state and report its output; ``reported``: what else the worker's result
        carries (messages, sessions, charges, timings)."""
        message = self.broker.take(self.run_id, node, phase)
        self._run(message, **reported)

    def resume(self, node: str) -> None:
        """A node dispatched again after an interruption: the workflow's ``on_resume``
        check first, then the handler if the plan still holds."""
        message = self.broker.take(self.run_id, node)
        assert message.resumed, f"{node} is not resumed"
        state = self.state()
        definition = self.orchestrator.registry.get(state.workflow, state.version)
        check = definition.on_resume
        assert check is not None, f"{state.workflow} has no on_resume check"
        verdict = check.check.resolve()(None, dict(state.vars))
        if verdict is None or verdict is True:
            self._run(message)
            return
        reason = (
            verdict
            if isinstance(verdict, str)
            else f"{check.check.path} found the plan no longer holds"
        )
        invalidated = PlanInvalidated(
            at=0.0, node=node, iteration=message.iteration, attempt=message.attempt, reason=reason
        )
        self._complete(message, NodeOutcome(invalidated, NodeStatus.CANCELLED, error=reason))

    def fail(
        self,
        node: str,
        error_class: ErrorClass,
        error: str,
        *,
        phase: Phase | None = None,
        **reported: Any,
    ) -> None:
        message = self.broker.take(self.run_id, node, phase)
        failed = NodeFailed(
            at=0.0,
            node=node,
            iteration=message.iteration,
            attempt=message.attempt,
            error_class=error_class,
            message=error,
            phase=message.phase,
            **reported,
        )
        outcome = NodeOutcome(failed, NodeStatus.FAILED, error_class=error_class.value, error=error)
        self._complete(message, outcome)

    def stopped(self, node: str) -> None:
        """The worker running ``node`` stopped it at a safe point, as it was asked to."""
        message = self.broker.take(self.run_id, node)
        cancelled = NodeCancelled(
            at=0.0, node=node, iteration=message.iteration, attempt=message.attempt
        )
        self._complete(message, NodeOutcome(cancelled, NodeStatus.CANCELLED))

    def late(self, node: str) -> None:
        """``node``'s worker reports success after the run stopped waiting for it (a join
        went on without it): the result is refused, and nothing is logged."""
        message = self.broker.take(self.run_id, node)
        succeeded = NodeSucceeded(
            at=0.0, node=node, iteration=message.iteration, attempt=message.attempt
        )
        self.tick()
        outcome = NodeOutcome(succeeded, NodeStatus.SUCCEEDED, result={})
        completion = self.orchestrator.complete(message, outcome, WORKER)
        assert not completion.recorded

    def lose(self, node: str) -> None:
        """``node``'s message is lost before any worker took it: recovery finds the
        execution unclaimed, notes it in the history and dispatches it again."""
        message = self.broker.take(self.run_id, node)
        self.tick(60.0)
        orchestrator = self.orchestrator
        orchestrator.record_recovery(message, cause="never claimed or message lost", recoveries=1)
        orchestrator.publisher.publish([message])

    def hold(self, node: str, reason: str) -> None:
        """``node``'s worker died holding its claim: recovery holds it for an operator."""
        message = self.broker.take(self.run_id, node)
        self.tick(60.0)
        policy = RecoveryPolicy(self.orchestrator.steps, self.settings)
        assert policy.hold(message, reason, recoveries=1)

    def _run(self, message: NodeMessage, **reported: Any) -> None:
        state = self.state()
        definition = self.orchestrator.registry.get(state.workflow, state.version)
        spec = definition.nodes[message.node]
        ref = (
            spec.compensate
            if message.phase is Phase.COMPENSATE
            else (spec.handler if isinstance(spec, TaskNode) else None)
        )
        assert ref is not None, f"{message.node} has nothing to run"
        output = ref.resolve()(None, dict(state.vars))
        succeeded = NodeSucceeded(
            at=0.0,
            node=message.node,
            iteration=message.iteration,
            attempt=message.attempt,
            output=output,
            phase=message.phase,
            **reported,
        )
        self._complete(message, NodeOutcome(succeeded, NodeStatus.SUCCEEDED, result=output))

    def _complete(self, message: NodeMessage, outcome: NodeOutcome) -> None:
        self.tick()
        completion = self.orchestrator.complete(message, outcome, WORKER)
        assert completion.recorded, completion.reason


@dataclass(frozen=True)
class Case:
    name: str
    about: str
    definitions: tuple[str, ...]  # YAML, as a user writes it
    script: Callable[[Engine], None]
    # The format a definition that declares none is compiled under: the newest for a
    # new definition, 1 for one registered before formats existed.
    implied_format: int = definition_format.FORMAT_VERSION


@contextmanager
def recording_engine(home: Path) -> Iterator[Engine]:
    """The embedded engine's parts (as :meth:`cairn.runtime.Runtime.build` wires them) on
    a SQLite file under ``home``: a fake wall clock, which the leases read too, numbered
    run ids, and no worker threads or scheduler loop — the script does their work."""
    wall = FakeWall(EPOCH)
    with ExitStack() as stack:
        stack.enter_context(mock.patch.object(clock, "wall", wall))
        stack.enter_context(mock.patch.object(uuid, "uuid4", RunIds()))
        settings = Settings(home=home, snapshot_every_events=SNAPSHOT_EVERY_EVENTS)
        database = make_engine(settings.effective_database_url)
        stack.callback(database.dispose)
        upgrade(database)
        store = store_for(database)
        broker = Broker()
        orchestrator = Orchestrator(store, broker, settings)
        leases = MemoryLeases(clock=wall)
        scheduler = Scheduler(orchestrator, leases, settings)
        yield Engine(store, orchestrator, scheduler, leases, settings, wall, broker)


def record(case: Case) -> dict[str, Any]:
    """Run ``case`` and return what its log file holds."""
    with tempfile.TemporaryDirectory() as home, recording_engine(Path(home)) as engine:
        registry = engine.orchestrator.registry
        names = []
        for text in case.definitions:
            definition = load_definition(
                parse_text(text, source=case.name),
                source=case.name,
                implied_format=case.implied_format,
            )
            assert registry.register(definition)
            names.append((definition.name, definition.version))
        case.script(engine)
        return {
            "case": case.name,
            "about": case.about,
            "definitions": [_registered(engine, name, version) for name, version in names],
            "runs": [_run_log(engine, run_id) for run_id in _with_children(engine)],
        }


def _registered(engine: Engine, name: str, version: int) -> dict[str, Any]:
    with engine.store.reading() as tx:
        found, spec, registered_format = tx.workflow_spec("default", name, version)
    assert found == version
    return {"name": name, "version": version, "format": registered_format, "spec": spec}


def _with_children(engine: Engine) -> list[str]:
    """The runs the script started, each followed by the child runs it started."""
    ordered: list[str] = []
    for run_id in engine.runs:
        pending = [run_id]
        while pending:
            current = pending.pop(0)
            ordered.append(current)
            pending.extend(
                node.child for node in engine.state(current).nodes.values() if node.child
            )
    return ordered


def _run_log(engine: Engine, run_id: str) -> dict[str, Any]:
    with engine.store.reading() as tx:
        row = tx.run(run_id)
        events = [
            {"seq": e.seq, "type": e.type, "at": e.at, "data": e.data, "outcome": e.outcome}
            for e in tx.events_after(run_id, 0)
        ]
        snapshots = []
        for seq in tx.snapshot_seqs(run_id):
            snapshot = tx.latest_snapshot(run_id, at_or_before=seq)
            assert snapshot is not None and snapshot.seq == seq
            snapshots.append({"seq": seq, "format": snapshot.format, "state": snapshot.state})
    assert row.state is not None, "the final state is cached on the run row"
    assert row.last_seq == events[-1]["seq"]
    return {
        "run_id": run_id,
        "workflow": row.workflow,
        "version": row.version,
        "status": row.status,
        "events": events,
        "snapshots": sorted(snapshots, key=lambda snapshot: snapshot["seq"]),
        "final_state": row.state,
    }
