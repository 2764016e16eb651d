"""Whether one run may move to another version of its workflow, checked against its own
recorded history before anything is written (docs/versions.md, "What is checked").

Pure: the caller reads the run (its row, its state as recorded, every event, its
executions) and hands it in; the only code called besides cairn's is the user's mapping.
In order, a run is refused when:

1. it is not standing still: not waiting or between nodes, an execution in flight (in
   its state or in the idempotency table), a node held for an operator, inside a
   parallel section;
2. its history, replayed from its first event through the decider, does not reach the
   state recorded for it (so a move decided on that state could not be restored later);
3. the mapping raises, answers something other than ``Migration`` or ``None``, answers
   differently for the same run, or says it stays;
4. where it would go is not in the new graph (its node removed and not placed
   elsewhere), or is a branch of a parallel node;
5. the state it would have fails the new version's ``state:`` schema;
6. a step that took effect would have no compensation in the new version;
7. the new version's decider refuses the move;
8. its history with the move appended, replayed from its first event, does not reach
   the state the move decides: the place the run reaches is the place a later restore
   reaches too.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from cairn.decider import Decision, decide
from cairn.decider.migration import placeable, position, why_unmovable
from cairn.engine.reads import Versions, first_version, replay
from cairn.errors import CairnError
from cairn.model.definition import WorkflowDefinition
from cairn.model.events import RunMigrated, event_to_dict
from cairn.model.migrations import MigratingRun, Migration, Reason, RunVerdict
from cairn.model.state import RunState
from cairn.model.statuses import ExecutionStatus
from cairn.store.records import EventRecord, ExecutionRecord, RunRecord

Mapper = Callable[[MigratingRun], Migration | None]


@dataclass(frozen=True)
class Candidate:
    """A run as read for the checks: its row, its state as recorded (the row's cache, or
    its latest snapshot and the events since), every event, and its executions."""

    row: RunRecord
    recorded: RunState
    events: Sequence[EventRecord]
    executions: Sequence[ExecutionRecord]


@dataclass(frozen=True)
class Checked:
    """A run's verdict and, when it may move, the event that moves it and the decision
    it makes (on the state its history reaches)."""

    verdict: RunVerdict
    event: RunMigrated | None = None
    decision: Decision | None = None


@dataclass(frozen=True)
class _Entry:
    """An event as the log holds one, for the replay of a history with the move added."""

    type: str
    data: Mapping[str, Any]


class _Refused(Exception):  # control flow: the first check a run fails
    def __init__(self, code: str, message: str) -> None:
        self.reason = Reason(code, message)


@dataclass(frozen=True)
class MigrationCheck:
    """The checks of one migration: from ``old`` to ``new`` through ``mapper`` (named
    ``mapping``), the move written by ``actor`` for ``reason``."""

    old: WorkflowDefinition
    new: WorkflowDefinition
    mapping: str
    mapper: Mapper
    versions: Versions
    actor: str | None = None
    reason: str = ""

    def check(self, run: Candidate, at: float) -> Checked:
        """The verdict on ``run``, as if moved at ``at``."""
        node = position(run.recorded)
        try:
            self._standing(run)
            replayed = self._replayed(run)
            answer = self._answer(run, replayed, node)
            target, values = self._target(answer, node, replayed)
            event = RunMigrated(
                at=at,
                from_version=self.old.version,
                to_version=self.new.version,
                node=target,
                vars=values,
                mapping=self.mapping,
                reason=self.reason,
                actor=self.actor,
            )
            decision = self._decided(run, replayed, event)
        except _Refused as refused:
            return Checked(RunVerdict(run.row.id, node, reasons=(refused.reason,)))
        return Checked(RunVerdict(run.row.id, node, to_node=target), event, decision)

    def _standing(self, run: Candidate) -> None:
        if run.recorded.version != self.old.version:
            raise _Refused(
                "version_moved",
                f"it is on version {run.recorded.version} now, not {self.old.version}",
            )
        unmovable = why_unmovable(run.recorded)
        if unmovable is not None:
            raise _Refused(*unmovable)
        active = sorted(
            f"{e.node}#{e.iteration}" + ("" if e.phase == "run" else f" ({e.phase})")
            for e in run.executions
            if ExecutionStatus(e.status).active
        )
        if active:
            raise _Refused(
                "in_flight",
                f"{', '.join(active)} {'is' if len(active) == 1 else 'are'} in flight in the "
                "idempotency table: a worker's result would arrive to a run on another graph",
            )

    def _replayed(self, run: Candidate) -> RunState:
        """The state the run's own history reaches, from its first event."""
        start = RunState(run.row.id, self.old.name, first_version(run.events, self.old.version))
        try:
            state = _fold(self.old, start, run.events, self.versions)
        except CairnError as exc:
            raise _Refused("history", f"its history does not replay: {exc}") from exc
        differs = _first_difference(run.recorded.to_dict(), state.to_dict())
        if differs is not None:
            raise _Refused(
                "history", f"its history replayed does not reach its recorded state ({differs})"
            )
        return state

    def _answer(self, run: Candidate, replayed: RunState, node: str | None) -> Migration | None:
        """The mapping's answer, asked twice (the replayed state, the recorded one): a
        mapping must be a function of the run, or a dry run proves nothing."""
        answers = [self._ask(state, node) for state in (replayed, run.recorded)]
        if answers[0] != answers[1]:
            raise _Refused(
                "mapping_unstable", f"{self.mapping} answers differently for the same run"
            )
        answer = answers[0]
        if answer is not None and answer.stay is not None:
            raise _Refused("stays", f"{self.mapping} keeps it on its version: {answer.stay}")
        return answer

    def _ask(self, state: RunState, node: str | None) -> Migration | None:
        seen = MigratingRun(
            run_id=state.run_id,
            workflow=self.old.name,
            from_version=self.old.version,
            to_version=self.new.version,
            node=node or "",
            status=state.status.value,
            vars=MappingProxyType(copy.deepcopy(state.vars)),
            visits=MappingProxyType(dict(state.visits)),
        )
        try:
            answer = self.mapper(seen)
        except Exception as exc:  # the user's code: its failure is this run's verdict
            raise _Refused(
                "mapping_failed", f"{self.mapping} raised {type(exc).__name__}: {exc}"
            ) from exc
        if answer is not None and not isinstance(answer, Migration):
            raise _Refused(
                "mapping_failed",
                f"{self.mapping} returned a {type(answer).__name__}, not a Migration or None",
            )
        return answer

    def _target(
        self, answer: Migration | None, node: str | None, replayed: RunState
    ) -> tuple[str, dict[str, Any]]:
        target = answer.node if answer is not None and answer.node is not None else node
        if target is None:
            raise _Refused(
                "node_removed", "it stands at no node, and the mapping places it nowhere"
            )
        misplaced = placeable(self.new, target)
        if misplaced is not None:
            code = (
                "node_removed"
                if target == node and target not in self.new.nodes
                else "unknown_target"
            )
            why = (
                f"its node {node!r} is not in {self.new.key} and the mapping does not place it"
                if code == "node_removed"
                else f"the mapping places it where it cannot go: {misplaced}"
            )
            raise _Refused(code, why)
        mapped = answer.vars if answer is not None and answer.vars is not None else replayed.vars
        values = _json_object(mapped)
        self._fits_schema(values)
        lost = sorted(
            f"{done.node}#{done.iteration}"
            for done in replayed.compensable
            if getattr(self.new.nodes.get(done.node), "compensate", None) is None
        )
        if lost:
            raise _Refused(
                "compensation_lost",
                f"{', '.join(lost)} took effect and {self.new.key} has no compensation for it",
            )
        return target, values

    def _fits_schema(self, values: Mapping[str, Any]) -> None:
        if self.new.state_schema is None:
            return
        # Here, not with the module: a process that never migrates never loads it.
        from jsonschema import Draft202012Validator  # noqa: PLC0415

        errors = sorted(
            Draft202012Validator(self.new.state_schema).iter_errors(dict(values)),
            key=lambda error: list(error.path),
        )
        if errors:
            details = "; ".join(
                f"{'/'.join(map(str, e.path)) or '(state)'}: {e.message}" for e in errors
            )
            raise _Refused(
                "state_schema", f"its state does not match {self.new.key}'s state: {details}"
            )

    def _decided(self, run: Candidate, replayed: RunState, event: RunMigrated) -> Decision:
        try:
            decision = decide(self.new, replayed, event)
        except CairnError as exc:
            raise _Refused("refused", f"{self.new.key} refuses the move: {exc}") from exc
        moved = [*run.events, _Entry(event.type, event_to_dict(event))]
        start = RunState(run.row.id, self.old.name, first_version(moved, self.old.version))
        try:
            state = _fold(self.old, start, moved, self._with_both())
        except CairnError as exc:
            raise _Refused(
                "not_replayable", f"its history with the move does not replay: {exc}"
            ) from exc
        differs = _first_difference(decision.state.to_dict(), state.to_dict())
        if differs is not None:
            raise _Refused(
                "not_replayable",
                f"its history with the move replays to another place than the move ({differs})",
            )
        return decision

    def _with_both(self) -> Versions:
        known = {self.old.version: self.old, self.new.version: self.new}
        return lambda version: known.get(version) or self.versions(version)


def _fold(
    definition: WorkflowDefinition, start: RunState, rows: Sequence[Any], versions: Versions
) -> RunState:
    """The state a history reaches from ``start``."""
    state = start
    for _entry, after in replay(definition, start, rows, versions):
        state = after
    return state


def _json_object(values: object) -> dict[str, Any]:
    """The mapped state as it will be stored: a JSON object."""
    if not isinstance(values, Mapping):
        raise _Refused(
            "mapping_failed", f"the mapped state is a {type(values).__name__}, not an object"
        )
    try:
        plain: dict[str, Any] = json.loads(json.dumps(dict(values)))
    except (TypeError, ValueError) as exc:
        raise _Refused("mapping_failed", f"the mapped state is not JSON: {exc}") from exc
    return plain


def _first_difference(expected: Any, actual: Any, path: str = "") -> str | None:
    """Where two states differ, as JSON would store them (the first place), or None."""
    expected, actual = json.loads(json.dumps(expected)), json.loads(json.dumps(actual))
    return _differ(expected, actual, path)


def _differ(expected: Any, actual: Any, path: str) -> str | None:
    if isinstance(expected, dict) and isinstance(actual, dict):
        for key in sorted(set(expected) | set(actual), key=str):
            found = _differ(expected.get(key), actual.get(key), f"{path}.{key}")
            if found is not None:
                return found
        return None
    if isinstance(expected, list) and isinstance(actual, list) and len(expected) == len(actual):
        for index, (one, other) in enumerate(zip(expected, actual, strict=True)):
            found = _differ(one, other, f"{path}[{index}]")
            if found is not None:
                return found
        return None
    return (
        None if expected == actual else f"{path or '.'}: recorded {expected!r}, replayed {actual!r}"
    )
