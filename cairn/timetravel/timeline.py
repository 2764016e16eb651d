"""A run's timeline, read-only: every step with what it was given and what it produced,
the state at any seq, what changed between two seqs, and the first step after which a
predicate fails (``cairn history``, ``cairn state --at``, ``cairn diff``, ``cairn bisect``).

Nothing here writes, dispatches or calls a handler: every state is rebuilt from the log
by the pure decider — :meth:`Orchestrator.restore` for a single seq (the latest snapshot
at or before it plus the events since), :func:`~cairn.engine.orchestrator.replay` for the
whole history — so travelling in time never touches the real world.

Definitions, in the words ``docs/time-travel.md`` uses:

- A **step** is an event that ends one execution of a node: ``node_succeeded``,
  ``node_failed``, ``node_cancelled``, ``child_finished``, ``plan_invalidated``, or an
  operator's ``recovery.complete``/``recovery.fail`` of a held node.
- Its **inputs digest** is the sha256 of the canonical JSON (sorted keys, no spaces,
  UTF-8) of the run's ``vars`` just before the step's event — the ``state`` argument
  (``ctx.state``) the handler was given. The vars a worker reads cannot change between
  the dispatch and the result: only a result merges into them (a parallel branch's
  output waits in its join until the join completes), so this is what the handler saw
  — and it costs no search for the dispatch. (The one exception: a signal answering a
  wait inside one parallel branch while another branch runs.) The message history and
  sessions are not in the digest: a sibling branch's messages land as it finishes, so
  they depend on timing; ``cairn state`` shows them.
- Its **outputs digest** is the same hash of the output its event carries (None when
  the execution failed or was cancelled).
- Its **duration** is the worker's own measure (``node_executions.duration_s``) when the
  idempotency row still describes this attempt, else the time from the event that
  dispatched it to its result (queueing included): ``duration_from`` says which.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import Enum, StrEnum
from typing import Any

from cairn.engine.orchestrator import Orchestrator
from cairn.engine.reads import AUDIT_ONLY, replay, restore
from cairn.errors import InvalidInput, RunNotFound
from cairn.model.definition import WorkflowDefinition, import_ref
from cairn.model.state import RunState
from cairn.store.sql import Tx

Predicate = Callable[[dict[str, Any]], object]
# An execution by what tells its attempts apart: (node, iteration, attempt, phase).
ExecutionAttempt = tuple[str, int, int, str]

RESULT_EVENTS = frozenset(
    {"node_succeeded", "node_failed", "node_cancelled", "child_finished", "plan_invalidated"}
)
OPERATOR_RESULTS = {"recovery.complete": "succeeded", "recovery.fail": "failed"}
RUN_PHASE = "run"


class SeqOutOfRange(InvalidInput):
    code = "seq_out_of_range"


class BadPredicate(InvalidInput):
    """A bisect predicate that cannot be imported or called, or raised while judging."""

    code = "bad_predicate"


def digest(value: Any) -> str:
    """sha256 of the canonical JSON of ``value``: equal data, equal digest, whatever the
    key order."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# -- steps -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    """One execution's result, as the log has it (see the module's definitions).

    ``marks`` name what is special about it: ``retry`` (a later attempt of the same
    visit), ``retrying`` (it failed and another attempt was scheduled), ``recovered``
    (dispatched again after its worker or its message was lost), ``held`` (it waited
    for an operator), ``resumed`` (an operator had it run again), ``operator`` (an
    operator settled it), ``compensation`` (an undo), ``rollback`` (an undo an
    operator's rollback asked for), ``child`` (a child run executed it), ``replanned``
    (the workflow's on_resume check found the plan stale). ``notes`` say it in words.
    """

    seq: int
    at: float
    event: str
    node: str
    iteration: int
    attempt: int
    phase: str
    status: str  # succeeded | failed | cancelled
    inputs_digest: str
    outputs_digest: str | None
    error: str | None = None
    dispatched_seq: int | None = None
    duration_s: float | None = None
    duration_from: str | None = None  # "worker" | "log"
    marks: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def execution(self) -> ExecutionAttempt:
        return (self.node, self.iteration, self.attempt, self.phase)

    @property
    def label(self) -> str:
        undo = "" if self.phase == RUN_PHASE else f" ({self.phase})"
        return f"{self.node}#{self.iteration}/{self.attempt}{undo}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "at": self.at,
            "event": self.event,
            "node": self.node,
            "iteration": self.iteration,
            "attempt": self.attempt,
            "phase": self.phase,
            "status": self.status,
            "inputs_digest": self.inputs_digest,
            "outputs_digest": self.outputs_digest,
            "error": self.error,
            "dispatched_seq": self.dispatched_seq,
            "duration_s": self.duration_s,
            "duration_from": self.duration_from,
            "marks": list(self.marks),
            "notes": list(self.notes),
        }


@dataclass(frozen=True)
class RunEvent:
    """An event of the run that is not a step: its start, a signal, a timer, a cancel
    or rollback request, a hold, a recovery (an audit entry)."""

    seq: int
    at: float
    type: str
    summary: str

    def to_dict(self) -> dict[str, Any]:
        return {"seq": self.seq, "at": self.at, "type": self.type, "summary": self.summary}


@dataclass(frozen=True)
class History:
    run_id: str
    workflow: str
    version: int
    status: str
    last_seq: int
    steps: tuple[Step, ...]
    events: tuple[RunEvent, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "workflow": self.workflow,
            "version": self.version,
            "status": self.status,
            "last_seq": self.last_seq,
            "steps": [step.to_dict() for step in self.steps],
            "events": [event.to_dict() for event in self.events],
        }


@dataclass(frozen=True)
class _Result:
    """What the result event itself says about an execution (no replayed context yet)."""

    node: str
    iteration: int
    attempt: int
    phase: str
    status: str
    output: Mapping[str, Any] | None
    error: str | None
    marks: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()


def is_step(event_row: Any) -> bool:
    """Whether a log entry ends an execution (no state needed to tell)."""
    if event_row.type in RESULT_EVENTS:
        return True
    return event_row.type == "signal_received" and event_row.data.get("name") in OPERATOR_RESULTS


def _result_of(event_row: Any, before: RunState) -> _Result | None:
    """The execution ``event_row`` ends, read with the state it was applied to."""
    data: Mapping[str, Any] = event_row.data
    kind = event_row.type
    node, iteration, attempt = (
        data.get("node", ""),
        data.get("iteration", 1),
        data.get("attempt", 1),
    )
    if kind in ("node_succeeded", "node_failed", "node_cancelled"):
        phase = data.get("phase", RUN_PHASE)
        status = kind.removeprefix("node_")
        error = (
            f"{data.get('error_class')}: {data.get('message')}" if kind == "node_failed" else None
        )
        output = (data.get("output") or {}) if status == "succeeded" else None
        return _Result(node, iteration, attempt, phase, status, output, error)
    if kind == "child_finished":
        ended = data.get("status")
        status = ended if ended in ("succeeded", "cancelled") else "failed"
        output = (data.get("output") or {}) if status == "succeeded" else None
        error = None if status == "succeeded" else f"child run ended {ended}: {data.get('reason')}"
        note = f"executed by child run {data.get('child_run_id')}"
        return _Result(
            node, iteration, attempt, RUN_PHASE, status, output, error, ("child",), (note,)
        )
    if kind == "plan_invalidated":
        error = f"re-planning: {data.get('reason')}"
        return _Result(
            node, iteration, attempt, RUN_PHASE, "cancelled", None, error, ("replanned",)
        )
    if kind == "signal_received" and data.get("name") in OPERATOR_RESULTS:
        wanted_node, wanted_iteration = data.get("wait"), data.get("iteration")
        held = [
            (current, phase)
            for current, phase in before.held
            if wanted_node in (None, current.node) and wanted_iteration in (None, current.iteration)
        ]
        if len(held) != 1:  # the decider accepted it, so exactly one was held
            return None
        current, held_phase = held[0]
        payload = data.get("payload") or {}
        status = OPERATOR_RESULTS[data["name"]]
        output = (payload.get("output") or {}) if status == "succeeded" else None
        error = (
            None if status == "succeeded" else str(payload.get("reason") or "failed by an operator")
        )
        by = f" by {data['actor']}" if data.get("actor") else ""
        return _Result(
            current.node,
            current.iteration,
            current.attempt,
            held_phase.value,
            status,
            output,
            error,
            ("operator",),
            (f"{data['name']}{by}",),
        )
    return None


def build_history(
    definition: WorkflowDefinition,
    run_id: str,
    event_rows: Iterable[Any],
    executions: Iterable[Any] = (),
) -> tuple[list[Step], list[RunEvent]]:
    """Fold the whole log once (every event through the decider, from the empty state)
    into its steps and its other events. ``executions`` are the run's idempotency rows,
    for the workers' own durations. Pure: the caller reads the rows."""
    steps: list[Step] = []
    others: list[RunEvent] = []
    # Per execution attempt, what happened to it before its result: the dispatch
    # (seq, at, resumed), recoveries and holds.
    dispatches: dict[ExecutionAttempt, tuple[int, float, bool]] = {}
    recoveries: dict[ExecutionAttempt, list[Mapping[str, Any]]] = {}
    holds: dict[ExecutionAttempt, list[str]] = {}
    before = RunState(run_id, definition.name, definition.version)
    for event_row, after in replay(definition, before, event_rows):
        result = _result_of(event_row, before) if is_step(event_row) else None
        if result is not None:
            steps.append(
                _step(
                    event_row,
                    result,
                    before,
                    dispatches=dispatches,
                    recoveries=recoveries,
                    holds=holds,
                )
            )
        else:
            others.append(
                RunEvent(event_row.seq, event_row.at, event_row.type, _summary(event_row))
            )
            _note_before_result(event_row, recoveries, holds)
        for execution in _dispatched(event_row.outcome):
            dispatches[execution[:4]] = (event_row.seq, event_row.at, execution[4])
        before = after
    return _with_durations(steps, executions), others


def _step(
    event_row: Any,
    result: _Result,
    before: RunState,
    *,
    dispatches: Mapping[ExecutionAttempt, tuple[int, float, bool]],
    recoveries: dict[ExecutionAttempt, list[Mapping[str, Any]]],
    holds: dict[ExecutionAttempt, list[str]],
) -> Step:
    execution = (result.node, result.iteration, result.attempt, result.phase)
    marks, notes = list(result.marks), list(result.notes)
    if result.attempt > 1:
        marks.append("retry")
        notes.append(f"attempt {result.attempt} of visit {result.iteration}")
    for recovery in recoveries.pop(execution, []):
        if "recovered" not in marks:
            marks.append("recovered")
        notes.append(
            f"recovered ({recovery.get('cause')}) from the checkpoint at seq "
            f"{recovery.get('from_seq')}"
        )
    for reason in holds.pop(execution, []):
        if "held" not in marks:
            marks.append("held")
        notes.append(f"held for an operator: {reason}")
    dispatch = dispatches.get(execution)
    if dispatch is not None and dispatch[2]:
        marks.append("resumed")
        notes.append(f"run again by an operator's recovery.retry at seq {dispatch[0]}")
    if result.phase != RUN_PHASE:
        marks.append("compensation")
        if (before.cancel or {}).get("rollback"):
            marks.append("rollback")
    transitions = (event_row.outcome or {}).get("transitions", [])
    if result.status == "failed" and [result.node, "retry", result.node] in transitions:
        marks.append("retrying")
        notes.append("transient error: another attempt is scheduled")
    return _replaced(
        _bare_step(event_row, result, before),
        dispatched_seq=dispatch[0] if dispatch is not None else None,
        # Until the idempotency rows are matched: the log's measure, dispatch to result.
        duration_s=event_row.at - dispatch[1] if dispatch is not None else None,
        duration_from="log" if dispatch is not None else None,
        marks=tuple(marks),
        notes=tuple(notes),
    )


def _bare_step(event_row: Any, result: _Result, before: RunState) -> Step:
    """The step as its event and the state before it tell (no dispatch, no duration)."""
    return Step(
        seq=event_row.seq,
        at=event_row.at,
        event=event_row.type,
        node=result.node,
        iteration=result.iteration,
        attempt=result.attempt,
        phase=result.phase,
        status=result.status,
        inputs_digest=digest(before.vars),
        outputs_digest=digest(result.output) if result.output is not None else None,
        error=result.error,
        marks=result.marks,
        notes=result.notes,
    )


def _note_before_result(
    event_row: Any,
    recoveries: dict[ExecutionAttempt, list[Mapping[str, Any]]],
    holds: dict[ExecutionAttempt, list[str]],
) -> None:
    """Recoveries and holds, kept for the step that ends the execution they concern."""
    data = event_row.data
    execution = (
        data.get("node", ""),
        data.get("iteration", 1),
        data.get("attempt", 1),
        data.get("phase", RUN_PHASE),
    )
    if event_row.type == f"{AUDIT_ONLY}.recovered":
        recoveries.setdefault(execution, []).append(data)
    elif event_row.type == "node_held":
        holds.setdefault(execution, []).append(str(data.get("reason")))


def _dispatched(outcome: Mapping[str, Any] | None) -> list[tuple[str, int, int, str, bool]]:
    """The executions a decision dispatched (or started as child runs), from what the
    live decision recorded beside its event: (node, iteration, attempt, phase, resumed)."""
    found = []
    for command in (outcome or {}).get("commands", []):
        if command.get("command") in ("Dispatch", "StartChild"):
            found.append(
                (
                    command["node"],
                    command["iteration"],
                    command["attempt"],
                    command.get("phase", RUN_PHASE),
                    bool(command.get("resumed", False)),
                )
            )
    return found


def _with_durations(steps: list[Step], executions: Iterable[Any]) -> list[Step]:
    """The worker's own measure where the idempotency row (one per node, visit and phase,
    overwritten by each attempt) still describes the step: its latest, same attempt,
    finished by a worker."""
    rows = {(e.node, e.iteration, e.phase): e for e in executions}
    latest: dict[tuple[str, int, str], int] = {}
    for index, step in enumerate(steps):
        latest[(step.node, step.iteration, step.phase)] = index
    measured = list(steps)
    for key, index in latest.items():
        step, row = steps[index], rows.get(key)
        if (
            row is None
            or row.attempt != step.attempt
            or row.duration_s is None
            or row.finished_at is None
            or "operator" in step.marks
        ):
            continue
        measured[index] = _replaced(step, duration_s=float(row.duration_s), duration_from="worker")
    return measured


def _replaced(step: Step, **changes: Any) -> Step:
    return Step(**{**step.__dict__, **changes})


def _summary(event_row: Any) -> str:
    """A run event in a few words."""
    data: Mapping[str, Any] = event_row.data
    kind: str = event_row.type
    if kind == "run_started":
        parent = data.get("parent")
        return f"started (child of run {parent['run_id']})" if parent else "started"
    if kind == "run_forked":
        return f"forked from run {data.get('parent_run_id')} at seq {data.get('fork_seq')}"
    if kind == "signal_received":
        by = f" by {data['actor']}" if data.get("actor") else ""
        return f"signal {data.get('name')}{by}"
    if kind == "timer_fired":
        return f"timer {data.get('timer_id')} fired"
    if kind == "cancel_requested":
        return f"cancel requested: {data.get('reason')}"
    if kind == "rollback_requested":
        what = (
            f" to seq {data['to_seq']}"
            if data.get("to_seq") is not None
            else (f" of step {data['step']}" if data.get("step") else "")
        )
        return f"rollback{what} requested: {data.get('reason')}"
    if kind == "node_held":
        return f"{data.get('node')}#{data.get('iteration')} held: {data.get('reason')}"
    if kind == f"{AUDIT_ONLY}.recovered":
        return (
            f"recovered {data.get('node')}#{data.get('iteration')}/{data.get('attempt', 1)} "
            f"({data.get('cause')}) from the checkpoint at seq {data.get('from_seq')}"
        )
    return kind


# -- diff ---------------------------------------------------------------------------------


class _Absent(Enum):
    ABSENT = "absent"


ABSENT = _Absent.ABSENT  # a side of a change where the path does not exist
_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*\Z")


@dataclass(frozen=True)
class Change:
    path: str
    old: Any = ABSENT
    new: Any = ABSENT

    @property
    def kind(self) -> str:
        if self.old is ABSENT:
            return "added"
        return "removed" if self.new is ABSENT else "changed"

    def to_dict(self) -> dict[str, Any]:
        entry: dict[str, Any] = {"path": self.path, "change": self.kind}
        if self.old is not ABSENT:
            entry["old"] = self.old
        if self.new is not ABSENT:
            entry["new"] = self.new
        return entry


def diff_values(old: Any, new: Any, path: str = "") -> list[Change]:
    """What differs between two JSON values, path by path: into dicts by key and lists
    by index (an appended message is one ``added`` entry, not a changed list)."""
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        changes = []
        for key in [*old, *(key for key in new if key not in old)]:
            where = _path(path, key)
            if key not in new:
                changes.append(Change(where, old=old[key]))
            elif key not in old:
                changes.append(Change(where, new=new[key]))
            else:
                changes.extend(diff_values(old[key], new[key], where))
        return changes
    if isinstance(old, list) and isinstance(new, list):
        changes = []
        for index in range(max(len(old), len(new))):
            where = f"{path}[{index}]"
            if index >= len(new):
                changes.append(Change(where, old=old[index]))
            elif index >= len(old):
                changes.append(Change(where, new=new[index]))
            else:
                changes.extend(diff_values(old[index], new[index], where))
        return changes
    # 1 == 1.0 == True in Python, not in the state's JSON: compare types too.
    if type(old) is not type(new) or old != new:
        return [Change(path, old, new)]
    return []


def diff_states(old: RunState, new: RunState) -> list[Change]:
    return diff_values(plain(old), plain(new))


def plain(state: RunState) -> dict[str, Any]:
    """The state as JSON data of its own (``to_dict`` shares the state's containers)."""
    copied: dict[str, Any] = json.loads(json.dumps(state.to_dict()))
    return copied


def _path(path: str, key: Any) -> str:
    if isinstance(key, str) and _PLAIN_KEY.match(key):
        return f"{path}.{key}" if path else key
    return f"{path}[{json.dumps(key)}]"


# -- bisect -------------------------------------------------------------------------------


def first_failing(count: int, holds: Callable[[int], bool]) -> int:
    """The first index in ``range(count)`` where ``holds`` is False, or ``count`` if it
    never is — assuming that once False it stays False. At most ceil(log2(count + 1))
    calls: ``count`` itself ("never") is one of the answers to tell apart."""
    low, high = 0, count
    while low < high:
        middle = (low + high) // 2
        if holds(middle):
            low = middle + 1
        else:
            high = middle
    return low


def load_predicate(path: str) -> Predicate:
    """``module:function``, imported; :class:`BadPredicate` if that fails."""
    try:
        predicate: Predicate = import_ref(path)
    except Exception as exc:  # whatever importing the user's module raised
        raise BadPredicate(
            f"cannot use {path!r} as a predicate: {type(exc).__name__}: {exc}"
        ) from exc
    return predicate


class Verdict(StrEnum):
    FOUND = "found"  # the step after which the predicate first fails
    FAILS_AT_START = "fails_at_start"  # before the first step already: no step is to blame
    NEVER_FAILS = "never_fails"  # it holds after the last step too
    NO_STEPS = "no_steps"  # nothing has executed yet


@dataclass(frozen=True)
class Check:
    seq: int
    label: str  # the step whose state-after was judged, or "start"
    ok: bool

    def to_dict(self) -> dict[str, Any]:
        return {"seq": self.seq, "label": self.label, "ok": self.ok}


@dataclass(frozen=True)
class Bisection:
    run_id: str
    verdict: Verdict
    checks: tuple[Check, ...]
    step: Step | None = None
    input_state: RunState | None = None  # just before the step's event
    output_state: RunState | None = None  # just after it
    output: Mapping[str, Any] | None = None  # what the step's event carries

    @property
    def changes(self) -> list[Change]:
        if self.input_state is None or self.output_state is None:
            return []
        return diff_states(self.input_state, self.output_state)

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "verdict": self.verdict.value,
            "checks": [check.to_dict() for check in self.checks],
            "step": self.step.to_dict() if self.step is not None else None,
            "input": plain(self.input_state) if self.input_state is not None else None,
            "output": dict(self.output) if self.output is not None else None,
            "changes": [change.to_dict() for change in self.changes],
        }


# -- reading a run -----------------------------------------------------------------------


@dataclass
class Timeline:
    """The timeline of one run. Each call reads the log in a transaction of its own."""

    orchestrator: Orchestrator
    run_id: str

    def history(self) -> History:
        with self.orchestrator.store.reading() as tx:
            row, definition = self._run(tx)
            event_rows = tx.events_after(self.run_id, 0, row.last_seq)
            executions = tx.executions_of(self.run_id)
        steps, others = build_history(definition, self.run_id, event_rows, executions)
        return History(
            self.run_id,
            row.workflow,
            row.version,
            row.status,
            row.last_seq,
            tuple(steps),
            tuple(others),
        )

    def steps(self) -> list[Step]:
        return list(self.history().steps)

    def state_at(self, seq: int | None = None) -> RunState:
        """The run's full state after event ``seq`` (default: its latest)."""
        with self.orchestrator.store.reading() as tx:
            row, definition = self._run(tx)
            upto = row.last_seq if seq is None else self._in_range(seq, row.last_seq)
            return restore(tx, row, definition, upto)

    def diff(self, from_seq: int, to_seq: int) -> list[Change]:
        """What changed in the state from after ``from_seq`` to after ``to_seq``."""
        with self.orchestrator.store.reading() as tx:
            row, definition = self._run(tx)
            old, new = (
                restore(tx, row, definition, self._in_range(seq, row.last_seq))
                for seq in (from_seq, to_seq)
            )
        return diff_states(old, new)

    def bisect(
        self, predicate: Predicate, on_check: Callable[[Check], None] | None = None
    ) -> Bisection:
        """The first step whose state-after fails ``predicate`` (called with the state as
        ``RunState.to_dict()`` data, a copy of its own; truthy means good), by binary
        search over the steps: it must hold at the start and, once failed, stay failed.
        Each check restores one seq (a snapshot plus the events since), never the run
        from its beginning. The state before the first step is checked only when the
        first step is the suspect, to tell "it broke there" from "it was never good"."""
        checks: list[Check] = []
        with self.orchestrator.store.reading() as tx:
            row, definition = self._run(tx)
            results = [e for e in tx.events_after(self.run_id, 0, row.last_seq) if is_step(e)]
            if not results:
                return Bisection(self.run_id, Verdict.NO_STEPS, ())

            def holds_at(seq: int, label: str) -> bool:
                state = restore(tx, row, definition, seq)
                try:
                    good = bool(predicate(plain(state)))
                except Exception as exc:  # the user's predicate: say where it broke
                    raise BadPredicate(
                        f"the predicate raised {type(exc).__name__} on the state at seq {seq}: "
                        f"{exc}"
                    ) from exc
                check = Check(seq, label, good)
                checks.append(check)
                if on_check is not None:
                    on_check(check)
                return good

            first = first_failing(
                len(results), lambda index: holds_at(results[index].seq, _label(results[index]))
            )
            if first == len(results):
                return Bisection(self.run_id, Verdict.NEVER_FAILS, tuple(checks))
            found = results[first]
            if first == 0 and not holds_at(found.seq - 1, "start"):
                return Bisection(self.run_id, Verdict.FAILS_AT_START, tuple(checks))
            before = restore(tx, row, definition, found.seq - 1)
            after = restore(tx, row, definition, found.seq)
        result = _result_of(found, before)
        assert result is not None  # is_step said so, and the decider accepted it
        step = _bare_step(found, result, before)
        return Bisection(
            self.run_id, Verdict.FOUND, tuple(checks), step, before, after, result.output
        )

    def _run(self, tx: Tx) -> tuple[Any, WorkflowDefinition]:
        row = tx.run(self.run_id)
        if row is None:
            raise RunNotFound(f"no run {self.run_id}")
        return row, self.orchestrator.registry.get(row.workflow, row.version, tx)

    def _in_range(self, seq: int, last_seq: int) -> int:
        if not 1 <= seq <= last_seq:
            raise SeqOutOfRange(
                f"run {self.run_id} has events 1 to {last_seq}; there is no seq {seq}"
            )
        return seq


def _label(event_row: Any) -> str:
    data = event_row.data
    if event_row.type == "signal_received":
        return f"{data.get('name')} (operator)"
    undo = "" if data.get("phase", RUN_PHASE) == RUN_PHASE else f" ({data['phase']})"
    return f"{data.get('node')}#{data.get('iteration', 1)}/{data.get('attempt', 1)}{undo}"
