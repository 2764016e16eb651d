"""The store's typed records against its tables: a full record has each of its table's
columns, and nothing else, so a migration that adds a column has to say what it is; and
a step's typed write of the run row names only columns the row has."""

from __future__ import annotations

from dataclasses import fields
from datetime import UTC, datetime
from types import SimpleNamespace

import pytest
from sqlalchemy import Table

from cairn.model.outcomes import RunWrite
from cairn.model.statuses import ExecutionStatus, RunStatus
from cairn.store.records import EffectRecord, ExecutionRecord, RunRecord
from cairn.store.schema import effects, executions, runs


@pytest.mark.parametrize(
    ("record", "table"),
    [(RunRecord, runs), (ExecutionRecord, executions), (EffectRecord, effects)],
    ids=["runs", "node_executions", "effects"],
)
def test_a_full_record_has_its_tables_columns(record: type, table: Table) -> None:
    assert [f.name for f in fields(record)] == [column.name for column in table.columns]


def test_statuses_come_back_as_their_enums_and_extra_columns_are_ignored() -> None:
    row = SimpleNamespace(**{c.name: None for c in executions.columns})
    row.status, row.db_now = "running", 123.0
    execution = ExecutionRecord.of(row)
    assert execution.status is ExecutionStatus.RUNNING
    run_row = SimpleNamespace(**{c.name: None for c in runs.columns})
    run_row.status = "cancelling"
    assert RunRecord.of(run_row).status is RunStatus.CANCELLING
    run_row.status = "no_such_status"
    with pytest.raises(ValueError, match="no_such_status"):
        RunRecord.of(run_row)


def test_a_run_write_sets_the_columns_it_has_and_leaves_the_others() -> None:
    at = datetime(2026, 1, 1, tzinfo=UTC)
    step = RunWrite(RunStatus.RUNNING, 3, at, ["a#1"], reason=None, state_json=None)
    assert step.columns() == {
        "status": "running",
        "last_seq": 3,
        "updated_at": at,
        "current": ["a#1"],
        "reason": None,
        "state": None,
    }
    ended = RunWrite(
        RunStatus.SUCCEEDED, 4, at, [], None, "{}", finished_at=at, snapshot_seq=4, snapshot_at=at
    )
    columns = ended.columns()
    assert (columns["finished_at"], columns["snapshot_seq"], columns["state"]) == (at, 4, "{}")
    assert set(columns) <= {column.name for column in runs.columns}
