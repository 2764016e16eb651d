"""A replay stub for the OpenAI calls of ``model_handlers``: a changed prompt's first call
is answered with the final answer, so a replay goes on past the divergence."""

from __future__ import annotations

from typing import Any

from cairn.timetravel import ModelStubRequest, replay_stub


@replay_stub("model:openai")
def answer_at_once(request: ModelStubRequest) -> dict[str, Any]:
    return {
        "id": f"stub-{request.call_index}",
        "object": "chat.completion",
        "created": 0,
        "model": request.model,
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {"role": "assistant", "content": "A cairn is a pile of stones."},
            }
        ],
    }
