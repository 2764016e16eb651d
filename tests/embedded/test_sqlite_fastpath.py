"""The SQLite step statements (constant SQL, cairn.store.sqlite_fastpath) write what the
portable statements they stand in for write: the same run driven through both — by the
runner, each node under its heartbeat thread — leaves the same rows, and reads back the
same."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from cairn.config import Settings
from cairn.model.messages import NodeMessage
from cairn.runtime import Runtime
from cairn.store.sql import Tx
from cairn.store.sqlite import SqliteTx

WORKFLOWS = str(Path(__file__).resolve().parents[1] / "integration" / "workflows")


# Columns that differ between any two runs (ids, clocks, the run's own id).
_VARYING = {"id", "run_id", "created_at", "updated_at", "dispatched_at", "finished_at"}
_VARYING |= {"sent_at", "snapshot_at", "at", "due_at", "duration_s", "worker", "body"}
_VARYING |= {"first_at", "started_at", "timings"}


class Taking:
    def __init__(self) -> None:
        self.messages: list[NodeMessage] = []

    def publish(self, messages: Sequence[NodeMessage]) -> bool:
        self.messages.extend(messages)
        return True

    def backlog(self, queue: str | None = None) -> int | None:
        return None


def _plain(value: Any) -> str:
    """A column's value as text to compare: JSON parsed (the cached state is compact text,
    other JSON SQLAlchemy's), without what differs from run to run."""
    if isinstance(value, str) and value[:1] in "{[":
        value = json.loads(value)
    return json.dumps(_without_varying(value), sort_keys=True)


def _without_varying(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_varying(v) for k, v in value.items() if k not in _VARYING}
    if isinstance(value, list):
        return [_without_varying(v) for v in value]
    return value if isinstance(value, int | float | str | bool | None) else str(value)


def _drive(tmp_path: Path, name: str) -> dict[str, list[tuple[Any, ...]]]:
    """A fan-out run (fan_all) and a chain driven by hand to their ends on a fresh
    SQLite file; every table's rows, without what differs from run to run."""
    runtime = Runtime.build(
        Settings(home=tmp_path / name, workflows=[WORKFLOWS], snapshot_every_events=3)
    )
    taking = Taking()
    runtime.orchestrator.publisher = taking
    try:
        for workflow in ("fan_all", "chain10"):
            runtime.orchestrator.submit(workflow, {})
            while taking.messages:
                assert str(runtime.runner.run(taking.messages.pop(0).to_dict())) == "committed"
        tables = {}
        with runtime.store.reading() as tx:
            for table in ("runs", "events", "node_executions", "outbox", "snapshots", "timers"):
                result = tx.connection.execute(text(f"SELECT * FROM {table}"))
                kept = [i for i, column in enumerate(result.keys()) if column not in _VARYING]
                tables[table] = sorted(
                    (tuple(_plain(row[i]) for i in kept) for row in result), key=str
                )
            views = [runtime.orchestrator.get_run(run.id).to_dict() for run in tx.list_runs()]
        tables["views"] = sorted(
            (tuple(str(v[k]) for k in sorted(v) if k not in _VARYING) for v in views), key=str
        )
        return tables
    finally:
        runtime.close()


def test_the_constant_sql_writes_what_the_portable_statements_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fast = _drive(tmp_path, "fast")
    for method in ("execution_and_run", "complete_step", "write_step", "insert_run"):
        monkeypatch.setattr(SqliteTx, method, getattr(Tx, method))
    monkeypatch.setattr(SqliteTx, "visible_versions", Tx.visible_versions)
    portable = _drive(tmp_path, "portable")
    assert fast["runs"], "nothing was written"
    for table, rows in portable.items():
        assert fast[table] == rows, table
