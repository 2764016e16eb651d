"""Routing nodes to queues on the embedded engine, its nodes run by the runner (each under
its heartbeat thread): the engine dispatches each node to its queue, and recovery, which
asks the backlog of the node's own queue, sends it to the same. The queue keys, the
messages and the declared queues: tests/unit/test_queues.py."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import update

from cairn import Workflow
from cairn.config import Settings
from cairn.model.events import Phase
from cairn.runtime import Runtime
from cairn.store.schema import executions
from tests.unit.test_queues import Captured

NOOP = "tests.unit.handlers:noop"


@pytest.fixture
def runtime(tmp_path: Path) -> Any:
    built = Runtime.build(Settings(home=tmp_path / "home", queues=["gpu"]))
    built.orchestrator.publisher = Captured()
    yield built
    built.close()


def render_workflow() -> Workflow:
    wf = Workflow("render", version=1)
    wf.task("prepare", NOOP, next="render")
    wf.task("render", NOOP, queue="gpu", next="publish", compensate="tests.unit.handlers:undo")
    wf.task("publish", "tests.unit.handlers:refuse", next="done")
    return wf.end("done")


def test_the_engine_dispatches_each_node_to_its_queue_and_recovery_to_the_same(
    runtime: Runtime,
) -> None:
    broker = runtime.orchestrator.publisher
    assert isinstance(broker, Captured)
    runtime.orchestrator.registry.register(render_workflow().build())
    run_id = runtime.orchestrator.submit("render", {})
    prepare = broker.take("prepare")
    assert prepare.queue is None
    runtime.runner.run(prepare.to_dict())
    render = broker.take("render")
    assert render.queue == "gpu"
    # Lost: dispatched long ago, never claimed, its queue empty. Sent again, to gpu.
    with runtime.store.transaction() as tx:
        tx.connection.execute(
            update(executions)
            .where(executions.c.run_id == run_id, executions.c.node == "render")
            .values(dispatched_at=datetime.now(UTC) - timedelta(seconds=120))
        )
    broker.queued = {"gpu": 1}  # still waiting for the GPU worker: not lost
    assert runtime.scheduler.recover() == 0
    assert broker.asked == ["gpu"]
    broker.queued = {None: 5}  # the default queue's backlog says nothing about gpu
    assert runtime.scheduler.recover() == 1
    again = broker.take("render")
    assert (again.queue, again.resumed) == ("gpu", True)
    # Its compensation goes where its code is installed too.
    runtime.runner.run(again.to_dict())
    runtime.runner.run(broker.take("publish").to_dict())
    undo = broker.take("render")
    assert (undo.phase, undo.queue) == (Phase.COMPENSATE, "gpu")
