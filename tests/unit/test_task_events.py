"""What a node task tells Flower, and that its message is acknowledged as before: each
outcome of the runner goes through Celery's own request class for the node task, built
as the worker builds it, and the acknowledgement and event it gives are recorded.
(tests/integration/test_flower.py shows the same through a real worker and Flower.)"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest
from billiard.einfo import ExceptionInfo
from celery.events.state import TASK_EVENT_TO_STATE
from celery.utils.imports import symbol_by_name
from celery.worker.request import create_request_cls
from kombu import Message

from cairn.config import Settings
from cairn.model.definition import ErrorClass
from cairn.model.events import NodeFailed, NodeSucceeded
from cairn.model.messages import NodeMessage
from cairn.model.outcomes import NodeOutcome
from cairn.model.statuses import NodeStatus
from cairn.workers.app import NODE_TASK, make_celery
from cairn.workers.failed import Failed, failure_of
from cairn.workers.runner import Handled
from cairn.workers.task_events import NodeFailure, task_result

TASK_NAME = "order.charge"
FAILED = Failed(TASK_NAME, "permanent", "PermanentError: card declined")


@dataclass
class Eventer:
    """The worker's event dispatcher: on, or switched off (Flower turns it on and off)."""

    enabled: bool = True
    sent: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def send(self, event: str, **fields: Any) -> None:
        self.sent.append((event, fields))


def node_request(app: Any, eventer: Eventer, done: list[str]) -> Any:
    """The request the worker's main process builds for a node message (as its strategy
    does), its acks and rejects written to ``done``."""
    task = app.tasks[NODE_TASK]
    pool = SimpleNamespace(apply_async=None)
    request_class = create_request_cls(
        symbol_by_name(task.Request), task, pool, "celery@test", eventer, app=app
    )
    headers, properties, body, _ = app.amqp.as_task_v2(
        "task-1", NODE_TASK, args=[{"run_id": "r"}], shadow=TASK_NAME
    )
    message = Message(
        body=json.dumps(body),
        headers=headers,
        properties=properties,
        content_type="application/json",
        content_encoding="utf-8",
        delivery_info={"exchange": "", "routing_key": "cairn"},
    )
    return request_class(
        message,
        on_ack=lambda *_: done.append("ack"),
        on_reject=lambda *_: done.append("reject"),
        app=app,
        task=task,
        hostname="celery@test",
        eventer=eventer,
    )


def returned(request: Any, outcome: Handled | Failed) -> None:
    """The pool reports the node task's end: the returned value's repr, or the exception."""
    try:
        value = task_result(outcome, TASK_NAME)
    except NodeFailure:
        request.on_success((True, ExceptionInfo(), 0.25))
    else:
        request.on_success((False, repr(value), 0.25))


def handle(outcome: Handled | Failed, eventer: Eventer) -> list[str]:
    """What the worker's main process does with the node task's end: acks and rejects."""
    done: list[str] = []
    returned(node_request(make_celery(Settings(broker_url="memory://")), eventer, done), outcome)
    return done


# The event each outcome sends, and so the state Flower shows (the event's name after
# "task-", in capitals): written out here, not read from the code's table.
EVENTS: dict[Handled | Failed, str] = {
    Handled.COMMITTED: "task-succeeded",  # SUCCESS
    FAILED: "task-failed",  # FAILURE
    Handled.GAVE_UP: "task-failed",
    Handled.DISCARDED: "task-discarded",
    Handled.ALREADY_DONE: "task-already_done",
    Handled.RUN_FINISHED: "task-run_finished",
    Handled.CANCELLED: "task-node_cancelled",
    Handled.LEASE_HELD: "task-lease_held",
    Handled.UNCONFIRMED: "task-unconfirmed",
    Handled.LEASE_LOST: "task-lease_lost",
    Handled.REJECTED: "task-invalid",
    Handled.PARKED: "task-parked",
    Handled.PAUSED: "task-paused",
    Handled.CODE_UNAVAILABLE: "task-code_unavailable",
}


def test_every_outcome_has_its_event() -> None:
    # AWAITING ends no message: its node concludes later (tests/unit/test_deferred_acks.py).
    assert set(EVENTS) == {*Handled, FAILED} - {Handled.AWAITING}


@pytest.mark.parametrize(("outcome", "expected"), EVENTS.items(), ids=str)
def test_every_outcome_is_acked_as_before_and_told_by_its_own_event(
    outcome: Handled | Failed, expected: str
) -> None:
    eventer = Eventer()
    assert handle(outcome, eventer) == ["ack"]  # never a reject, a requeue or a retry
    ((event, fields),) = eventer.sent
    assert event == expected
    if isinstance(outcome, Handled) and outcome not in {Handled.COMMITTED, Handled.GAVE_UP}:
        # A state of its own in Flower, none of Celery's (nor its task-cancelled).
        assert event.removeprefix("task-") not in {*TASK_EVENT_TO_STATE, "cancelled"}
        assert fields["result"] == repr(outcome.value)
        assert fields["runtime"] == 0.25


def test_a_worker_with_events_off_sends_none() -> None:
    eventer = Eventer(enabled=False)
    for outcome in (Handled.PARKED, Handled.COMMITTED, FAILED):
        assert handle(outcome, eventer) == ["ack"]
    assert eventer.sent == []


def test_a_failure_names_the_node_its_error_class_and_error() -> None:
    with pytest.raises(NodeFailure) as failed:
        task_result(FAILED, TASK_NAME)
    assert str(failed.value) == ("order.charge failed (permanent): PermanentError: card declined")
    with pytest.raises(NodeFailure, match=r"order.charge failed \(gave up\)"):
        task_result(Handled.GAVE_UP, TASK_NAME)
    assert task_result(Handled.ALREADY_DONE, TASK_NAME) == "already_done"


def test_the_failure_of_a_fused_chain_is_its_failing_node() -> None:
    first, second = (NodeMessage("r", "order", 1, node, 1, 1) for node in ("plan", "charge"))
    succeeded = NodeOutcome(NodeSucceeded(at=0.0, node="plan"), NodeStatus.SUCCEEDED)
    event = NodeFailed(
        at=0.0, node="charge", error_class=ErrorClass.BUSINESS, message="Refused: no"
    )
    failing = NodeOutcome(event, NodeStatus.FAILED)
    assert failure_of([(first, succeeded)]) is None
    assert failure_of([(first, succeeded), (second, failing)]) == Failed(
        "order.charge", "business", "Refused: no"
    )
