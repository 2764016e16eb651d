"""What a principal without the ``payloads`` permission sees of a run: its shape — which
nodes ran, when, how they ended, who decided what — and none of its content: inputs,
state, outputs, signal payloads, model messages, tool sessions, error messages (they
quote what they failed on), a fork's patch, an anomaly's scene.

Dropped by key, at every depth, so that a field added to an event later is hidden
wherever it sits under one of these names; everything else is shown.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

PAYLOAD_KEYS = frozenset(
    {
        "input",
        "output",
        "payload",
        "state",
        "vars",
        "result",
        "patch",
        "rewind",
        "messages",
        "sessions",
        "message",
        "error",
        "scene",
        "context",
        "text",
        "delta",
        "answer",
        "old",  # a diff's values
        "new",
        "record",  # an external system's record of an effect
    }
)
HIDDEN = "(hidden: reading payloads needs the payloads permission)"


def without_payloads(value: Any) -> Any:
    """``value`` with every payload key's value left out (see the module)."""
    if isinstance(value, Mapping):
        return {
            key: without_payloads(item) for key, item in value.items() if key not in PAYLOAD_KEYS
        }
    if isinstance(value, list | tuple):
        return [without_payloads(item) for item in value]
    return value


def event_for(event: Mapping[str, Any], payloads: bool) -> dict[str, Any]:
    """An event as the API shows it to a principal that may (or may not) read payloads."""
    if payloads:
        return dict(event)
    shown = dict(event)
    shown["data"] = without_payloads(event.get("data") or {})
    if event.get("outcome") is not None:
        shown["outcome"] = without_payloads(event["outcome"])
    return shown


# A failed run's reason: "<node>: <class> error: <the handler's message>".
_FAILURE = re.compile(r"([A-Za-z0-9_.-]+: (?:transient|permanent|business) error)(?:: .*)?", re.S)


def reason_for(reason: str | None, payloads: bool) -> str | None:
    """A run's reason; without payloads, a failure's without the handler's message."""
    if reason is None or payloads:
        return reason
    found = _FAILURE.fullmatch(reason)
    return found.group(1) if found is not None else reason
