"""Circuit breaking in definitions: a dependency and its defaults, and the faults. (On the
embedded runtime: tests/embedded/test_circuits.py; an outage's probes, one a period of
real time: tests/integration/test_circuits.py; on real services:
tests/acceptance/test_circuits.py.)"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from cairn.definitions.loader import load_definition
from cairn.errors import WorkflowDefinitionError
from cairn.model.definition import Dependency, TaskNode
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
