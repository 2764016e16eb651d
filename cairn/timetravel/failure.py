"""Where to fork a failed run from to try it again: the checkpoint at which the step that
failed it was first dispatched (its first attempt: the fork runs it afresh, its retries
and all), read from the run's history."""

from __future__ import annotations

from cairn.engine.orchestrator import Orchestrator
from cairn.errors import InvalidInput
from cairn.model.statuses import RunStatus
from cairn.timetravel.steps import RUN_PHASE
from cairn.timetravel.timeline import Timeline


class NoFailure(InvalidInput):
    """The run did not fail, or nothing in its history says which step failed it."""

    code = "no_failure"


def failure_seq(orchestrator: Orchestrator, run_id: str) -> int:
    """The seq of the checkpoint to fork failed run ``run_id`` from (see the module)."""
    found = Timeline(orchestrator, run_id).history()
    if found.status != RunStatus.FAILED:
        raise NoFailure(f"run {run_id} is {found.status}, not failed")
    failed = [s for s in found.steps if s.phase == RUN_PHASE and s.status == "failed"]
    if not failed:
        raise NoFailure(f"run {run_id} failed with no failed step: nothing to fork from")
    last = failed[-1]
    attempts = [
        step.dispatched_seq
        for step in found.steps
        if (step.node, step.iteration, step.phase) == (last.node, last.iteration, last.phase)
        and step.dispatched_seq is not None
    ]
    if not attempts:
        raise NoFailure(f"run {run_id}: when {last.label} was dispatched is not in its log")
    return min(attempts)
