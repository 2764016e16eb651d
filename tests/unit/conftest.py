from __future__ import annotations

from pathlib import Path

import pytest

from cairn.orchestrator.definition import WorkflowDefinition
from cairn.orchestrator.loader import load_file

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture(scope="session")
def flight() -> WorkflowDefinition:
    return load_file(EXAMPLES / "book_flight.yaml")
