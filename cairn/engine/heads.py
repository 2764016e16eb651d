"""The latest step this process committed to each run it is completing steps of, and one
lock per run, so that sibling branches finishing together in one process do not race
for the run row.

A worker reads its run before it runs a node; the one-statement completion
(``complete_step``) is conditional on the run being still at that read's ``last_seq``.
Branches of a fan-out read the same ``last_seq`` and finish together: the first commits,
and each other's statement finds the run moved. Here they queue on the run's lock
instead (a step's plan and one statement long), and each plans on the head the one
before it committed — the run exactly as the database now has it, unless another
process moved it meanwhile, which the statement's condition still catches (then the
run as that statement found it is planned on: :meth:`cairn.engine.advance.Steps.complete`).
The database stays the arbiter; this only spares it conflicts it would refuse.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime

from cairn.engine.reads import Restored
from cairn.model.outcomes import RunWrite
from cairn.model.state import RunState

# Heads kept, the least recently committed forgotten first: a forgotten head costs a
# conflict and a read, never a wrong step.
HEADS_KEPT = 4096


@dataclass(frozen=True, slots=True)
class _Head:
    state: RunState
    run: RunWrite  # the step's write of the row
    # The row's columns a step may leave as they were, as this one left them.
    finished_at: datetime | None
    snapshot_seq: int
    snapshot_at: datetime | None

    @property
    def last_seq(self) -> int:
        return self.run.last_seq

    @property
    def cached(self) -> bool:
        """Whether the step left the state on the row."""
        return self.run.state_json is not None


class RunHeads:
    """Per run: a lock for completing its steps, and the head its last one left."""

    def __init__(self, kept: int = HEADS_KEPT) -> None:
        self._kept = kept
        self._heads: OrderedDict[str, _Head] = OrderedDict()
        self._locks: dict[str, tuple[threading.Lock, int]] = {}
        self._guard = threading.Lock()

    @contextmanager
    def holding(self, run_id: str) -> Iterator[None]:
        """The run's lock, for a completion's plan and statement."""
        with self._guard:
            lock, holders = self._locks.get(run_id, (threading.Lock(), 0))
            self._locks[run_id] = (lock, holders + 1)
        try:
            with lock:
                yield
        finally:
            with self._guard:
                lock, holders = self._locks[run_id]
                if holders == 1:
                    del self._locks[run_id]
                else:
                    self._locks[run_id] = (lock, holders - 1)

    def state_at(self, run_id: str, last_seq: int) -> RunState | None:
        """The state this process's last step of the run left, if the run is still
        where that step left it (``last_seq``, as just read): a worker beginning the
        run's next node needs no restore — of a state too large for the row's cache,
        the latest snapshot and every event since, each step a long run grew. Never
        changed by its readers (states are copied on write: the decider's, the
        reducers', a handler's context)."""
        with self._guard:
            head = self._heads.get(run_id)
        return head.state if head is not None and head.last_seq == last_seq else None

    def latest(self, known: Restored) -> Restored:
        """``known`` (a worker's read), or the head committed here since, if newer: the
        row's other columns (priority, webhook, ...) from the read, the step's from the
        head."""
        with self._guard:
            head = self._heads.get(known.row.id)
        if head is None or head.last_seq <= known.row.last_seq:
            return known
        run = head.run
        row = replace(
            known.row,
            status=run.status,
            last_seq=run.last_seq,
            updated_at=run.updated_at,
            current=run.current,
            reason=run.reason,
            state=None,
            finished_at=head.finished_at,
            snapshot_seq=head.snapshot_seq,
            snapshot_at=head.snapshot_at,
        )
        return replace(known, row=row, state=head.state, row_cached=head.cached)

    def committed(self, known: Restored, run: RunWrite, state: RunState) -> None:
        """A step committed on ``known`` (the run as it was planned on), writing the row
        ``run`` and leaving ``state``."""
        row = known.row
        with self._guard:
            if run.status.terminal:
                self._heads.pop(row.id, None)
                return
            self._heads[row.id] = _Head(
                state,
                run,
                row.finished_at if run.finished_at is None else run.finished_at,
                row.snapshot_seq if run.snapshot_seq is None else run.snapshot_seq,
                row.snapshot_at if run.snapshot_at is None else run.snapshot_at,
            )
            self._heads.move_to_end(row.id)
            while len(self._heads) > self._kept:
                self._heads.popitem(last=False)
