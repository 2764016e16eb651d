"""Replay stubs for model calls (and ``record: http`` requests): what answers, in a
replay or a dry-run fork, a call the record cannot — one a changed handler makes that
the run never made, or one asking something else than the recorded call. The call is
still reported as the step's divergence; the stub lets the replay go on past it, and
nothing is sent.

Registered like effects' stubs, under ``model:<provider>`` (``model:openai``,
``model:anthropic``, a generic client's provider) or ``http``::

    from cairn.timetravel import ModelStubRequest, replay_stub

    @replay_stub("model:openai")
    def canned(request: ModelStubRequest) -> dict:
        return {"id": "stub", "object": "chat.completion", "created": 0, "model": request.model,
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": "stubbed"}}]}
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cairn.recording.calls import Unanswered
from cairn.timetravel.ledger import stub_for


@dataclass(frozen=True)
class ModelStubRequest:
    """What a model call's replay stub is asked: the call as the handler made it now,
    why the record cannot answer it, and what the record holds for its index (None if
    nothing). It returns the response as the provider's JSON (or the SDK's object)."""

    provider: str
    operation: str
    model: str | None
    params: dict[str, Any]
    messages: list[Any]
    call_index: int | None  # None: an HTTP request of a node that does not record its HTTP
    reason: str
    recorded: dict[str, Any] | None
    run_id: str
    node: str
    iteration: int
    attempt: int


def stub_name(provider: str) -> str:
    return "http" if provider == "http" else f"model:{provider}"


def model_stand_in(
    run_id: str, node: str, iteration: int, attempt: int
) -> Callable[[Unanswered], dict[str, Any] | None]:
    """What a replayed execution's :class:`~cairn.recording.calls.ModelCalls` asks when
    the record cannot answer: the provider's registered stub, if any."""

    def answer(unanswered: Unanswered) -> dict[str, Any] | None:
        request = unanswered.request
        # Registered beside effects' stubs, a model call's stub takes a request of its own.
        stub: Callable[[ModelStubRequest], Any] | None = stub_for(stub_name(request.provider))  # type: ignore[assignment]
        if stub is None:
            return None
        made = stub(
            ModelStubRequest(
                request.provider,
                request.operation,
                request.model,
                request.params,
                [request.messages[digest] for digest in request.digests],
                unanswered.index,
                unanswered.reason,
                unanswered.recorded,
                run_id,
                node,
                iteration,
                attempt,
            )
        )
        if hasattr(made, "model_dump"):
            made = made.model_dump(mode="json")
        if not isinstance(made, dict):
            raise TypeError(
                f"the replay stub {stub_name(request.provider)} returned "
                f"{type(made).__name__}: a model call's stub returns the response as JSON "
                "(a dict) or the SDK's response object"
            )
        return made

    return answer
