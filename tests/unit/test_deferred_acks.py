"""Acks deferred until an awaited node is committed: a node task that handed its async
node over returns at once, but its message stays unacked — held by the worker's main
process, with its prefetch window one wider — until its pool process says the node
concluded; then it is acked (or, after cairn's own outage, given back) and its outcome's
event sent. Through Celery's own request class, as the worker builds it. (Real worker
processes, killed: tests/acceptance/test_awaiting_nodes.py.)"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from cairn.config import Settings
from cairn.errors import StoreUnavailable
from cairn.workers.app import make_celery
from cairn.workers.deferred import DeferredAcks
from cairn.workers.runner import Handled
from tests.unit.test_task_events import FAILED, Eventer, node_request, returned

# No process has this id (it is past the kernel's largest).
GONE_PID = 1 << 30


@dataclass
class QoS:
    """The consumer's prefetch window, as the held messages move it."""

    value: int = 2

    def increment_eventually(self) -> None:
        self.value += 1

    def decrement_eventually(self) -> None:
        self.value -= 1


@dataclass
class Worker:
    """A worker's main process: its app, held acks, prefetch window, events and acks."""

    app: Any
    acks: DeferredAcks
    qos: QoS
    eventer: Eventer
    done: list[str]

    def handed_over(self) -> Any:
        """A node message whose task handed its node over, as the pool reports it."""
        request = node_request(self.app, self.eventer, self.done)
        returned(request, Handled.AWAITING)
        return request


@pytest.fixture
def worker() -> Iterator[Worker]:
    app = make_celery(Settings(broker_url="memory://"))
    acks = app.cairn_deferred = DeferredAcks()
    qos = QoS()
    acks.consumer = type("Consumer", (), {"qos": qos})()
    yield Worker(app, acks, qos, Eventer(), [])
    acks.close()


def test_a_handed_over_node_keeps_its_message_unacked_until_it_is_committed(
    worker: Worker,
) -> None:
    request = worker.handed_over()
    assert worker.done == [] and worker.eventer.sent == []  # not acked, nothing told yet
    assert (worker.qos.value, worker.acks.count) == (3, 1)  # the consumer takes one more
    worker.acks.readable()  # nothing said yet: still held
    assert worker.done == [] and worker.acks.count == 1

    worker.acks.concluded(request.id, Handled.COMMITTED)  # as its pool process says it
    worker.acks.readable()
    assert worker.done == ["ack"]
    ((event, fields),) = worker.eventer.sent
    assert (event, fields["result"]) == ("task-succeeded", repr("committed"))
    assert (worker.qos.value, worker.acks.count) == (2, 0)


def test_a_node_that_failed_is_acked_and_told_failed(worker: Worker) -> None:
    request = worker.handed_over()
    worker.acks.concluded(request.id, FAILED)
    worker.acks.readable()
    assert worker.done == ["ack"]
    ((event, fields),) = worker.eventer.sent
    assert event == "task-failed" and "card declined" in fields["exception"]


def test_cairns_own_outage_gives_the_message_back(worker: Worker) -> None:
    request = worker.handed_over()
    worker.acks.concluded(request.id, StoreUnavailable("the database restarts"))
    worker.acks.readable()
    assert worker.done == ["reject"]  # requeued: the node is found again, its lease lapsed
    assert worker.qos.value == 2


def test_an_ack_said_before_the_tasks_return_arrived_is_kept_for_it(worker: Worker) -> None:
    worker.acks.concluded("task-1", Handled.LEASE_LOST)
    worker.acks.readable()
    assert worker.done == []
    worker.handed_over()
    assert worker.done == ["ack"] and worker.acks.count == 0
    assert worker.eventer.sent[0][0] == "task-lease_lost"
    assert worker.qos.value == 2


def test_the_messages_of_a_pool_process_that_died_go_back_to_the_queue(worker: Worker) -> None:
    request = worker.handed_over()
    request.worker_pid = GONE_PID
    worker.acks.sweep()
    assert worker.done == ["reject"] and worker.acks.count == 0
    assert worker.qos.value == 2


def test_a_line_torn_between_two_reads_is_read_whole(worker: Worker) -> None:
    request = worker.handed_over()
    line = b'{"id": "%s", "handled": "committed"}\n' % request.id.encode()
    os.write(worker.acks._write, line[:9])
    worker.acks.readable()
    assert worker.done == []
    os.write(worker.acks._write, line[9:])
    worker.acks.readable()
    assert worker.done == ["ack"]


def test_a_node_concluded_after_a_reconnect_leaves_the_new_window_as_it_is(
    worker: Worker,
) -> None:
    """Celery rebuilds its consumer's prefetch window after a reconnect: a node held
    before it (its message is the broker's again) must not narrow the new one."""
    request = worker.handed_over()
    rebuilt = QoS()
    worker.acks.consumer.qos = rebuilt
    worker.acks.concluded(request.id, Handled.COMMITTED)
    worker.acks.readable()
    assert rebuilt.value == 2 and worker.qos.value == 3
