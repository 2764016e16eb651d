from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from cairn.definitions.loader import load_file
from cairn.model.definition import WorkflowDefinition
from cairn.store.backends import store_for
from cairn.store.database import make_engine, upgrade
from cairn.store.sql import Store

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture(scope="session")
def flight() -> WorkflowDefinition:
    return load_file(EXAMPLES / "book_flight.yaml")


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    """A migrated SQLite store of the test's own."""
    engine = make_engine(f"sqlite:///{tmp_path / 'cairn.db'}")
    upgrade(engine)
    yield store_for(engine)
    engine.dispose()
