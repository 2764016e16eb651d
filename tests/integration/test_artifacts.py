"""Artifacts on real PostgreSQL: versioning (under concurrent puts), provenance, content
addressing, idempotent puts on re-execution, orphan cleanup (racing puts), retention, S3
mode against moto's S3 server, and a workflow whose handlers put artifacts on a Celery
worker."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto.server import ThreadedMotoServer
from sqlalchemy import insert

from cairn.artifacts import ArtifactNotFound, ArtifactRegistry, Artifacts
from cairn.artifacts.cleanup import clean, collect_orphans, expire
from cairn.artifacts.stores import (
    FilesystemStore,
    MemoryStore,
    ObjectStore,
    blob_key,
    digest,
    open_store,
)
from cairn.model.statuses import RunStatus
from cairn.store.artifacts import Provenance, runs
from cairn.store.backends import store_for
from cairn.store.database import make_engine
from cairn.store.sql import Store
from tests.support.cluster import Cluster
from tests.support.services import ROOT

HOUR = timedelta(hours=1)


@pytest.fixture
def store(database_url: str) -> Iterator[Store]:
    store = store_for(make_engine(database_url))
    yield store
    store.dispose()


@pytest.fixture
def objects(tmp_path: Path) -> FilesystemStore:
    return FilesystemStore(tmp_path / "blobs")


Factory = Callable[..., Artifacts]


def factory(store: Store, objects: ObjectStore, run_id: str | None = None) -> Factory:
    """``make(node=, iteration=, attempt=)``: Artifacts for an execution of one run."""
    run = run_id or str(uuid.uuid4())

    def make(node: str = "write", iteration: int = 1, attempt: int = 1) -> Artifacts:
        return Artifacts(
            ArtifactRegistry(store),
            objects,
            run_id=run,
            node=node,
            iteration=iteration,
            attempt=attempt,
        )

    return make


def in_threads(count: int, work: Callable[[int], Any]) -> list[Any]:
    """Run ``work(i)`` on ``count`` threads that start together; their results."""
    barrier = threading.Barrier(count)
    results: list[Any] = [None] * count
    errors: list[BaseException] = []

    def run(index: int) -> None:
        try:
            barrier.wait(timeout=10)
            results[index] = work(index)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not errors, errors
    return results


# -- versioning, provenance, content addressing ----------------------------------------------


def test_versions_provenance_and_reading_back(store: Store, objects: FilesystemStore) -> None:
    make = factory(store, objects)
    writer = make(node="draft", iteration=2, attempt=1)
    first = writer.put("report", "v1", model="gpt-x", params={"temperature": 0.1}, seed=7)
    second = writer.put("report", b"v2", tool="pdf", call_id="tool-call-9")
    assert (first["version"], second["version"]) == (1, 2)
    reader = make(node="publish")
    assert reader.get("report") == b"v2" and reader.get("report", version=1) == b"v1"
    info = reader.info("report", version=1)
    assert (info.run_id, info.node, info.iteration, info.attempt, info.phase) == (
        writer.run_id,
        "draft",
        2,
        1,
        "run",
    )
    assert (info.model, info.tool, info.params, info.meta) == (
        "gpt-x",
        None,
        {"temperature": 0.1},
        {"seed": 7},
    )
    assert info.call_id == "draft#2.1/run:1" and reader.info("report").call_id == "tool-call-9"
    assert info.size == 2 and info.sha256 == digest(b"v1")
    assert info.uri == objects.uri(info.sha256) and info.uri.startswith("file://")
    assert abs(info.created_at - time.time()) < 60
    assert [i.version for i in reader.versions("report")] == [1, 2]
    # Another run's artifacts are readable by run id, and separate from this run's.
    other = factory(store, objects)()
    assert other.put("report", "elsewhere")["version"] == 1
    assert other.get("report", run_id=writer.run_id) == b"v2"
    with pytest.raises(ArtifactNotFound):
        reader.get("report", version=3)


def test_concurrent_puts_of_one_name_take_distinct_versions(
    store: Store, objects: FilesystemStore
) -> None:
    make = factory(store, objects)
    refs = in_threads(8, lambda i: make(node=f"branch{i}").put("result", f"branch {i}"))
    assert sorted(ref["version"] for ref in refs) == list(range(1, 9))
    assert {i.node: i.version for i in make().versions("result")} == {
        f"branch{i}": ref["version"] for i, ref in enumerate(refs)
    }


def test_same_content_is_one_blob_across_names_and_runs(
    store: Store, objects: FilesystemStore
) -> None:
    data = b"x" * 100_000
    refs = [factory(store, objects)().put(name, data) for name in ("a", "b", "c")]
    assert len({ref["sha256"] for ref in refs}) == 1
    assert [(b.sha256, b.size) for b in objects.blobs()] == [(digest(data), 100_000)]


# -- re-execution ---------------------------------------------------------------------------


def test_a_node_that_runs_again_gets_its_registration_back(
    store: Store, objects: FilesystemStore
) -> None:
    make = factory(store, objects)
    first = make(attempt=1).put("draft", "text", model="m")
    assert make(attempt=2).put("draft", "text", model="m") == first  # a retry
    assert make(attempt=3).put("draft", "text") == first  # a recovery, meta aside
    assert make(attempt=3).info("draft").attempt == 1
    assert make(iteration=2).put("draft", "text")["version"] == 2  # a new visit: new version
    assert len(make().versions("draft")) == 2


def test_a_stale_worker_and_its_successor_putting_at_once_register_once(
    store: Store, objects: FilesystemStore
) -> None:
    make = factory(store, objects)
    refs = in_threads(2, lambda i: make(attempt=i + 1).put("draft", "same words"))
    assert refs[0] == refs[1]
    assert len(make().versions("draft")) == 1


# -- cleanup ----------------------------------------------------------------------------------


def test_orphans_go_after_the_grace_period_registered_blobs_stay(
    store: Store, objects: FilesystemStore
) -> None:
    artifacts = factory(store, objects)()
    kept = artifacts.put("kept", b"registered")
    orphan = objects.put(b"written; the worker died before registering it")
    registry = ArtifactRegistry(store)
    now = time.time()
    young = collect_orphans(registry, objects, HOUR, clock=lambda: now)
    assert young.orphans_deleted == 0 and objects.exists(orphan)
    later = collect_orphans(registry, objects, HOUR, clock=lambda: now + 3601)
    assert later.orphans_deleted == 1
    assert not objects.exists(orphan) and objects.exists(kept["sha256"])
    assert artifacts.get("kept") == b"registered"


def test_a_put_racing_a_cleanup_never_registers_a_missing_blob(store: Store) -> None:
    """Cleanup with no grace at all deletes every blob it finds unregistered, while puts
    write and register: whatever interleaving happens, each registered artifact reads."""
    objects = MemoryStore(f"race-{uuid.uuid4()}")
    registry = ArtifactRegistry(store)
    make = factory(store, objects)
    for round_ in range(15):
        data = f"round {round_}".encode()

        def work(index: int, data: bytes = data) -> Any:
            if index == 0:
                return make().put("racy", data)
            return collect_orphans(registry, objects, timedelta(0), clock=lambda: time.time() + 1)

        in_threads(2, work)
        assert make().get("racy") == data
    # A blob removed behind the registry's back is put back by the next put under the lock.
    sha = objects.put(b"gone")
    objects.delete(sha)
    provenance = Provenance(
        run_id=str(uuid.uuid4()), node="n", iteration=1, attempt=1, phase="run", call_id="c"
    )
    registry.register(
        name="n",
        sha256=sha,
        size=4,
        uri=objects.uri(sha),
        provenance=provenance,
        ensure_blob=lambda: objects.ensure(sha, b"gone"),
    )
    assert objects.read(sha) == b"gone"


def _run(store: Store, status: RunStatus, finished_days_ago: float | None) -> str:
    run_id = str(uuid.uuid4())
    now = datetime.now(UTC)
    finished = now - timedelta(days=finished_days_ago) if finished_days_ago is not None else None
    with store.transaction() as tx:
        tx.connection.execute(
            insert(runs).values(
                id=run_id,
                workflow="w",
                version=1,
                status=status.value,
                input={},
                current=[],
                created_at=now - timedelta(days=60),
                updated_at=finished or now,
                finished_at=finished,
            )
        )
    return run_id


def test_retention_deletes_old_runs_artifacts_but_not_blobs_live_ones_share(
    store: Store, objects: FilesystemStore
) -> None:
    old = factory(store, objects, _run(store, RunStatus.SUCCEEDED, finished_days_ago=10))
    recent = factory(store, objects, _run(store, RunStatus.FAILED, finished_days_ago=1))
    running = factory(store, objects, _run(store, RunStatus.RUNNING, finished_days_ago=None))
    only_old = old().put("draft", b"only the old run has this")
    old().put("draft", b"v2 of the old run's draft")
    shared = old().put("shared", b"the running run has this too")
    running().put("mine", b"the running run has this too")
    recent().put("kept", b"recent")
    registry = ArtifactRegistry(store)

    report = expire(registry, objects, timedelta(days=7), batch=2)  # batches of two rows
    assert (report.expired_rows, report.expired_blobs) == (3, 2)
    assert old().versions() == []
    assert not objects.exists(only_old["sha256"])
    assert objects.exists(shared["sha256"])  # content shared with a live artifact
    assert running().get("mine") == b"the running run has this too"
    assert recent().get("kept") == b"recent"
    # Nothing more to do: a second pass (or a second process) changes nothing.
    again = clean(registry, objects, grace=HOUR, retention=timedelta(days=7))
    assert again.expired_rows == again.expired_blobs == again.orphans_deleted == 0
    # Everything finished more than 12 hours ago goes with a shorter retention.
    assert expire(registry, objects, timedelta(hours=12)).expired_rows == 1
    assert [b.sha256 for b in objects.blobs()] == [shared["sha256"]]


# -- S3 mode against moto's S3 server -------------------------------------------------------


@pytest.fixture
def s3_url(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[str]:
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_CONFIG_FILE": str(tmp_path / "no-aws-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "no-aws-credentials"),
    }.items():
        monkeypatch.setenv(name, value)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(
        Bucket="cairn-artifacts"
    )
    try:
        yield f"s3://cairn-artifacts/runs/blobs?endpoint_url={endpoint}&region=us-east-1"
    finally:
        server.stop()


def test_s3_mode_stores_content_once_reads_it_back_and_cleans_up(store: Store, s3_url: str) -> None:
    objects = open_store(s3_url)
    listed = objects.client.list_objects_v2  # type: ignore[attr-defined]
    make = factory(store, objects)
    writer = make(node="fetch")
    ref = writer.put("page", b"<html>one</html>", tool="browser")
    again = writer.put("copy", b"<html>one</html>")
    assert (
        ref["uri"]
        == again["uri"]
        == (
            f"s3://cairn-artifacts/runs/blobs/sha256/{ref['sha256'][:2]}/"
            f"{ref['sha256'][2:4]}/{ref['sha256']}"
        )
    )
    keys = [entry["Key"] for entry in listed(Bucket="cairn-artifacts")["Contents"]]
    assert keys == [ref["uri"].removeprefix("s3://cairn-artifacts/")]  # one object
    assert make(node="read").get("page") == b"<html>one</html>"
    assert make(node="fetch", attempt=2).put("page", b"<html>one</html>") == ref
    assert writer.put("page", b"<html>two</html>")["version"] == 2
    assert {b.sha256 for b in objects.blobs()} == {ref["sha256"], digest(b"<html>two</html>")}

    orphan = objects.put(b"uploaded, never registered")
    registry = ArtifactRegistry(store)
    assert collect_orphans(registry, objects, HOUR).orphans_deleted == 0  # too young
    later = time.time() + 3601
    assert collect_orphans(registry, objects, HOUR, clock=lambda: later).orphans_deleted == 1
    assert not objects.exists(orphan) and objects.exists(ref["sha256"])
    objects.delete(ref["sha256"])  # lost behind cairn's back
    with pytest.raises(ArtifactNotFound):
        make().get("page", version=1)


# -- a workflow on a Celery worker -----------------------------------------------------------


def test_a_workflow_puts_artifacts_and_its_state_keeps_references(cluster: Cluster) -> None:
    cluster.worker()
    cluster.scheduler()
    run_id = cluster.submit("artifacts", {"topic": "cairns", "repeat": 500, "fail_first": True})
    view = cluster.wait(run_id, timeout_s=30)
    assert view.status is RunStatus.SUCCEEDED, cluster.log_tails()
    assert view.state is not None
    draft_runs = [key for key in cluster.executions().elements() if key[1] == "draft"]
    assert len(draft_runs) == 2  # failed once after its put, then retried

    registry = ArtifactRegistry(cluster.client.runtime.store)
    versions = {info.name: info for info in registry.versions(run_id)}
    assert sorted(versions) == ["draft", "draft-copy", "summary"]
    draft = versions["draft"]
    assert (draft.version, draft.node, draft.attempt, draft.model) == (
        1,
        "draft",
        1,
        "test-model-1",
    )
    assert draft.params == {"temperature": 0.0, "max_tokens": 256}
    assert draft.meta == {"prompt_tokens": 12}
    assert draft.size == len("A draft about cairns.\n") * 500
    assert (versions["summary"].node, versions["summary"].tool) == ("review", "upper")
    assert versions["draft-copy"].call_id == "copy-1"
    assert versions["draft-copy"].sha256 == draft.sha256
    # The state holds each name's latest reference, not the content.
    assert view.state.artifacts == {name: info.ref() for name, info in versions.items()}
    assert view.state.vars["draft_chars"] == draft.size
    # The references rode on the step's result event.
    events = cluster.client.runtime.orchestrator.events(run_id)
    results = [e["data"] for e in events if e["type"] == "node_succeeded"]
    assert results[0]["node"] == "draft" and results[0]["artifacts"] == {"draft": draft.ref()}

    objects = open_store(cluster.settings.effective_artifacts_url)
    assert isinstance(objects, FilesystemStore)
    assert len(list(objects.blobs())) == 2  # draft (and its copy), summary

    def cli(*args: str) -> bytes:
        done = subprocess.run(
            [sys.executable, "-m", "cairn.cli", *args],
            cwd=ROOT,
            env=cluster.env,
            capture_output=True,
            check=True,
            timeout=30,
        )
        return done.stdout

    listed = json.loads(cli("artifacts", run_id, "--json"))
    assert [(a["name"], a["version"], a["node"]) for a in listed] == [
        ("draft", 1, "draft"),
        ("draft-copy", 1, "review"),
        ("summary", 1, "review"),
    ]
    assert cli("artifacts", run_id, "--get", "draft") == objects.read(draft.sha256)
    # An orphan a crashed worker left (an hour old) goes; what the run registered stays.
    orphan = objects.put(b"written by a worker that died before registering it")
    old = time.time() - 3600
    os.utime(objects.root / blob_key(orphan), (old, old))
    report = json.loads(cli("artifacts-cleanup", "--grace-s", "600"))
    assert report["orphans_deleted"] == 1 and report["expired_rows"] == 0
    assert not objects.exists(orphan) and len(list(objects.blobs())) == 2
