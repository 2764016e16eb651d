"""What the fleet is doing, read once for ``cairn status --fleet`` and ``/v1/fleet/activity``
(:mod:`cairn.observe.activity`): executions from heartbeat records, grouped by worker —
alive, or suspect after three missed beats — and the stalled ones apart."""

from __future__ import annotations

from typing import Any

import pytest

from cairn.cli.fleet import print_workers
from cairn.model.keys import lease_key
from cairn.observe import activity
from cairn.observe.activity import executions, stalled, workers

INTERVAL_S = 0.5


def record(run_id: str, node: str, worker: str, age_s: float, **more: Any) -> dict[str, Any]:
    """A record as ``Leases.running()`` answers it (Redis's strings included)."""
    return {
        "lease": lease_key(run_id, node, 1, "run"),
        "worker": worker,
        "age_s": age_s,
        "progress_age_s": more.pop("progress_age_s", age_s),
        **more,
    }


RECORDS = [
    record("run-a", "read", "box-1:10", 0.2, done="3", total="10", message="page 3"),
    record("run-b", "write", "box-1:10", 0.4, stalled="1", progress_age_s=40.0),
    record("run-c", "ship", "box-2:20", 9.0),  # three intervals and more: no beat
]


def test_workers_are_alive_by_their_freshest_beat_and_suspect_without_one() -> None:
    found = {w.worker: w for w in workers(executions(RECORDS), INTERVAL_S)}
    assert (found["box-1:10"].state, found["box-1:10"].running) == ("alive", 2)
    assert found["box-1:10"].last_beat_s == pytest.approx(0.2)
    assert found["box-2:20"].state == "suspect"


def test_stalled_are_those_beating_without_progress_or_silent() -> None:
    held = executions(RECORDS)
    assert [e.run_id for e in held] == ["run-c", "run-b", "run-a"]  # oldest beat first
    states = {e.run_id: e.state(INTERVAL_S) for e in stalled(held, INTERVAL_S)}
    assert states == {"run-b": "stalled", "run-c": "suspect"}
    (reading,) = [e for e in held if e.run_id == "run-a"]
    shown = reading.to_dict(INTERVAL_S)
    assert (shown["node"], shown["done"], shown["total"], shown["state"]) == (
        "read",
        3.0,
        10.0,
        "working",
    )


def test_the_command_line_says_the_same(capsys: pytest.CaptureFixture[str]) -> None:
    print_workers(RECORDS, INTERVAL_S)
    printed = capsys.readouterr().out
    assert "box-1:10: alive, 2 running" in printed
    assert "box-2:20: suspect, 1 running" in printed
    assert "run-b write#1 (run): stalled on box-1:10" in printed
    assert "run-a read#1 (run): working on box-1:10" in printed and "3/10 page 3" in printed


def test_a_queues_backlog_shows_its_builds_queues_that_hold_messages() -> None:
    """Nodes of runs routed by build wait in ``<queue>@<build>``: shown beside their
    queue when they hold any, left out when empty."""
    depths = {"cairn": 2, "cairn@v1": 3, "gpu": None, "gpu@v2": 1}
    found = activity.backlogs(["cairn", "gpu"], depths.get, ["v1", "v2"])
    assert found == {"cairn": 2, "cairn@v1": 3, "gpu": None, "gpu@v2": 1}
    assert activity.backlogs(["cairn"], depths.get) == {"cairn": 2}
