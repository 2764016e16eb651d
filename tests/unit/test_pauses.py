"""Pauses on the embedded store: a paused workflow's starts — plain, batched, singleton and
debounced — are held and started on resume as their submitters, in order; the relay
leaves a paused queue's messages in the outbox; and what a pause refuses."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from cairn.engine.batches import SubmitItem
from cairn.errors import InvalidInput, NotPaused, UnknownWorkflow
from cairn.model.pauses import PauseKind
from cairn.model.starts import Debounce, Singleton, SingletonMode
from cairn.model.statuses import RunStatus
from cairn.runtime import Runtime
from cairn.store.messages import HeldQueues
from tests.support.embedded import settings

WORKFLOW, QUEUE = PauseKind.WORKFLOW, PauseKind.QUEUE


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[Runtime]:
    built = Runtime.build(settings(tmp_path))
    built.orchestrator.pause_book.ttl = 0.0  # one process: no view to wait for
    yield built
    built.close()


def test_a_paused_workflows_starts_are_held_and_started_in_order_as_their_submitters(
    runtime: Runtime,
) -> None:
    orchestrator = runtime.orchestrator
    pauses = orchestrator.pauses
    assert pauses.pause("default", WORKFLOW, "approval", reason="audit", actor="key:ops")
    assert not pauses.pause("default", WORKFLOW, "approval", reason="again", actor="key:x")
    plain = orchestrator.submit("approval", {"n": 1}, actor="key:alice")
    batched = orchestrator.submit_batch([SubmitItem("approval", {"n": 2})], actor="key:bob")
    single = orchestrator.submit(
        "approval", {"n": 3}, singleton=Singleton("s", SingletonMode.SKIP), actor="key:carol"
    )
    debounced = orchestrator.submit("approval", {"n": 4}, debounce=Debounce("d", wait_s=1))
    with runtime.store.reading() as tx:
        due = tx.due_debounces(tx.now() + 5, 10)
    assert orchestrator.start_debounced(due, due[0].due_at) == 0  # held, not started
    orchestrator.registry.register(orchestrator.registry.get("approval"), "beta")
    other = orchestrator.submit("approval", {"n": 5}, namespace="beta")  # not paused there
    held = [plain, batched[0].run_id, single, debounced]
    for run_id in held:
        run = orchestrator.get_run(run_id)
        assert run.status is RunStatus.PENDING and run.last_seq == 0
    assert orchestrator.get_run(other).status is not RunStatus.PENDING
    (listed,) = pauses.list("default")
    assert (listed.name, listed.held, listed.paused_by, listed.reason) == (
        "approval",
        4,
        "key:ops",
        "audit",
    )

    assert pauses.resume("default", WORKFLOW, "approval", actor="key:ops") == 4
    actors = [orchestrator.events(run_id)[0]["data"]["actor"] for run_id in held]
    assert actors == ["key:alice", "key:bob", "key:carol", "system:debounce"]
    assert all(orchestrator.get_run(r).status is not RunStatus.PENDING for r in held)
    assert pauses.list() == []
    with pytest.raises(NotPaused):
        pauses.resume("default", WORKFLOW, "approval", actor="key:ops")


def test_a_held_run_cancelled_is_not_started(runtime: Runtime) -> None:
    orchestrator = runtime.orchestrator
    orchestrator.pauses.pause("default", WORKFLOW, "approval", reason="r", actor="key:ops")
    run_id = orchestrator.submit("approval", {})
    orchestrator.cancel(run_id, "not wanted", actor="key:ops")
    assert orchestrator.pauses.resume("default", WORKFLOW, "approval", actor="key:ops") == 0
    assert orchestrator.get_run(run_id).status is RunStatus.CANCELLED


def test_the_relay_leaves_a_paused_queues_messages_in_the_outbox(runtime: Runtime) -> None:
    with runtime.store.transaction() as tx:
        gpu = tx.return_to_outbox("r1", {"run_id": "r1", "queue": "gpu"})
        beta_gpu = tx.return_to_outbox("r2", {"run_id": "r2", "queue": "gpu", "namespace": "b"})
        default = tx.return_to_outbox("r3", {"run_id": "r3"})
        now = tx.now()
    held = HeldQueues(frozenset({("default", "gpu"), ("default", "cairn")}), "cairn")
    with runtime.store.transaction() as tx:
        assert [row.id for row in tx.claim_unsent(now + 1, 10, held)] == [beta_gpu]
        assert tx.has_unsent(now + 1, held)
        assert {row.id for row in tx.claim_unsent(now + 1, 10)} == {gpu, beta_gpu, default}


def test_a_pause_needs_a_reason_a_known_workflow_and_a_queue_name(runtime: Runtime) -> None:
    pauses = runtime.orchestrator.pauses
    with pytest.raises(InvalidInput, match="reason"):
        pauses.pause("default", WORKFLOW, "approval", reason=" ", actor="key:ops")
    with pytest.raises(UnknownWorkflow):
        pauses.pause("default", WORKFLOW, "no_such_workflow", reason="r", actor="key:ops")
    with pytest.raises(InvalidInput, match="queue name"):
        pauses.pause("default", QUEUE, "bad queue!", reason="r", actor="key:ops")
    assert pauses.list() == []
