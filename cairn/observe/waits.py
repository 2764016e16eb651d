"""One waiting execution in words, for ``cairn waiting`` and ``cairn status``: kept apart
from :mod:`cairn.observe.explain` so that showing what waits — over HTTP, from the API's
JSON — loads nothing of the engine."""

from __future__ import annotations

from cairn.model.awaiting import Awaiting

COMPENSATE = "compensate"  # Phase.COMPENSATE: an execution of a compensation


def describe(entry: Awaiting, now: float) -> str:
    name = f"{entry.node}#{entry.iteration}"
    if entry.held:
        what = " (compensation)" if entry.phase == COMPENSATE else ""
        return (
            f"{name}{what}: held for an operator: {entry.reason}\n"
            f"  decide with: cairn signal {entry.run_id} recovery.retry | recovery.complete "
            "--payload '{\"output\": {...}}' | recovery.fail"
        )
    timeout = (
        "" if entry.times_out_at is None else f"; times out in {in_words(entry.times_out_at - now)}"
    )
    return (
        f"{name}: waiting for a signal ({', '.join(entry.signals)}) for "
        f"{in_words(now - entry.since)}{timeout}"
    )


def in_words(seconds: float) -> str:
    """A duration as a person reads it: seconds, minutes or hours."""
    seconds = max(seconds, 0.0)
    if seconds < 90:
        return f"{seconds:.1f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
