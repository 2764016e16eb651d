"""The store's typed records against its tables: a full record has each of its table's
columns, and nothing else, so a migration that adds a column has to say what it is."""

from __future__ import annotations

from dataclasses import fields
from types import SimpleNamespace

import pytest
from sqlalchemy import Table

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
