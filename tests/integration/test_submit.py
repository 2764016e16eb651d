"""Enqueueing without HTTP, on real services: a batch in one transaction with per-item
answers, and the Celery tasks `cairn.submit` / `cairn.submit_batch` sent by a plain
Celery client (JSON), as other services would."""

from __future__ import annotations

from celery import Celery

from cairn.engine.batches import SubmitItem
from cairn.model.statuses import RunStatus
from tests.support.cluster import Cluster


def test_a_batch_starts_its_good_items_and_answers_each(cluster: Cluster) -> None:
    cluster.worker()
    cluster.scheduler()
    existing = cluster.submit("chain10", request_id="already")
    ledger = {"ledger": str(cluster.ledger)}
    answers = cluster.client.submit_batch(
        [
            {"workflow": "chain10", "input": ledger, "request_id": "a"},
            {"workflow": "no_such_flow", "input": {}},
            {"workflow": "chain10", "input": ledger, "request_id": "a"},  # same as item 0
            SubmitItem("chain10", ledger, request_id="already"),
            {"workflow": "chain10", "input": ledger},
        ]
    )
    assert [a.index for a in answers] == [0, 1, 2, 3, 4]
    assert answers[1].error_code == "unknown_workflow" and answers[1].run_id is None
    assert answers[0].created and answers[4].created
    assert answers[2].run_id == answers[0].run_id and not answers[2].created
    assert answers[3].run_id == existing and not answers[3].created
    for answer in (answers[0], answers[4]):
        assert answer.run_id is not None
        assert cluster.wait(answer.run_id).status is RunStatus.SUCCEEDED, cluster.log_tails()


def test_other_services_enqueue_through_celery_tasks(cluster: Cluster) -> None:
    """As the principal an admin configured (broker:orders, into default): a message
    naming another namespace is refused, whatever it says."""
    worker = cluster.worker(CAIRN_BROKER_SUBMIT="orders@default")
    cluster.scheduler()
    sender = Celery("another_service", broker=cluster.settings.broker_url, set_as_current=False)
    sender.conf.task_serializer = "json"
    try:
        queue = cluster.settings.queue
        ledger = {"ledger": str(cluster.ledger)}
        sender.send_task(
            "cairn.submit",
            kwargs={"workflow": "chain10", "input": ledger, "request_id": "svc-1"},
            queue=queue,
        )
        sender.send_task(
            "cairn.submit_batch",
            kwargs={
                "runs": [
                    {"workflow": "chain10", "input": ledger, "request_id": f"svc-b{n}"}
                    for n in range(3)
                ]
                + [{"workflow": "chain10", "input": {"ledger": 5}}],  # refused: no effect
            },
            queue=queue,
        )
        sender.send_task(  # refused: its principal submits into default only
            "cairn.submit_batch",
            kwargs={"runs": [{"workflow": "chain10", "request_id": "x"}], "namespace": "team-b"},
            queue=queue,
        )
        sender.send_task("cairn.submit", kwargs={"workflow": 42}, queue=queue)  # nonsense
        for request_id, priority in (("svc-p", 2), ("svc-bad", 9), ("svc-str", "1")):
            sender.send_task(
                "cairn.submit",
                kwargs={"workflow": "chain10", "input": ledger, "request_id": request_id,
                        "priority": priority},
                queue=queue,
            )  # fmt: skip
        for _ in range(2):  # one unfinished run per key: the second gets the first's
            sender.send_task(
                "cairn.submit",
                kwargs={"workflow": "approval", "singleton": {"key": "svc-account-7"}},
                queue=queue,
            )
        sender.send_task(  # refused: a debounce needs a wait
            "cairn.submit", kwargs={"workflow": "approval", "debounce": {"key": "k"}}, queue=queue
        )
    finally:
        sender.close()

    def run_of(namespace: str, request_id: str) -> str | None:
        with cluster.client.runtime.store.reading() as tx:
            row = tx.run_by_request(namespace, request_id)
        return str(row.id) if row is not None else None

    cluster.wait_for(lambda: run_of("default", "svc-1") is not None, 30, "the submitted run")
    cluster.wait_for(lambda: run_of("default", "svc-b2") is not None, 30, "the batch")
    for namespace, request_id in [("default", "svc-1")] + [
        ("default", f"svc-b{n}") for n in range(3)
    ]:
        run_id = run_of(namespace, request_id)
        assert run_id is not None
        assert cluster.wait(run_id).status is RunStatus.SUCCEEDED, cluster.log_tails()
        started = cluster.client.events(run_id)[0]
        assert started["data"]["actor"] == "broker:orders"
    assert worker.poll() is None  # the nonsense message did not hurt the worker
    cluster.wait_for(lambda: run_of("default", "svc-p") is not None, 30, "the prioritized run")
    assert cluster.client.get_run(str(run_of("default", "svc-p"))).priority == 2
    # Refused (a priority is an integer from -5 to 5) and logged; nothing stored.
    log = worker.log_path  # type: ignore[attr-defined]

    def refused() -> bool:
        text = log.read_text(errors="replace")
        return "-5 to 5 (higher first), not 9" in text and "to 5, not '1'" in text

    cluster.wait_for(refused, 30, "both refusals logged")
    assert run_of("default", "svc-bad") is None and run_of("default", "svc-str") is None
    cluster.wait_for(
        lambda: "debounce is {key, wait, max_wait?}" in log.read_text(errors="replace"),
        30,
        "the malformed debounce refused",
    )
    with cluster.client.runtime.store.transaction() as tx:
        assert tx.lock_singleton("default", "svc-account-7") is not None
    with cluster.client.runtime.store.reading() as tx:
        assert len(tx.list_runs(workflow="approval")) == 1  # the singleton's one run
        assert run_of("team-b", "x") is None
        entries = tx.audit_entries("default", limit=1000)
    assert {(e.actor, e.action, e.source) for e in entries if e.outcome == "ok"} >= {
        ("broker:orders", "run.submit", "broker"),
        ("broker:orders", "run.submit_batch", "broker"),
    }
    assert any(e.outcome == "refused" and "not 'team-b'" in str(e.detail) for e in entries), entries
