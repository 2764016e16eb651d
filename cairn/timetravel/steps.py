"""One step of a run, as its result event and the state before it tell: what the
handler was given, what it produced, and what is special about it.

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
- Its **duration**: see :mod:`cairn.timetravel.history`, which folds the whole log and
  so can match a result with its dispatch.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cairn.model.state import RunState
from cairn.store.records import EventRecord

# An execution by what tells its attempts apart: (node, iteration, attempt, phase).
ExecutionAttempt = tuple[str, int, int, str]

RESULT_EVENTS = frozenset(
    {"node_succeeded", "node_failed", "node_cancelled", "child_finished", "plan_invalidated"}
)
OPERATOR_RESULTS = {"recovery.complete": "succeeded", "recovery.fail": "failed"}
RUN_PHASE = "run"


def digest(value: Any) -> str:
    """sha256 of the canonical JSON of ``value``: equal data, equal digest, whatever the
    key order."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


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
class StepResult:
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


def is_step(event_row: EventRecord) -> bool:
    """Whether a log entry ends an execution (no state needed to tell)."""
    if event_row.type in RESULT_EVENTS:
        return True
    return event_row.type == "signal_received" and event_row.data.get("name") in OPERATOR_RESULTS


def result_of(event_row: EventRecord, before: RunState) -> StepResult | None:
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
        return StepResult(node, iteration, attempt, phase, status, output, error)
    if kind == "child_finished":
        ended = data.get("status")
        status = ended if ended in ("succeeded", "cancelled") else "failed"
        output = (data.get("output") or {}) if status == "succeeded" else None
        error = None if status == "succeeded" else f"child run ended {ended}: {data.get('reason')}"
        note = f"executed by child run {data.get('child_run_id')}"
        return StepResult(
            node, iteration, attempt, RUN_PHASE, status, output, error, ("child",), (note,)
        )
    if kind == "plan_invalidated":
        error = f"re-planning: {data.get('reason')}"
        return StepResult(
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
        return StepResult(
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


def bare_step(event_row: EventRecord, result: StepResult, before: RunState) -> Step:
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
