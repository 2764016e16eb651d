"""The embedded mode on PostgreSQL: one process, no broker, no Redis — worker threads,
the scheduler and the engine in it — on a real database it migrates itself."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text

from cairn.config import Settings
from cairn.errors import SchemaOutOfDate
from cairn.model.statuses import RunStatus
from cairn.runtime import Runtime
from cairn.store.database import make_engine, shipped_revision
from tests.support.cluster import WORKFLOWS
from tests.support.embedded import wait
from tests.support.services import admin, db_url, drop


@pytest.fixture
def blank_database_url() -> Iterator[str]:
    """A database of the test's own with no schema at all."""
    name = f"cairn_blank_{uuid.uuid4().hex[:12]}"
    with admin() as connection:
        connection.execute(f'CREATE DATABASE "{name}"')
    yield db_url(name)
    drop(name)


def test_an_embedded_runtime_migrates_a_blank_postgresql_database_and_runs_on_its_threads(
    blank_database_url: str, tmp_path: Path
) -> None:
    settings = Settings(
        home=tmp_path / "home",
        database_url=blank_database_url,
        workflows=[str(WORKFLOWS)],
        worker_threads=5,
    )
    runtime = Runtime.build(settings)
    try:
        assert runtime.broker is not None and runtime.broker.concurrency == 5
        runtime.start_workers()
        runtime.start_scheduler()
        run_id = runtime.orchestrator.submit("fan_all", {"ledger": str(tmp_path / "ledger")})
        assert wait(runtime, run_id, 30.0) is RunStatus.SUCCEEDED
    finally:
        runtime.close()
    engine = make_engine(blank_database_url)
    try:
        with engine.connect() as connection:
            found = connection.execute(text("SELECT version_num FROM alembic_version")).scalar()
    finally:
        engine.dispose()
    assert found == shipped_revision()
    # Built again on the migrated database: nothing to do, and it starts as before.
    Runtime.build(settings).close()


def test_a_process_of_a_fleet_still_refuses_a_database_it_was_not_told_to_migrate(
    blank_database_url: str, tmp_path: Path
) -> None:
    """With a broker, the schema is `cairn db upgrade`'s, run once before the fleet."""
    settings = Settings(
        home=tmp_path / "home",
        database_url=blank_database_url,
        broker_url="memory://",
        workflows=[str(WORKFLOWS)],
    )
    with pytest.raises(SchemaOutOfDate, match="cairn db upgrade"):
        Runtime.build(settings)
