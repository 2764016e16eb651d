"""What the fleet is doing now, as ``cairn status --fleet`` and ``/v1/fleet/activity``
both read it: the running executions from their heartbeat records (Redis), grouped by
the worker that holds them — alive, or suspect after three missed beats — the stalled
ones (beating, no progress; or silent), and each queue's backlog at the broker.

One reading for the command line and the HTTP API, so that a worker called suspect by
one is suspect to the other."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from cairn.lease.heartbeat import beat_view
from cairn.lease.port import Leases
from cairn.model.builds import build_queue
from cairn.model.keys import parse_lease_key

# A worker's report that it cannot import a workflow version's handlers
# (cairn.workers.code_faults) is shown this long after it was last made: a worker gone
# since says nothing about the code deployed now.
CODE_FAULTS_WITHIN_S = 600.0

# A worker (or an execution) whose freshest beat is older than this many intervals is
# suspect: three missed beats, as the lease TTL is at least three intervals.
MISSED_BEATS = 3


@dataclass(frozen=True)
class Execution:
    """One running execution, from its heartbeat record."""

    run_id: str
    node: str
    iteration: int
    phase: str  # "run", or "compensate" for an undo
    beat: dict[str, Any]  # beat_view's: worker, progress, age_s, no_progress_s, stalled

    @property
    def age_s(self) -> float:
        return float(self.beat.get("age_s") or 0.0)

    def suspect(self, interval_s: float) -> bool:
        return self.age_s > MISSED_BEATS * interval_s

    def to_dict(self, interval_s: float) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "node": self.node,
            "iteration": self.iteration,
            "phase": self.phase,
            "state": self.state(interval_s),
            **self.beat,
        }

    def state(self, interval_s: float) -> str:
        """``suspect`` (no beat for three intervals), ``stalled`` (beating, no
        progress), or ``working``."""
        if self.suspect(interval_s):
            return "suspect"
        return "stalled" if self.beat.get("stalled") else "working"


@dataclass(frozen=True)
class WorkerView:
    worker: str
    last_beat_s: float  # the freshest beat of any execution it holds
    running: int
    state: str  # alive | suspect

    def to_dict(self) -> dict[str, Any]:
        return {
            "worker": self.worker,
            "state": self.state,
            "last_beat_s": self.last_beat_s,
            "running": self.running,
        }


def executions(records: Iterable[dict[str, Any]]) -> list[Execution]:
    """``Leases.running()``'s records as executions, oldest beat first."""
    found = []
    for record in records:
        run_id, node, iteration, phase = parse_lease_key(str(record["lease"]))
        found.append(Execution(run_id, node, iteration, phase, beat_view(record)))
    return sorted(found, key=lambda e: (-e.age_s, e.run_id, e.node, e.iteration))


def workers(running: Iterable[Execution], interval_s: float) -> list[WorkerView]:
    """The workers holding executions, each alive or suspect by its freshest beat.
    (A worker holding nothing sends no beat: it is not seen here.)"""
    by_worker: dict[str, list[Execution]] = {}
    for execution in running:
        by_worker.setdefault(str(execution.beat.get("worker") or "?"), []).append(execution)
    views = []
    for worker, held in sorted(by_worker.items()):
        freshest = min(e.age_s for e in held)
        state = "suspect" if freshest > MISSED_BEATS * interval_s else "alive"
        views.append(WorkerView(worker, freshest, len(held), state))
    return views


# The builds whose queues are looked at: those announced this recently.
BUILD_QUEUES_WITHIN_S = 7 * 86_400


def stalled(running: Iterable[Execution], interval_s: float) -> list[Execution]:
    """The executions not working: beating without progress, or no longer beating."""
    return [e for e in running if e.state(interval_s) != "working"]


def backlogs(
    queues: Iterable[str], depth: Callable[[str], int | None], builds: Iterable[str] = ()
) -> dict[str, int | None]:
    """Each queue's depth at the broker (None: the broker cannot say), and that of each
    of its builds' queues holding messages — ``<queue>@<build>``, where the nodes of runs
    routed by build wait (docs/versions.md)."""
    found: dict[str, int | None] = {}
    builds = list(builds)
    for queue in queues:
        found[queue] = depth(queue)
        for build in builds:
            routed = build_queue(queue, build)
            if count := depth(routed):
                found[routed] = count
    return found


def read_running(leases: Leases) -> list[Execution]:
    return executions(leases.running())
