"""Comparing a replayed result with the recorded one: by what (:func:`comparable`,
:func:`error_type`), the verdict's facts (:func:`compare`), and whether the decider
would move the run differently (:func:`decider_check`)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from cairn.decider.graph import decide
from cairn.errors import CairnError
from cairn.model.definition import WorkflowDefinition
from cairn.model.events import Event, NodeFailed, NodeSucceeded, event_to_dict
from cairn.model.state import RunState
from cairn.timetravel.diff import Change, diff_values


def comparable(event: Mapping[str, Any]) -> dict[str, Any]:
    """What a succeeded result is compared by: its output, and the messages, sessions and
    artifact contents (digests) it added to the agent context. Plain JSON data."""
    artifacts = {
        name: {"sha256": ref.get("sha256"), "size": ref.get("size")}
        for name, ref in (event.get("artifacts") or {}).items()
    }
    data = {
        "output": event.get("output") or {},
        "messages": list(event.get("messages") or []),
        "sessions": event.get("sessions") or {},
        "artifacts": artifacts,
    }
    copied: dict[str, Any] = json.loads(json.dumps(data))
    return copied


def error_type(message: str) -> str:
    """``ValueError`` of ``ValueError: boom``: what a failure is compared by, besides its
    class (messages may hold times, ids, addresses)."""
    head, sep, _rest = message.partition(":")
    return head.strip() if sep and head.strip().isidentifier() else ""


def compare(recorded: Mapping[str, Any], replayed: Event) -> tuple[bool, list[Change], str]:
    """(same, changes, a note in words) for a recorded result event's data and the
    replayed result event."""
    recorded_status = str(recorded["type"]).removeprefix("node_")
    replayed_status = replayed.type.removeprefix("node_")
    if recorded_status != replayed_status:
        return False, [], f"recorded {_outcome(recorded)}; replayed {_outcome_of(replayed)}"
    if isinstance(replayed, NodeSucceeded):
        changes = diff_values(comparable(recorded), comparable(event_to_dict(replayed)))
        return not changes, changes, ""
    if isinstance(replayed, NodeFailed):
        same_class = recorded.get("error_class") == replayed.error_class.value
        same_type = error_type(str(recorded.get("message", ""))) == error_type(replayed.message)
        if same_class and same_type:
            return True, [], ""
        return False, [], f"recorded {_outcome(recorded)}; replayed {_outcome_of(replayed)}"
    return True, [], ""


def _outcome(recorded: Mapping[str, Any]) -> str:
    if recorded["type"] == "node_failed":
        return f"failed ({recorded.get('error_class')}: {recorded.get('message')})"
    return str(recorded["type"]).removeprefix("node_")


def _outcome_of(event: Event) -> str:
    if isinstance(event, NodeFailed):
        return f"failed ({event.error_class.value}: {event.message})"
    return event.type.removeprefix("node_")


def decider_check(
    definition: WorkflowDefinition, before: RunState, recorded: Event, replayed: Event
) -> str | None:
    """None if the decider, fed the replayed result in the recorded state, moves the run
    as it did with the recorded one; otherwise what differs, in words."""

    def moves(event: Event) -> tuple[str, list[str]]:
        decision = decide(definition, before, event)
        if decision.ignored:
            return f"ignored ({decision.ignored})", []
        path = [f"{t.source} -{t.label}-> {t.target}" for t in decision.transitions]
        return decision.state.status.value, path

    expected = moves(recorded)
    try:
        got = moves(replayed)
    except CairnError as refused:
        return f"the decider would refuse the replayed result: {refused}"
    if got == expected:
        return None
    return (
        f"the decider would move the run differently: recorded {expected[0]} via "
        f"{', '.join(expected[1]) or 'no transition'}; replayed {got[0]} via "
        f"{', '.join(got[1]) or 'no transition'}"
    )
