"""Retention on PostgreSQL and SQLite: runs that ended longer ago than
CAIRN_RUN_RETENTION_S go with their whole history; unfinished runs, runs still holding
artifacts and the effects ledger stay."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from sqlalchemy import insert, select

from cairn.artifacts.stores import open_store
from cairn.config import Settings
from cairn.model.statuses import RunStatus
from cairn.runtime import Runtime
from cairn.store.records import utcnow
from cairn.store.schema import artifacts, effects, events, executions, runs
from tests.support.cluster import WORKFLOWS


@pytest.mark.parametrize("backend", ["postgresql", "sqlite"])
def test_runs_that_ended_long_enough_ago_are_deleted(
    backend: str, database_url: str, tmp_path: Path
) -> None:
    url = database_url if backend == "postgresql" else f"sqlite:///{tmp_path / 'r.db'}"
    settings = Settings(
        home=tmp_path,
        database_url=url,
        workflows=[str(WORKFLOWS)],
        run_retention_s=0.2,
        scheduler_interval=0.05,
    )
    runtime = Runtime.build(settings, migrate=True)
    runtime.start_workers()
    try:
        orchestrator = runtime.orchestrator
        ledger = {"ledger": str(tmp_path / "ledger")}
        done, kept = (orchestrator.submit("chain10", ledger) for _ in range(2))
        waiting = orchestrator.submit("approval", ledger)
        deadline = time.monotonic() + 30
        while {orchestrator.get_run(r).status for r in (done, kept)} != {RunStatus.SUCCEEDED}:
            assert time.monotonic() < deadline, "the runs did not finish"
            time.sleep(0.05)
        with runtime.store.transaction() as tx:
            now = utcnow()
            tx.connection.execute(
                insert(artifacts).values(
                    run_id=kept,
                    name="report",
                    version=1,
                    sha256="0" * 64,
                    size=1,
                    uri="x",
                    node="n1",
                    iteration=1,
                    attempt=1,
                    phase="run",
                    call_id="c",
                    created_at=now,
                )
            )
            tx.connection.execute(
                insert(effects).values(
                    namespace="default",
                    key="k",
                    name="shop.charge",
                    run_id=done,
                    node="n1",
                    iteration=1,
                    attempt=1,
                    status="applied",
                    created_at=now,
                    updated_at=now,
                )
            )
        time.sleep(0.3)
        assert runtime.scheduler.expire() == 1
        with runtime.store.reading() as tx:
            left = {row.id for row in tx.connection.execute(select(runs.c.id))}
            history = [
                tx.connection.execute(select(t.c.run_id).where(t.c.run_id == done)).first()
                for t in (events, executions)
            ]
            ledger_kept = tx.connection.execute(select(effects.c.key)).scalars().all()
        assert left == {kept, waiting}  # the waiting run has not ended; `kept` has artifacts
        assert history == [None, None]
        assert ledger_kept == ["k"]
        assert runtime.scheduler.expire() == 0  # nothing more, and safe to repeat
    finally:
        runtime.close()


def test_the_scheduler_expires_artifacts_then_their_runs(tmp_path: Path) -> None:
    settings = Settings(
        home=tmp_path,
        workflows=[str(WORKFLOWS)],
        run_retention_s=0.2,
        artifacts_retention_days=0.2 / 86400,
        scheduler_interval=0.05,
    )
    runtime = Runtime.build(settings, migrate=True)
    runtime.start_workers()
    try:
        run_id = runtime.orchestrator.submit("artifacts", {"topic": "cairns"})
        deadline = time.monotonic() + 30
        while runtime.orchestrator.get_run(run_id).status is not RunStatus.SUCCEEDED:
            assert time.monotonic() < deadline, "the run did not finish"
            time.sleep(0.05)
        with runtime.store.reading() as tx:
            shas = (
                tx.connection.execute(
                    select(artifacts.c.sha256).where(artifacts.c.run_id == run_id)
                )
                .scalars()
                .all()
            )
        assert shas
        blobs = open_store(settings.effective_artifacts_url)
        assert all(blobs.exists(sha) for sha in shas)
        time.sleep(0.3)
        assert runtime.scheduler.expire() == 1  # its artifacts first, then the run
        assert not any(blobs.exists(sha) for sha in shas)
        with runtime.store.reading() as tx:
            assert tx.run(run_id) is None
    finally:
        runtime.close()
