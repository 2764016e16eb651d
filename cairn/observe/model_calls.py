"""A run's model calls as a person or a program reads them: every call its executions
recorded, with what was sent, the whole conversation when that was compacted, and the
answer — each message once, by digest, however many calls sent it."""

from __future__ import annotations

from typing import Any

from cairn.store.records import ModelCallRecord
from cairn.store.sql import Store


def model_calls_view(store: Store, run_id: str, node: str | None = None) -> dict[str, Any]:
    """``{"calls": [...], "messages": {digest: message}}``: each call names its
    messages (and ``history``, if it was compacted) by digest; ``messages`` holds each
    message once, so the whole record of a long conversation stays linear in size."""
    with store.reading() as tx:
        calls = tx.model_calls_of_run(run_id, node)
        digests = {d for call in calls for d in (*call.messages, *(call.history or ()))}
        bodies = tx.model_messages(sorted(digests))
    return {"calls": [call_dict(call) for call in calls], "messages": bodies}


def call_dict(call: ModelCallRecord) -> dict[str, Any]:
    return {
        "node": call.node,
        "iteration": call.iteration,
        "phase": call.phase,
        "call": call.call_index,
        "attempt": call.attempt,
        "provider": call.provider,
        "operation": call.operation,
        "model": call.model,
        "params": call.params,
        "messages": call.messages,
        "history": call.history,
        "response": call.response,
        "text": answer_text(call.response),
        "usage": call.usage,
        "latency_s": call.latency_s,
        "recorded_at": call.recorded_at.isoformat(),
    }


def answer_text(response: dict[str, Any]) -> str:
    """The text of a recorded answer, whichever API gave it (empty if it had none)."""
    texts: list[str] = []
    for choice in response.get("choices") or []:  # OpenAI chat
        texts.append(str((choice.get("message") or {}).get("content") or ""))
    for item in response.get("output") or []:  # OpenAI Responses
        texts += [str(part.get("text", "")) for part in item.get("content") or []]
    if isinstance(response.get("content"), list):  # Anthropic
        texts += [str(block.get("text", "")) for block in response["content"]]
    return "".join(texts)
