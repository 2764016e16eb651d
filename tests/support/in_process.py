"""Fixtures of the suites that run cairn in the test's own process (tests/unit and
tests/embedded), offered by each suite's conftest: the shared workflow files parsed once
a session, SQLite databases copied from one migrated template, a store of the test's
own, and the wall clock moved by hand."""

from __future__ import annotations

import shutil
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, inspect

from cairn import clock
from cairn.definitions import catalog
from cairn.model.definition import WorkflowDefinition
from cairn.store import database
from cairn.store.backends import store_for
from cairn.store.database import make_engine, upgrade
from cairn.store.sql import Store
from cairn.testing.clock import FakeClock

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
# The workflows most embedded runtimes of these tests register: 65 files, read again by
# each runtime (a third of a second of YAML parsing each time).
SHARED_WORKFLOWS = Path(__file__).resolve().parents[1] / "integration" / "workflows"


@pytest.fixture(scope="session", autouse=True)
def _shared_workflows_parsed_once() -> Iterator[None]:
    """The shared workflow files are parsed once a session: a definition is immutable and
    a pure function of its file, so a runtime registering one gets the same definition
    it would read (keyed by the file's size and modification time). Files anywhere else —
    each test's own, written to be refused or changed — are read every time."""
    read = catalog.load_file
    parsed: dict[tuple[Path, int, int, bool], WorkflowDefinition] = {}

    def load_file(path: str | Path, *, resolve: bool = True) -> WorkflowDefinition:
        where = Path(path).resolve()
        if not where.is_relative_to(SHARED_WORKFLOWS):
            return read(path, resolve=resolve)
        stat = where.stat()
        key = (where, stat.st_mtime_ns, stat.st_size, resolve)
        if key not in parsed:
            parsed[key] = read(path, resolve=resolve)
        return parsed[key]

    catalog.load_file = load_file
    yield
    catalog.load_file = read


@pytest.fixture(scope="session")
def migrated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite database migrated once for the session, to copy (a tenth of a second of
    Alembic saved for every test that asks for a store)."""
    path = tmp_path_factory.mktemp("template") / "cairn.db"
    engine = make_engine(f"sqlite:///{path}")
    upgrade(engine)
    engine.dispose()
    return path


@pytest.fixture(autouse=True)
def _empty_sqlite_migrates_from_the_template(
    monkeypatch: pytest.MonkeyPatch, migrated: Path
) -> None:
    """Migrating an empty SQLite database to head (what every embedded runtime, client
    and command does on a new home) copies the session's template, which Alembic made,
    instead of running Alembic again. A database with tables, or a migration to another
    revision, is Alembic's as ever; the migrations themselves are tested in
    tests/migration."""
    alembic = database.upgrade

    def upgrade(engine: Engine, revision: str = "head") -> None:
        fresh = engine.dialect.name == "sqlite" and not inspect(engine).get_table_names()
        if revision != "head" or not fresh:
            alembic(engine, revision)
            return
        copy = engine.raw_connection()
        try:
            with sqlite3.connect(migrated) as template:
                template.backup(copy.driver_connection)
        finally:
            copy.close()

    monkeypatch.setattr(database, "upgrade", upgrade)


@pytest.fixture
def store(tmp_path: Path, migrated: Path) -> Iterator[Store]:
    """A migrated SQLite store of the test's own: a copy of the session's template."""
    path = tmp_path / "cairn.db"
    shutil.copyfile(migrated, path)
    engine = make_engine(f"sqlite:///{path}")
    yield store_for(engine)
    engine.dispose()


@pytest.fixture
def wall_clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    """This process's wall clock (:func:`cairn.clock.wall`, which every timestamp of the
    SQLite store and its ``now()`` read), standing still until the test moves it: a wait
    for time to pass is ``wall_clock.advance(seconds)``, not a sleep."""
    fake = FakeClock(start=time.time())
    monkeypatch.setattr(clock, "wall", fake)
    return fake
