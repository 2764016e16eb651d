"""PostgreSQL, the fleet's database: the portable statements, and the hot path as
constant SQL on the psycopg connection below SQLAlchemy (:mod:`cairn.store.fastpath`) —
a step's read and its write one round trip each, its completion one all-or-nothing
statement, a batch of submits pipelined; the run row locked with the database's clock in
the same round trip; ``SKIP LOCKED`` for rows several schedulers share.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Engine, Select, func, select, text
from sqlalchemy.dialects import postgresql

from cairn.model.keys import ExecutionKey
from cairn.model.outcomes import BranchMerge, Merged, StepResult, StepWrites
from cairn.store import branch_merges, fastpath
from cairn.store.database import autocommit_twin
from cairn.store.definitions import VisibleWorkflow
from cairn.store.errors import translated
from cairn.store.records import ExecutionHead, RunRecord, StepCompletion
from cairn.store.schema import outbox, runs
from cairn.store.sql import Store, Tx

# pg_advisory_xact_lock(int, int): the first key names what is locked (the two-key
# space is separate from the one-key space that migrations lock in).
ARTIFACTS_LOCKS = 0x61727466  # "artf": a blob's, shared by puts, alone for a cleanup


class PostgresTx(Tx):
    def _insert(self, table: Any) -> Any:
        return postgresql.insert(table)

    def _skip_locked(self, query: Select[Any]) -> Select[Any]:
        return query.with_for_update(skip_locked=True)

    def _share_locked(self, query: Select[Any]) -> Select[Any]:
        return query.with_for_update(read=True)

    def _driver(self) -> Any:
        """The psycopg connection under this transaction (see cairn.store.fastpath)."""
        return self.connection.connection.driver_connection

    def stamp(self) -> Any:
        return func.now()

    def _blob_lock(self, sha256: str, *, shared: bool) -> None:
        function = "pg_advisory_xact_lock_shared" if shared else "pg_advisory_xact_lock"
        # A 31-bit key from the digest: a collision only makes two blobs wait for each other.
        key = int(sha256[:8], 16) & 0x7FFF_FFFF
        self.connection.execute(
            text(f"SELECT {function}(:namespace, :key)"),
            {"namespace": ARTIFACTS_LOCKS, "key": key},
        )

    def now(self) -> float:
        value = self.connection.execute(select(func.extract("epoch", func.clock_timestamp())))
        return float(value.scalar_one())

    def visible_workflow(
        self, caller: str, name: str, owner: str | None, version: int | None
    ) -> VisibleWorkflow:
        driver = self._driver()
        if not driver.autocommit:  # inside a transaction (a child's start, a tick)
            return super().visible_workflow(caller, name, owner, version)
        row = fastpath.visible_workflow(driver, caller, name, owner, version)
        return VisibleWorkflow(row.owner, row.version, tuple(row.owners), float(row.db_now))

    def submit_run(
        self, values: Mapping[str, Any], writes: StepWrites
    ) -> tuple[bool, dict[tuple[str, int, str], int]]:
        return fastpath.submit_run(self._driver(), values, writes)

    def submit_runs(
        self, runs: Sequence[tuple[Mapping[str, Any], StepWrites]]
    ) -> list[tuple[bool, dict[tuple[str, int, str], int]]]:
        return fastpath.submit_runs(self._driver(), runs)

    def lock_run(self, run_id: str, *, skip_locked: bool = False) -> tuple[RunRecord | None, float]:
        clock = func.extract("epoch", func.clock_timestamp()).label("db_now")
        row = self.connection.execute(
            select(runs, clock)
            .where(runs.c.id == run_id)
            .with_for_update(of=runs, skip_locked=skip_locked)
        ).first()
        if row is None:
            return None, 0.0
        return RunRecord.of(row), float(row.db_now)

    def write_step(self, run_id: str, writes: StepWrites, *, last: bool = True) -> list[int]:
        return fastpath.write_step(self._driver(), run_id, writes, commit=last)

    def execution_and_run(self, key: ExecutionKey) -> tuple[ExecutionHead | None, RunRecord | None]:
        row = fastpath.execution_and_run(self._driver(), key.params())
        return self._execution_and_run_of(row, key)

    def complete_step(
        self,
        key: ExecutionKey,
        *,
        attempt: int,
        fence: int,
        known_seq: int,
        result: Mapping[str, Any],
        writes: StepWrites,
    ) -> StepCompletion:
        return fastpath.complete_step(
            self._driver(),
            key.params(),
            attempt=attempt,
            fence=fence,
            known_seq=known_seq,
            result=result,
            writes=writes,
        )

    def complete_steps(self, steps: Sequence[StepResult]) -> list[StepCompletion]:
        return fastpath.complete_steps(self._driver(), steps)

    def merge_step(
        self, step: StepResult, merge: BranchMerge
    ) -> tuple[StepCompletion, Merged | None]:
        return branch_merges.merge_step(self._driver(), step, merge)

    def merge_steps(
        self, steps: Sequence[tuple[StepResult, BranchMerge | None]]
    ) -> list[tuple[StepCompletion, Merged | None]]:
        return branch_merges.merge_steps(self._driver(), steps)

    def finish_and_lock(
        self, key: ExecutionKey, attempt: int, fence: int, values: Mapping[str, Any]
    ) -> tuple[RunRecord | None, float]:
        row = fastpath.finish_and_lock(self._driver(), key.params(), attempt, fence, values)
        if row is None:
            return None, 0.0
        return RunRecord.of(row), float(row.db_now)

    def _mark_sent_statement(self, ids: Sequence[int]) -> Any:
        # One array parameter, so the SQL text (and its prepared plan) does not change with
        # the number of ids.
        return self._sent_update(outbox.c.id == func.any(postgresql.array(list(ids))))


class PostgresStore(Store):
    tx_class = PostgresTx
    merges_branches = True

    def __init__(self, engine: Engine) -> None:
        super().__init__(engine)
        self._autocommit = autocommit_twin(engine)

    def dispose(self) -> None:
        super().dispose()
        self._autocommit.dispose()

    @contextmanager
    def statements(self, *, writes: bool = False) -> Iterator[Tx]:
        """A connection on which each statement is a transaction of its own: no BEGIN and
        COMMIT round trips (measured: they cost as much as the statements). Only for
        single statements that must stand alone, and reads of immutable rows."""
        with translated(), self._autocommit.connect() as connection, translated(connection):
            yield self.tx_class(connection)
