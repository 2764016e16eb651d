"""Token counts in a model response's usage, whichever provider reported them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def usage_counts(usage: Mapping[str, Any]) -> tuple[int, int, int]:
    """(input tokens, output tokens, of the input those read from the provider's cache)
    in a response's usage. OpenAI counts cached tokens inside its input; Anthropic
    counts cache reads and writes apart from ``input_tokens``: added to it here."""

    def count(value: Any) -> int:
        return int(value or 0)

    if "prompt_tokens" in usage or "completion_tokens" in usage:  # OpenAI chat
        details = usage.get("prompt_tokens_details") or {}
        return (
            count(usage.get("prompt_tokens")),
            count(usage.get("completion_tokens")),
            count(details.get("cached_tokens")),
        )
    if "input_tokens_details" in usage:  # the Responses API
        details = usage.get("input_tokens_details") or {}
        return (
            count(usage.get("input_tokens")),
            count(usage.get("output_tokens")),
            count(details.get("cached_tokens")),
        )
    read = count(usage.get("cache_read_input_tokens"))
    written = count(usage.get("cache_creation_input_tokens"))
    return (
        count(usage.get("input_tokens")) + read + written,
        count(usage.get("output_tokens")),
        read,
    )
