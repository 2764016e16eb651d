"""Definitions deployed with the code: a Celery worker started from ``CAIRN_WORKFLOWS``
registers its definitions and the schedules they declare into its namespace; a schedule
an operator paused stays paused when the worker starts again, and a new version of the
file changes what it changed of the schedule, nothing else."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cairn.errors import ScheduleNotFound, UnknownWorkflow
from cairn.model.workflow_names import qualified
from tests.support.cluster import Cluster

NAMESPACE = "reports"


def report(version: int, cron: str) -> dict[str, Any]:
    return {
        "name": "nightly_report",
        "version": version,
        "start": "compile",
        "nodes": {
            "compile": {"handler": "tests.integration.handlers:step", "next": "done"},
            "done": {"end": "succeeded"},
        },
        "schedules": [{"name": "nightly", "cron": cron, "timezone": "UTC"}],
    }


def test_a_worker_registers_its_definitions_and_schedules_and_keeps_a_pause(
    cluster: Cluster, tmp_path: Path
) -> None:
    flows = tmp_path / "flows"
    flows.mkdir()
    (flows / "report.json").write_text(json.dumps(report(1, "0 3 * * *")))
    env = {"CAIRN_WORKFLOWS": str(flows), "CAIRN_WORKFLOWS_NAMESPACE": NAMESPACE}
    schedules = cluster.client.schedules
    registry = cluster.client.runtime.orchestrator.registry

    def declared(cron: str) -> bool:
        try:
            return schedules.get(NAMESPACE, "nightly").cron == cron
        except ScheduleNotFound:
            return False

    worker = cluster.worker(**env)
    cluster.wait_for(lambda: declared("0 3 * * *"), 60, "the worker to declare the schedule")
    assert registry.get(qualified(NAMESPACE, "nightly_report"), 1).version == 1
    try:
        registry.get("nightly_report")  # the default namespace has none
        raise AssertionError("registered outside the worker's namespace")
    except UnknownWorkflow:
        pass
    schedules.pause(NAMESPACE, "nightly")
    schedules.change(NAMESPACE, "nightly", {"jitter_s": 45.0})  # an operator's change
    cluster.kill(worker)

    # The next build changes the cron; the worker started from it changes that alone.
    (flows / "report.json").write_text(json.dumps(report(2, "30 4 * * *")))
    cluster.worker(**env)
    cluster.wait_for(lambda: declared("30 4 * * *"), 60, "the new build's schedule")
    nightly = schedules.get(NAMESPACE, "nightly")
    assert nightly.paused and nightly.jitter_s == 45
    assert registry.get(qualified(NAMESPACE, "nightly_report")).version == 2
