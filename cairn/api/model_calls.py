"""``GET /v1/runs/{id}/model-calls``: what a run's model calls sent and were answered,
for audit — each message once, by digest."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query

from cairn.api.access import allowed
from cairn.api.deps import Runtime_
from cairn.api.scope import ERRORS, RunId, head_in
from cairn.http.models import ModelCallList
from cairn.model.principals import Permission, Principal
from cairn.observe.model_calls import model_calls_view

router = APIRouter(prefix="/v1")
# Model messages are payloads: reading them needs the permission, and is audited.
PayloadReader = Annotated[
    Principal, Depends(allowed(Permission.READ, Permission.PAYLOADS, action="run.model_calls"))
]


@router.get("/runs/{run_id}/model-calls", response_model=ModelCallList, responses=ERRORS)
def run_model_calls(
    run_id: RunId,
    runtime: Runtime_,
    who: PayloadReader,
    node: Annotated[str | None, Query(min_length=1, max_length=200)] = None,
) -> ModelCallList:
    """Every model call the run's executions recorded (of ``node`` only, if given), in
    the order they were made: provider, model, parameters, the digests of the messages
    sent and — when a context budget compacted them — of the whole conversation the
    handler passed (``history``), the response and its text, usage, latency. Each
    message's content is in ``messages``, once."""
    head_in(runtime, run_id, who.namespace)
    return ModelCallList(**model_calls_view(runtime.store, run_id, node))
