"""Which committed step's successor a worker continues with itself (cairn.workers.step.
continuation): the first plain task on the same queue and priority declaring no limit,
within the chain's bounds — the rest, and anything else, is published as before."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest

from cairn import Workflow
from cairn.model.definition import WorkflowDefinition
from cairn.model.events import Phase
from cairn.model.messages import NodeMessage
from cairn.workers.step.continuation import (
    CONTINUE_WITHIN_S,
    MAX_CONTINUED,
    Continuation,
    next_to_run,
)

NOOP = "tests.unit.handlers:noop"


def _runner(*, namespace_concurrency: int = 0, paused: bool = False) -> Any:
    return SimpleNamespace(
        settings=SimpleNamespace(namespace_concurrency=namespace_concurrency),
        pauses=SimpleNamespace(holds=lambda _m: paused),
    )


def _chain(**b: Any) -> WorkflowDefinition:
    wf = Workflow("w", version=1)
    wf.task("a", NOOP, next="b").task("b", NOOP, next="done", **b).end("done")
    return wf.build(resolve=False)


def _message(node: str, **fields: Any) -> NodeMessage:
    return replace(NodeMessage("r1", "w", 1, node, 1, 1, outbox_id=7), **fields)


def _next(definition: WorkflowDefinition, *messages: NodeMessage, **runner: Any) -> Any:
    return next_to_run(_runner(**runner), Continuation(), _message("a"), definition, messages)


def test_the_only_successor_a_plain_task_is_continued_with() -> None:
    following = _message("b")
    assert _next(_chain(), following) is following


@pytest.mark.parametrize(
    "declared",
    [
        {"queue": "gpu"},
        {"irreversible": True},
        {"concurrency": {"key": "k", "limit": 2}},
        {"rate": {"key": "openai", "requests": "5/s"}},
    ],
)
def test_a_node_declaring_a_queue_or_a_limit_is_published(declared: dict[str, Any]) -> None:
    definition = _chain(**declared)
    following = _message("b", queue=definition.queue_of("b"))
    assert _next(definition, following) is None


def test_of_a_forks_messages_the_first_plain_one_is_continued_with() -> None:
    definition = _chain()
    first, second = _message("b"), _message("b", iteration=2)
    assert _next(definition, first, second) is first
    assert _next(definition, _message("b", resumed=True), second) is second
    assert _next(definition, _message("b", priority=3), _message("b", outbox_id=None)) is None


def test_a_resumed_or_rowless_one_or_another_band_is_published() -> None:
    definition = _chain()
    assert _next(definition, _message("b", resumed=True)) is None
    assert _next(definition, _message("b", outbox_id=None)) is None
    assert _next(definition, _message("b", priority=3)) is None
    assert _next(definition, _message("b", phase=Phase.COMPENSATE)) is None
    assert _next(definition, _message("b"), namespace_concurrency=4) is None
    assert _next(definition, _message("b"), paused=True) is None


def test_the_chain_is_bounded_in_steps_and_in_time() -> None:
    definition, following = _chain(), _message("b")
    full = Continuation(steps=["x#1 committed"] * MAX_CONTINUED)
    assert next_to_run(_runner(), full, _message("a"), definition, [following]) is None
    late = Continuation(started=Continuation().started - CONTINUE_WITHIN_S)
    assert next_to_run(_runner(), late, _message("a"), definition, [following]) is None
