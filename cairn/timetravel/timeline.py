"""A run's timeline, read-only: every step with what it was given and what it produced,
the state at any seq, what changed between two seqs, and the first step after which a
predicate fails (``cairn history``, ``cairn state --at``, ``cairn diff``, ``cairn bisect``).

Nothing here writes, dispatches or calls a handler: every state is rebuilt from the log
by the pure decider — :func:`~cairn.engine.reads.restore` for a single seq (the latest
snapshot at or before it plus the events since), :func:`~cairn.engine.reads.replay` for
the whole history — so travelling in time never touches the real world.

The pieces, one module each: a step and its digests (:mod:`cairn.timetravel.steps`), the
history folded from the log (:mod:`cairn.timetravel.history`), state diffs
(:mod:`cairn.timetravel.diff`) and the bisection (:mod:`cairn.timetravel.bisection`).
``digest`` stays importable from here, where ``docs/time-travel.md`` names it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cairn.engine.orchestrator import Orchestrator
from cairn.engine.reads import Versions, restore, versions_of
from cairn.errors import InvalidInput, RunNotFound
from cairn.model.definition import WorkflowDefinition
from cairn.model.state import RunState
from cairn.store.sql import Tx
from cairn.timetravel.bisection import Bisection, Check, Predicate, bisect_steps
from cairn.timetravel.diff import Change, diff_states
from cairn.timetravel.history import History, build_history
from cairn.timetravel.steps import Step, digest, is_step


class SeqOutOfRange(InvalidInput):
    code = "seq_out_of_range"


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
            versions = self._versions(row, tx)
            steps, others = build_history(definition, self.run_id, event_rows, executions, versions)
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
            return restore(tx, row, definition, upto, self._versions(row, tx))

    def diff(self, from_seq: int, to_seq: int) -> list[Change]:
        """What changed in the state from after ``from_seq`` to after ``to_seq``."""
        with self.orchestrator.store.reading() as tx:
            row, definition = self._run(tx)
            versions = self._versions(row, tx)
            old, new = (
                restore(tx, row, definition, self._in_range(seq, row.last_seq), versions)
                for seq in (from_seq, to_seq)
            )
        return diff_states(old, new)

    def bisect(
        self, predicate: Predicate, on_check: Callable[[Check], None] | None = None
    ) -> Bisection:
        """The first step whose state-after fails ``predicate``: see
        :func:`~cairn.timetravel.bisection.bisect_steps`. Each check restores one seq (a
        snapshot plus the events since), never the run from its beginning."""
        with self.orchestrator.store.reading() as tx:
            row, definition = self._run(tx)
            results = [e for e in tx.events_after(self.run_id, 0, row.last_seq) if is_step(e)]
            return bisect_steps(
                self.run_id,
                results,
                lambda seq: restore(tx, row, definition, seq, self._versions(row, tx)),
                predicate,
                on_check,
            )

    def _run(self, tx: Tx) -> tuple[Any, WorkflowDefinition]:
        row = tx.run(self.run_id)
        if row is None:
            raise RunNotFound(f"no run {self.run_id}")
        return row, self.orchestrator.registry.get(row.workflow_ref, row.version, tx)

    def _versions(self, row: Any, tx: Tx) -> Versions:
        return versions_of(self.orchestrator.registry, row, tx)

    def _in_range(self, seq: int, last_seq: int) -> int:
        if not 1 <= seq <= last_seq:
            raise SeqOutOfRange(
                f"run {self.run_id} has events 1 to {last_seq}; there is no seq {seq}"
            )
        return seq


__all__ = ["SeqOutOfRange", "Timeline", "digest"]
