"""Circuit breaking on the embedded runtime (SQLite, worker threads, memory circuits) and
in definitions: failures open a dependency's circuit. (An outage's probes, one a period of
real time: tests/integration/test_circuits.py; on real services:
tests/acceptance/test_circuits.py.)"""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from cairn.config import Settings
from cairn.definitions.loader import load_definition
from cairn.errors import WorkflowDefinitionError
from cairn.model.definition import Dependency, TaskNode
from cairn.model.statuses import RunStatus
from cairn.runtime import Runtime
from tests.support import payments


def _spec(dependency: object) -> dict[str, Any]:
    return {
        "name": "guarded",
        "version": 1,
        "start": "charge",
        "nodes": {
            "charge": {
                "handler": payments.HANDLER,
                "dependency": dependency,
                "retry": {
                    "attempts": 30,
                    "backoff": "50ms",
                    "max_delay": "100ms",
                    "jitter": "none",
                },
                "next": "done",
            },
            "done": {"end": "succeeded"},
        },
    }


def test_dependencies_are_read_with_their_defaults() -> None:
    one = load_definition(_spec("payments")).nodes["charge"]
    assert isinstance(one, TaskNode)
    assert one.dependencies == (Dependency("payments"),)
    several = load_definition(
        _spec(["search", {"name": "payments", "failures": 2, "window": "10s", "open_for": "5s"}])
    ).nodes["charge"]
    assert isinstance(several, TaskNode)
    assert several.dependencies == (
        Dependency("search"),
        Dependency(
            "payments", failures=2, window=timedelta(seconds=10), open_for=timedelta(seconds=5)
        ),
    )


@pytest.mark.parametrize(
    ("dependency", "says"),
    [
        ("pay ments", "is a name"),
        ({"failures": 2}, "is a name"),
        ({"name": "payments", "failures": 0}, "positive integer"),
        ({"name": "payments", "window": "soon"}, "dependency.window"),
        ({"name": "payments", "open_for": "0s"}, "must be positive"),
        ({"name": "payments", "open_fro": "5s"}, "did you mean 'open_for'"),
        (["payments", {"name": "payments"}], "twice"),
        (42, "is a name"),
    ],
)
def test_a_malformed_dependency_is_a_fault(dependency: object, says: str) -> None:
    with pytest.raises(WorkflowDefinitionError, match=says):
        load_definition(_spec(dependency))


def test_a_dependency_needs_a_handler() -> None:
    spec = _spec("payments")
    del spec["nodes"]["charge"]["handler"]
    spec["nodes"]["charge"]["child"] = {"workflow": "other"}
    with pytest.raises(WorkflowDefinitionError, match="needs a handler"):
        load_definition(spec)


RATED = f"""
name: rated
version: 1
start: call
nodes:
  call: {{handler: "{payments.HANDLER}", next: done, retry: none,
          rate: {{key: provider, requests: 100/s}}}}
  done: {{end: succeeded}}
"""


def test_a_rate_limits_key_is_guarded_like_a_declared_dependency(tmp_path: Path) -> None:
    """Its provider failing every run (five in a row, the default) opens the key's
    circuit, though the task declares no dependency."""
    (tmp_path / "rated.yaml").write_text(RATED)
    settings = Settings(home=tmp_path / "home", workflows=[str(tmp_path / "rated.yaml")])
    payments.down.set()
    runtime = Runtime.build(settings, concurrency=1)
    runtime.start_workers()
    try:
        runs = [runtime.orchestrator.submit("rated", {}) for _ in range(5)]
        deadline = time.monotonic() + 20
        for run_id in runs:
            while not (view := runtime.orchestrator.get_run(run_id)).status.terminal:
                assert time.monotonic() < deadline, f"{run_id} never ended"
                time.sleep(0.02)
            assert view.status is RunStatus.FAILED
        assert runtime.circuits is not None
        (circuit,) = runtime.circuits.reports()
        assert (circuit.dependency, circuit.state) == ("rate:default/provider", "open")
    finally:
        payments.down.clear()
        runtime.close()
