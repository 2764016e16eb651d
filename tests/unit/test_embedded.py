"""The embedded default: SQLite, in-process broker and leases, one process — what it
refuses before anything runs. Running it: tests/embedded/test_embedded.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from cairn.errors import InvalidInput, UnknownWorkflow, WorkflowDefinitionError
from cairn.runtime import Runtime
from tests.support.embedded import settings


def test_submit_refuses_unknown_workflows_and_bad_input_and_writes_nothing(tmp_path: Path) -> None:
    runtime = Runtime.build(settings(tmp_path))
    try:
        with pytest.raises(UnknownWorkflow):
            runtime.orchestrator.submit("nope", {})
        with pytest.raises(InvalidInput, match="number"):
            runtime.orchestrator.submit("branchy", {"number": "three", "kind": "plain"})
        with pytest.raises(InvalidInput, match="not JSON"):
            runtime.orchestrator.submit("chain10", {"when": object()})
        with runtime.store.reading() as tx:
            assert tx.list_runs() == []
    finally:
        runtime.close()


def test_request_ids_make_submit_idempotent(tmp_path: Path) -> None:
    runtime = Runtime.build(settings(tmp_path))
    try:
        first = runtime.orchestrator.submit("chain10", {}, request_id="r-1")
        assert runtime.orchestrator.submit("chain10", {}, request_id="r-1") == first
        registry = runtime.orchestrator.registry
        registry.register(registry.get("chain10"), "other")  # definitions are namespaced too
        assert (
            runtime.orchestrator.submit("chain10", {}, request_id="r-1", namespace="other") != first
        )
    finally:
        runtime.close()


def test_start_up_refuses_misspelt_definitions_naming_every_fault(tmp_path: Path) -> None:
    """``CAIRN_WORKFLOWS`` naming two broken files: one error names each file's unknown
    key with its suggestion, and nothing is registered."""
    step = "tests.integration.handlers:step"
    for name, typo in (("a", "retyr: {attempts: 2}"), ("b", "timout: 5m")):
        (tmp_path / f"{name}.yaml").write_text(
            f"name: {name}\nversion: 1\nstart: s\nnodes:\n"
            f"  s: {{handler: '{step}', next: done, {typo}}}\n  done: {{end: succeeded}}\n"
        )
    with pytest.raises(WorkflowDefinitionError) as caught:
        Runtime.build(settings(tmp_path / "home", workflows=[str(tmp_path)]))
    assert [(fault.code, fault.node) for fault in caught.value.faults] == [
        ("unknown_key", "s"),
        ("unknown_key", "s"),
    ]
    text = str(caught.value)
    assert "a.yaml: unknown key 'retyr' (did you mean 'retry'?)" in text
    assert "b.yaml: unknown key 'timout' (did you mean 'timeout'?)" in text
