"""A node's step context made by hand, for tests that drive what a handler calls (its
model calls, checkpoints, artifacts) without a worker: an execution's first attempt of
workflow ``w`` version 1."""

from __future__ import annotations

from typing import Any

from cairn.engine.model_calls import ModelCallBook
from cairn.model.keys import ExecutionKey
from cairn.model.state import RunState
from cairn.recording.calls import ModelCalls
from cairn.store.sql import Store
from cairn.workers.context import StepContext

WORKFLOW = "w"


def step_context(key: ExecutionKey, state: RunState | None = None, **parts: Any) -> StepContext:
    """The context of ``key``'s first attempt on ``state`` (a new run's, else), with
    ``parts`` (``model_calls``, ``checkpoints``, ``artifacts``, ``allowance``, ...)."""
    return StepContext(
        run_id=key.run_id,
        workflow=WORKFLOW,
        node=key.node,
        iteration=key.iteration,
        attempt=1,
        phase=key.phase,
        state=state if state is not None else RunState(key.run_id, WORKFLOW, 1),
        **parts,
    )


def model_calls(store: Store, key: ExecutionKey, **options: Any) -> ModelCalls:
    """``key``'s model calls at attempt 1, fence 1, recorded in ``store``: calls up to a
    megabyte, no waiting out an outage; ``options`` as :class:`ModelCalls` takes them."""
    return ModelCalls(
        ModelCallBook(store), key, 1, 1, max_bytes=1_000_000, reconnect_within=0.0, **options
    )
