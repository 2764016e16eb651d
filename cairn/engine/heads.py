"""The latest step this process committed to each run it is completing steps of, and one
lock per run, so that sibling branches finishing together in one process do not race
for the run row.

A worker reads its run before it runs a node; the one-statement completion
(``complete_step``) is conditional on the run being still at that read's ``last_seq``.
Branches of a fan-out read the same ``last_seq`` and finish together: the first commits,
and each other's statement finds the run moved. Here they queue on the run's lock
instead, and whoever takes it next takes every completion queued meanwhile, to plan each
on the one before and write them together (:mod:`cairn.engine.optimistic`) — on the head
the last step committed here left: the run exactly as the database now has it, unless
another process moved it meanwhile, which the statement's condition still catches (then
the run as that statement found it is planned on). The database stays the arbiter; this
only spares it conflicts it would refuse, and commits it would make one by one.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Generic, TypeVar

from cairn.engine.reads import Restored
from cairn.model.outcomes import RunWrite
from cairn.model.state import RunState

# Heads kept, the least recently committed forgotten first: a forgotten head costs a
# conflict and a read, never a wrong step.
HEADS_KEPT = 4096

Queued = TypeVar("Queued")


@dataclass(frozen=True, slots=True)
class _Head:
    state: RunState
    run: RunWrite  # the step's write of the row
    # The row's columns a step may leave as they were, as this one left them.
    finished_at: datetime | None
    snapshot_seq: int
    snapshot_at: datetime | None
    # The run the step was planned on: the row's other columns, and the database's clock.
    base: Restored
    cached: bool  # whether the step left the state on the row
    merging: bool  # whether the step was a branch's merge (Restored.merging)

    @property
    def last_seq(self) -> int:
        return self.run.last_seq

    @classmethod
    def of_step(
        cls,
        known: Restored,
        run: RunWrite,
        state: RunState,
        cached: bool | None = None,
        merging: bool = False,
    ) -> _Head:
        """The head a step planned on ``known`` leaves, writing ``run`` (``cached``: the
        state on the row, if not as ``run`` writes it; ``merging``: a branch's merge)."""
        row = known.row
        return cls(
            state,
            run,
            row.finished_at if run.finished_at is None else run.finished_at,
            row.snapshot_seq if run.snapshot_seq is None else run.snapshot_seq,
            row.snapshot_at if run.snapshot_at is None else run.snapshot_at,
            # a read's row carries the state it was read with: not kept twice
            known if row.state is None else replace(known, row=replace(row, state=None)),
            run.state_json is not None if cached is None else cached,
            merging,
        )

    def restored(self, known: Restored | None = None) -> Restored:
        """``known`` (else the run the step was planned on) moved to this head: the row's
        other columns (priority, webhook, ...) from ``known``, the step's from the head."""
        known = self.base if known is None else known
        run = self.run
        row = replace(
            known.row,
            status=run.status,
            last_seq=run.last_seq,
            updated_at=run.updated_at,
            current=run.current,
            reason=run.reason,
            state=None,
            finished_at=self.finished_at,
            snapshot_seq=self.snapshot_seq,
            snapshot_at=self.snapshot_at,
        )
        return replace(
            known, row=row, state=self.state, row_cached=self.cached, merging=self.merging
        )


@dataclass
class _RunLock(Generic[Queued]):
    """A run's lock, the completions queued for it and how many threads want it."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    queued: list[Queued] = field(default_factory=list)
    wanted: int = 0


class RunHeads(Generic[Queued]):
    """Per run: a lock for completing its steps, the completions queued for it, and the
    head its last step left."""

    def __init__(self, kept: int = HEADS_KEPT) -> None:
        self._kept = kept
        self._heads: OrderedDict[str, _Head] = OrderedDict()
        self._locks: dict[str, _RunLock[Queued]] = {}
        self._guard = threading.Lock()

    @contextmanager
    def taking(self, run_id: str, item: Queued) -> Iterator[list[Queued]]:
        """Queue ``item`` for the run's lock, and hold the lock: yields what was queued and
        not yet taken — ``item`` among them, unless a holder before took it (and
        settles it): then whatever was queued after it, possibly nothing."""
        with self._guard:
            entry = self._locks.get(run_id)
            if entry is None:
                entry = self._locks[run_id] = _RunLock()
            entry.queued.append(item)
            entry.wanted += 1
        try:
            with entry.lock:
                with self._guard:
                    taken, entry.queued = entry.queued, []
                yield taken
        finally:
            with self._guard:
                entry.wanted -= 1
                if entry.wanted == 0:
                    del self._locks[run_id]

    def waiting(self, run_id: str) -> int:
        """Completions of the run queued and not yet taken."""
        with self._guard:
            entry = self._locks.get(run_id)
            return 0 if entry is None else len(entry.queued)

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

    def current(self, run_id: str) -> Restored | None:
        """The run as the last step this process committed to it left it (None: no such
        step, or one that ended the run) — the database's view unless another process
        moved the run since, as a read a moment after that commit would have found it."""
        with self._guard:
            head = self._heads.get(run_id)
        return None if head is None else head.restored()

    def forget(self, run_id: str) -> None:
        """A step of the run committed here another way (the locking path): whatever
        head was kept is older than the run now."""
        with self._guard:
            self._heads.pop(run_id, None)

    def latest(self, known: Restored) -> Restored:
        """``known`` (a worker's read), or the head committed here since, if newer."""
        with self._guard:
            head = self._heads.get(known.row.id)
        if head is None or head.last_seq <= known.row.last_seq:
            return known
        return head.restored(known)

    @staticmethod
    def after(
        known: Restored, run: RunWrite, state: RunState, *, cached: bool | None = None
    ) -> Restored:
        """The run as a step planned on ``known`` leaves it, writing ``run`` and leaving
        ``state`` (on the row if ``cached``; None: as ``run`` says) — what the step after
        it is planned on, before either commits, merged as ``known`` is."""
        return _Head.of_step(known, run, state, cached, known.merging).restored(known)

    def committed(
        self,
        known: Restored,
        run: RunWrite,
        state: RunState,
        *,
        cached: bool | None = None,
        merging: bool = False,
    ) -> None:
        """A step committed on ``known`` (the run as it was planned on), writing the row
        ``run`` and leaving ``state`` (on the row if ``cached``; None: as ``run`` says;
        ``merging``: the step was a branch's merge)."""
        row = known.row
        with self._guard:
            if run.status.terminal:
                self._heads.pop(row.id, None)
                return
            self._heads[row.id] = _Head.of_step(known, run, state, cached, merging)
            self._heads.move_to_end(row.id)
            while len(self._heads) > self._kept:
                self._heads.popitem(last=False)
