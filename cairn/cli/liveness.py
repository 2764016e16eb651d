"""What the commands say about running nodes: their heartbeats, read from the leases,
in words (working, stalled, suspect), and ages as people read them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cairn.engine.reads import RunView
    from cairn.lease.port import Leases


def heartbeats(leases: Leases, view: RunView) -> dict[str, dict[str, Any] | None]:
    """The heartbeat record of every execution the run is waiting for (lossy, in Redis)."""
    from cairn.lease.heartbeat import run_beats

    state = view.state
    if state is None:
        return {}
    return run_beats(leases, view.id, state.running)


def liveness(beat: dict[str, Any] | None, interval_s: float) -> str:
    if beat is None:
        return "waiting for a worker (no heartbeat)"
    age_s = float(beat["age_s"])
    where = f"on {beat.get('worker', '?')}"
    progress = ""
    if beat.get("done") is not None:
        total = f"/{_figure(beat['total'])}" if beat.get("total") not in (None, "None") else ""
        message = f" {beat['message']}" if beat.get("message") else ""
        progress = f", {_figure(beat['done'])}{total}{message}"
    if age_s > 3 * interval_s:  # three missed beats
        return f"suspect: no heartbeat for {age(age_s)} (last {where}){progress}"
    if beat.get("stalled"):
        # Redis's record says progress_age_s; the API's (cairn.lease.heartbeat.beat_view)
        # no_progress_s.
        idle = age(float(beat.get("progress_age_s", beat.get("no_progress_s")) or 0.0))
        return f"stalled {where}: beating, but no progress for {idle}{progress}"
    return f"working {where}, last beat {age(age_s)} ago{progress}"


def _figure(value: object) -> str:
    """A count as the handler reported it: Redis's text as it is, the API's number
    without a needless ``.0``."""
    return f"{value:g}" if isinstance(value, float) else str(value)


def age(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
