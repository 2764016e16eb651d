"""What cairn must refuse: bad submissions, and bad messages on the broker.

A refusal writes nothing (no run, event, snapshot, execution, outbox row or timer), and a
bad message does not kill or wedge the worker: the next real run goes through.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from celery import Celery
from kombu import Connection
from sqlalchemy import func, select

from cairn.errors import InvalidInput, UnknownWorkflow
from cairn.model.statuses import RunStatus
from cairn.store.schema import events, executions, outbox, runs, snapshots, timers, workflows
from cairn.workers.app import NODE_TASK, make_celery
from cairn.workers.fairness import PRIORITY_STEPS, list_name
from tests.support.cluster import Cluster

TABLES = {
    "runs": runs,
    "events": events,
    "snapshots": snapshots,
    "node_executions": executions,
    "outbox": outbox,
    "timers": timers,
    "workflows": workflows,
}


def _rows(cluster: Cluster) -> dict[str, Any]:
    """Every table's row count, and the parts of runs and executions a step changes."""
    with cluster.client.runtime.store.reading() as tx:
        found: dict[str, Any] = {
            name: tx.connection.execute(select(func.count()).select_from(table)).scalar_one()
            for name, table in TABLES.items()
        }
        found["run_rows"] = sorted(
            tuple(row)
            for row in tx.connection.execute(select(runs.c.id, runs.c.status, runs.c.last_seq))
        )
        found["execution_rows"] = sorted(
            tuple(row)
            for row in tx.connection.execute(
                select(
                    executions.c.run_id,
                    executions.c.node,
                    executions.c.iteration,
                    executions.c.phase,
                    executions.c.status,
                    executions.c.attempt,
                )
            )
        )
    return found


def _empty(rows: dict[str, Any]) -> bool:
    return all(rows[name] == 0 for name in TABLES if name != "workflows")


# -- submissions --------------------------------------------------------------------------


def test_an_unknown_workflow_is_refused_and_nothing_is_written(cluster: Cluster) -> None:
    before = _rows(cluster)
    assert _empty(before)
    assert before["workflows"] >= 2  # chain10, branchy, ... from tests/integration/workflows
    with pytest.raises(UnknownWorkflow, match="no_such_flow"):
        cluster.client.submit("no_such_flow", {"number": 1})
    with pytest.raises(UnknownWorkflow, match="chain10@99 is not registered"):
        cluster.client.submit("chain10", {}, version=99)
    assert _rows(cluster) == before


@pytest.mark.parametrize(
    ("workflow", "run_input", "field"),
    [
        ("branchy", {"number": "three", "kind": "loop"}, "number"),
        ("branchy", {"number": 3.5, "kind": "loop"}, "number"),
        ("branchy", {"number": True, "kind": "loop"}, "number"),
        ("branchy", {"kind": "loop"}, "'number' is a required property"),
        ("branchy", {"number": 3, "kind": ["loop"]}, "kind"),
        ("chain10", {"slow": {"n1": "fast"}}, "slow/n1"),
        ("chain10", {"ledger": 7}, "ledger"),
    ],
)
def test_input_that_does_not_match_the_schema_is_refused_naming_the_field(
    cluster: Cluster, workflow: str, run_input: dict[str, Any], field: str
) -> None:
    before = _rows(cluster)
    with pytest.raises(InvalidInput) as refused:
        cluster.client.submit(workflow, run_input)
    assert field in str(refused.value)
    assert workflow in str(refused.value)
    assert _rows(cluster) == before


@pytest.mark.parametrize(
    "run_input",
    [
        {"tags": {"a", "b"}},
        {"handle": object()},
        {"raw": b"bytes"},
        {(1, 2): "tuple key"},
        {"number": float("nan")},  # json.dumps writes NaN; JSON has no such thing
        {"number": float("inf")},
        {"text": "nul \x00 inside"},  # JSON allows \u0000; PostgreSQL's jsonb does not
        {"text": "lone surrogate \ud800"},
    ],
    ids=["set", "object", "bytes", "tuple-key", "nan", "infinity", "nul-char", "surrogate"],
)
def test_input_that_is_not_json_is_refused(cluster: Cluster, run_input: dict[Any, Any]) -> None:
    before = _rows(cluster)
    with pytest.raises(InvalidInput):
        cluster.client.submit("chain10", run_input)
    assert _rows(cluster) == before


@pytest.mark.parametrize(
    "run_input",
    [{1, 2}, object(), [1, 2], "a string"],
    ids=["set", "object", "list", "str"],
)
def test_input_that_is_not_an_object_is_refused(cluster: Cluster, run_input: Any) -> None:
    before = _rows(cluster)
    with pytest.raises(InvalidInput):
        cluster.client.submit("chain10", run_input)
    assert _rows(cluster) == before


def test_oversized_input_is_refused(cluster: Cluster) -> None:
    limit = cluster.settings.max_payload_bytes
    frame = len('{"blob": ""}')
    before = _rows(cluster)
    with pytest.raises(InvalidInput, match=f"{limit + 1} bytes; the limit is {limit}"):
        cluster.client.submit("chain10", {"blob": "x" * (limit - frame + 1)})
    assert _rows(cluster) == before
    # Exactly at the limit is fine.
    run_id = cluster.client.submit("chain10", {"blob": "x" * (limit - frame)})
    assert cluster.client.get_run(run_id).state is not None


# -- messages on the broker ---------------------------------------------------------------


class _Mkdir:
    """Unpickling this creates a directory: proof that a worker unpickled it."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (os.mkdir, (str(self.path),))


@pytest.fixture
def sender(cluster: Cluster) -> Iterator[Celery]:
    """A Celery app like cairn's, to put messages on the workers' queue."""
    app = make_celery(cluster.settings)
    yield app
    app.close()


def _worker_pool(worker: Any) -> set[int]:
    path = Path(f"/proc/{worker.pid}/task/{worker.pid}/children")
    return {int(pid) for pid in path.read_text().split()}


def _log(worker: Any) -> str:
    path: Path = worker.log_path
    return path.read_text(errors="replace") if path.exists() else ""


@pytest.fixture
def worker(cluster: Cluster) -> Any:
    """One Celery worker, up and consuming, with its pool started."""
    # Celery's line per task: its result, and the task it was, are in the log.
    process = cluster.worker(concurrency=2, CAIRN_LOG_TASKS="true")
    cluster.wait_for(lambda: " ready." in _log(process), 30, "the worker to be ready")
    cluster.wait_for(lambda: len(_worker_pool(process)) == 2, 10, "the pool")
    return process


def _unacked(cluster: Cluster) -> int:
    """Messages a worker has taken from the queue and not yet acknowledged or rejected."""
    broker = redis.Redis.from_url(cluster.settings.broker_url or "")
    queue = cluster.settings.queue  # a list per priority level (cairn.workers.fairness)
    queued = sum(int(broker.llen(list_name(queue, step))) for step in PRIORITY_STEPS)
    return int(broker.hlen("unacked")) + queued


def _still_fine(cluster: Cluster, worker: Any, pool: set[int], before: dict[str, Any]) -> None:
    """The worker lives on with the same pool, the message is gone, nothing was written,
    and a real run still goes through."""
    cluster.wait_for(lambda: _unacked(cluster) == 0, 10, "the message to be acknowledged")
    assert worker.poll() is None, cluster.log_tails()
    assert _worker_pool(worker) == pool, cluster.log_tails()
    assert _rows(cluster) == before
    assert "WorkerLostError" not in _log(worker)
    run_id = cluster.submit("chain10")
    view = cluster.wait(run_id, timeout_s=30)
    assert view.status is RunStatus.SUCCEEDED, cluster.log_tails()
    assert view.result is not None and view.result["last"] == "n10"
    assert worker.poll() is None


def test_a_pickled_message_is_refused_without_being_unpickled(
    cluster: Cluster, worker: Any, sender: Celery, tmp_path: Path
) -> None:
    pool, before = _worker_pool(worker), _rows(cluster)
    marker = tmp_path / "unpickled"
    # Pickle is allowed on the sending side only; the worker accepts JSON alone.
    sender.conf.accept_content = ["json", "pickle"]
    sender.conf.task_serializer = "pickle"
    sender.send_task(
        NODE_TASK, args=[_Mkdir(marker)], serializer="pickle", queue=cluster.settings.queue
    )
    cluster.wait_for(lambda: "ContentDisallowed" in _log(worker), 15, "the worker to refuse pickle")
    assert "pickle" in _log(worker)
    _still_fine(cluster, worker, pool, before)
    assert not marker.exists()  # never unpickled, in any process


def _publish_raw(cluster: Cluster, sender: Celery, body: bytes) -> None:
    """Real Celery protocol 2 headers and properties for task cairn.node, around ``body``."""
    proper = sender.amqp.as_task_v2(str(uuid.uuid4()), NODE_TASK, args=[{"run_id": "x"}])
    with Connection(cluster.settings.broker_url) as connection:
        connection.Producer().publish(
            body,
            routing_key=cluster.settings.queue,
            exchange="",
            content_type="application/json",
            content_encoding="utf-8",
            headers=proper.headers,
            **proper.properties,
        )


def test_a_message_body_that_is_not_json_is_refused(
    cluster: Cluster, worker: Any, sender: Celery
) -> None:
    pool, before = _worker_pool(worker), _rows(cluster)
    _publish_raw(cluster, sender, b'[[{"run_id": "x", "workflow": "chain10"')
    cluster.wait_for(lambda: "decode message body" in _log(worker), 15, "the worker to refuse it")
    _still_fine(cluster, worker, pool, before)


def _taken(cluster: Cluster, worker: Any, sender: Celery) -> None:
    """Wait until the worker has dealt with everything sent so far, or died: a harmless
    marker message sent last is rejected once the messages before it were taken."""
    marker = f"marker-{uuid.uuid4()}"
    sender.send_task(NODE_TASK, args=[_message(marker)], queue=cluster.settings.queue)
    cluster.wait_for(
        lambda: worker.poll() is not None or marker in _log(worker),
        20,
        "the worker to take the messages",
    )


def test_a_json_body_that_is_not_a_task_call_is_refused(
    cluster: Cluster, worker: Any, sender: Celery
) -> None:
    """Valid JSON, but not Celery's [args, kwargs, embed]: refused, and the worker lives."""
    pool, before = _worker_pool(worker), _rows(cluster)
    for body in (
        b"[1, 2, 3]",
        b"[[], {}, 5]",
        b'[[{"run_id": "x"}], {"extra": 1}, {}]',
        b'{"run_id": "x"}',
        b"null",
        b'"a string"',
        b"[[], {}, {}, 4]",
    ):
        _publish_raw(cluster, sender, body)
        _taken(cluster, worker, sender)
        assert worker.poll() is None, f"the worker died of the body {body!r}\n" + "\n".join(
            _log(worker).splitlines()[-8:]
        )
    _still_fine(cluster, worker, pool, before)


def _message(run: str, /, **fields: Any) -> dict[str, Any]:
    base = {
        "run_id": run,
        "workflow": "chain10",
        "version": 1,
        "node": "n1",
        "iteration": 1,
        "attempt": 1,
        "phase": "run",
    }
    return {**base, **fields}


def _rejections(worker: Any) -> int:
    return _log(worker).count("rejected node message")


def _results(worker: Any) -> int:
    return _log(worker).count("'rejected'")


def test_messages_naming_an_unknown_run_workflow_or_node_are_rejected(
    cluster: Cluster, worker: Any, sender: Celery
) -> None:
    real = cluster.submit("chain10")
    assert cluster.wait(real).status is RunStatus.SUCCEEDED, cluster.log_tails()
    pool, before = _worker_pool(worker), _rows(cluster)
    bad = [
        _message(str(uuid.uuid4())),  # no such run
        _message(real, workflow="no_such_flow"),
        _message(real, version=99),
        _message(real, workflow="branchy"),  # registered, but not this run's
        _message(real, node="n99"),
        _message(real, node="done"),  # an end node: nothing to run
        _message(real, phase="compensate"),  # n1 has no compensation, none was dispatched
    ]
    for body in bad:
        sender.send_task(NODE_TASK, args=[body], queue=cluster.settings.queue)
    cluster.wait_for(lambda: _rejections(worker) == len(bad), 20, "every message to be rejected")
    # The task's own result: Celery logs it after the task returned, so a moment after
    # cairn's line — wait for it, then hold it to exactly one per message.
    cluster.wait_for(lambda: _results(worker) >= len(bad), 10, "every task's result logged")
    assert _results(worker) == len(bad)
    _still_fine(cluster, worker, pool, before)


def test_messages_with_wrong_field_types_are_rejected(
    cluster: Cluster, worker: Any, sender: Celery
) -> None:
    pool, before = _worker_pool(worker), _rows(cluster)
    run_id = str(uuid.uuid4())
    refused_by_cairn: list[Any] = [
        _message(run_id, version="1"),
        _message(run_id, iteration=0),
        _message(run_id, attempt=True),
        _message(run_id, run_id=42),
        _message(run_id, node=None),
        _message(run_id, workflow=""),
        _message(run_id, phase="sideways"),
        _message(run_id, outbox_id="7"),
        _message(run_id, extra="field"),
        "a string",
        [1, 2, 3],
        None,
    ]
    for body in refused_by_cairn:
        sender.send_task(NODE_TASK, args=[body], queue=cluster.settings.queue)
    # The wrong number of arguments never reaches cairn: the task call itself fails.
    sender.send_task(NODE_TASK, args=[], queue=cluster.settings.queue)
    sender.send_task(NODE_TASK, args=[_message(run_id), 2], queue=cluster.settings.queue)
    cluster.wait_for(
        lambda: (
            _rejections(worker) == len(refused_by_cairn)
            and _log(worker).count("raised unexpected: TypeError") == 2
        ),
        20,
        "every message to be rejected",
    )
    _still_fine(cluster, worker, pool, before)


def test_message_strings_postgresql_cannot_hold_are_rejected(
    cluster: Cluster, worker: Any, sender: Celery
) -> None:
    """JSON can carry U+0000 and lone surrogates; PostgreSQL text cannot. Such a message
    names nothing that exists, so it is refused like any other invalid message."""
    pool, before = _worker_pool(worker), _rows(cluster)
    bad = [
        _message("run\x00id"),
        _message(str(uuid.uuid4()), node="n\x001"),
        _message(str(uuid.uuid4()), node="n\ud800"),
    ]
    for body in bad:
        sender.send_task(NODE_TASK, args=[body], queue=cluster.settings.queue)
    _taken(cluster, worker, sender)
    _still_fine(cluster, worker, pool, before)
    assert _rejections(worker) == len(bad) + 1, "\n".join(  # and the marker
        line for line in _log(worker).splitlines() if "cairn.node[" in line
    )
