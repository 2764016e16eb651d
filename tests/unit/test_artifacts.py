"""Artifacts without services: the object stores (filesystem and memory, one contract),
content addressing, versioning and idempotent puts on SQLite, cleanup with a fake clock,
and the fold of references into the run state. An async handler's puts, and a run in the
embedded default: tests/embedded/test_artifacts.py."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from cairn import Workflow
from cairn.artifacts import ArtifactError, ArtifactNotFound, ArtifactRegistry, Artifacts
from cairn.artifacts.cleanup import collect_orphans
from cairn.artifacts.stores import (
    PARTIAL_SUFFIX,
    FilesystemStore,
    MemoryStore,
    S3Store,
    blob_key,
    digest,
    open_store,
)
from cairn.config import Settings
from cairn.errors import ArtifactCorrupt, ConfigError
from cairn.model.events import NodeSucceeded, event_from_dict, event_to_dict
from cairn.model.state import RunState
from cairn.model.statuses import RunStatus
from cairn.store.backends import store_for
from cairn.store.database import make_engine, upgrade
from cairn.store.sql import Store
from cairn.testing.driver import Driver
from cairn.workers.context import StepContext
from tests.unit import handlers


class FakeClock:
    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


# -- object stores (the shared contract is in tests/contract/) ---------------------------


def test_blob_keys_fan_out_and_refuse_what_is_not_a_digest() -> None:
    sha = digest(b"x")
    assert blob_key(sha) == f"sha256/{sha[:2]}/{sha[2:4]}/{sha}"
    for bad in ("", "../../etc/passwd", sha.upper(), sha[:-1]):
        with pytest.raises(ArtifactError):
            blob_key(bad)


def test_the_filesystem_store_writes_atomically_and_detects_tampering(tmp_path: Path) -> None:
    store = FilesystemStore(tmp_path)
    sha = store.put(b"original")
    path = tmp_path / blob_key(sha)
    assert path.read_bytes() == b"original"
    assert [p.name for p in path.parent.iterdir()] == [sha]  # no partial file left behind
    path.write_bytes(b"changed behind cairn's back")
    with pytest.raises(ArtifactCorrupt):
        store.read(sha)


def test_partial_writes_left_by_a_crash_are_swept_once_old(tmp_path: Path) -> None:
    store = FilesystemStore(tmp_path)
    sha = store.put(b"complete")
    partial = (tmp_path / blob_key(sha)).parent / f".{sha[:16]}.x{PARTIAL_SUFFIX}"
    partial.write_bytes(b"compl")
    os.utime(partial, (1000.0, 1000.0))
    assert [b.sha256 for b in store.blobs()] == [sha]  # a partial write is not a blob
    assert store.sweep_partial(older_than=999.0) == 0
    assert store.sweep_partial(older_than=time.time()) == 1
    assert not partial.exists() and store.exists(sha)


def test_open_store_understands_paths_file_memory_and_s3_urls(tmp_path: Path) -> None:
    by_path = open_store(str(tmp_path / "a"))
    assert isinstance(by_path, FilesystemStore) and by_path.root == tmp_path / "a"
    by_url = open_store((tmp_path / "b c").as_uri())
    assert isinstance(by_url, FilesystemStore) and by_url.root == tmp_path / "b c"
    assert open_store("memory://unit") is open_store("memory://unit")
    s3 = open_store("s3://bucket/some/prefix?endpoint_url=http://127.0.0.1:1&region=eu-west-1")
    assert isinstance(s3, S3Store) and s3.uri(digest(b"")).startswith("s3://bucket/some/prefix/")
    for bad in ("s3:///no-bucket", "s3://b?colour=red", "ftp://host/x", "file://host/x"):
        with pytest.raises(ConfigError):
            open_store(bad)


def test_the_default_store_is_under_the_cairn_home(tmp_path: Path) -> None:
    assert Settings(home=tmp_path).effective_artifacts_url == (tmp_path / "artifacts").as_uri()
    assert Settings(home=tmp_path, artifacts_url="s3://b").effective_artifacts_url == "s3://b"
    settings = Settings.from_env(
        {"CAIRN_ARTIFACTS_RETENTION_DAYS": "30", "CAIRN_ARTIFACTS_ORPHAN_GRACE_S": "60"}
    )
    assert settings.artifacts_retention_days == 30 and settings.artifacts_orphan_grace_s == 60


# -- registrations on SQLite ----------------------------------------------------------------


@pytest.fixture(scope="module")
def sqlite_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    engine = make_engine(f"sqlite:///{tmp_path_factory.mktemp('artifacts') / 'cairn.db'}")
    upgrade(engine)
    store = store_for(engine)
    yield store
    store.dispose()


Execution = Callable[..., Artifacts]


@pytest.fixture
def execution(sqlite_store: Store) -> Execution:
    """Artifacts for an execution of a fresh run: ``execution(node=, iteration=, attempt=)``."""
    run_id = str(uuid.uuid4())
    objects = MemoryStore(run_id)

    def make(node: str = "write", iteration: int = 1, attempt: int = 1) -> Artifacts:
        return Artifacts(
            ArtifactRegistry(sqlite_store),
            objects,
            run_id=run_id,
            node=node,
            iteration=iteration,
            attempt=attempt,
        )

    return make


def test_each_put_of_a_name_is_its_next_version(execution: Execution) -> None:
    artifacts = execution()
    first = artifacts.put("draft", "one")
    second = artifacts.put("draft", b"two")
    other = artifacts.put("notes", b"one")  # another name counts its own versions
    assert (first["version"], second["version"], other["version"]) == (1, 2, 1)
    assert first == {
        "name": "draft",
        "version": 1,
        "sha256": digest(b"one"),
        "size": 3,
        "uri": artifacts.objects.uri(digest(b"one")),
    }
    assert artifacts.get("draft") == b"two"
    assert artifacts.text("draft", version=1) == "one"
    assert [(i.name, i.version) for i in artifacts.versions()] == [
        ("draft", 1),
        ("draft", 2),
        ("notes", 1),
    ]
    assert artifacts.created() == {"draft": second, "notes": other}
    with pytest.raises(ArtifactNotFound):
        artifacts.get("draft", version=3)
    with pytest.raises(ArtifactNotFound):
        artifacts.info("nothing")


def test_a_put_records_its_provenance(execution: Execution) -> None:
    artifacts = execution(node="summarise", iteration=2, attempt=3)
    before = time.time()
    artifacts.put(
        "summary",
        "short",
        model="gpt-x",
        tool="summariser",
        params={"temperature": 0.2},
        prompt_tokens=812,
    )
    artifacts.put("summary", "shorter", call_id="call_abc")
    first, second = artifacts.versions("summary")
    assert (first.node, first.iteration, first.attempt, first.phase) == ("summarise", 2, 3, "run")
    assert (first.model, first.tool, first.params) == ("gpt-x", "summariser", {"temperature": 0.2})
    assert first.meta == {"prompt_tokens": 812}
    assert first.call_id == "summarise#2.3/run:1"  # derived: execution and ordinal
    assert second.call_id == "call_abc" and second.model is None and second.meta is None
    assert before - 1 <= first.created_at <= time.time() + 1
    assert first.run_id == artifacts.run_id and first.size == 5


def test_the_same_put_by_a_node_that_runs_again_is_not_a_new_version(
    execution: Execution,
) -> None:
    first = execution(attempt=1).put("draft", "same text", model="m")
    retry = execution(attempt=2)
    assert retry.put("draft", "same text", model="m") == first
    assert retry.created() == {"draft": first}  # it still rides on the retry's result
    assert retry.info("draft").attempt == 1  # the registration that counts is the first
    # New content is a new version; so is the same content from another visit or node.
    assert retry.put("draft", "other text")["version"] == 2
    assert execution(iteration=2).put("draft", "same text")["version"] == 3
    assert execution(node="copy").put("draft", "same text")["version"] == 4
    assert len(execution().versions("draft")) == 4


def test_same_content_under_two_names_is_one_blob(execution: Execution) -> None:
    artifacts = execution()
    a = artifacts.put("a", b"shared content")
    b = artifacts.put("b", b"shared content")
    assert a["sha256"] == b["sha256"] and a["uri"] == b["uri"]
    assert len(list(artifacts.objects.blobs())) == 1


def test_bad_puts_are_refused_before_anything_is_stored(execution: Execution) -> None:
    artifacts = execution()
    with pytest.raises(ArtifactError, match="bytes or str"):
        artifacts.put("x", {"not": "bytes"})  # type: ignore[arg-type]
    for name in ("", "n" * 201, "nul\x00"):
        with pytest.raises(ArtifactError, match="name"):
            artifacts.put(name, b"x")
    with pytest.raises(ArtifactError, match="not JSON"):
        artifacts.put("x", b"x", when=object())
    with pytest.raises(ArtifactError, match="mapping"):
        artifacts.put("x", b"x", params=[1, 2])
    with pytest.raises(ArtifactError, match="string"):
        artifacts.put("x", b"x", model=7)
    assert artifacts.versions() == [] and list(artifacts.objects.blobs()) == []


def test_a_context_without_a_store_says_so() -> None:
    ctx = StepContext(
        run_id="r",
        workflow="w",
        node="n",
        iteration=1,
        attempt=1,
        phase="run",
        state=RunState("r", "w", 1),
    )
    with pytest.raises(ArtifactError, match="no artifact store"):
        ctx.artifacts.put("x", b"x")
    assert ctx.added_artifacts() == {}


def test_orphans_are_deleted_only_past_the_grace_period(sqlite_store: Store) -> None:
    clock = FakeClock()
    objects = MemoryStore("orphans", clock=clock)
    registry = ArtifactRegistry(sqlite_store)
    artifacts = Artifacts(
        registry, objects, run_id=str(uuid.uuid4()), node="n", iteration=1, attempt=1
    )
    kept = artifacts.put("kept", b"registered")
    orphan = objects.put(b"written, then the worker died")
    grace = timedelta(hours=1)
    clock.now += 3599
    assert collect_orphans(registry, objects, grace, clock=clock).orphans_deleted == 0
    clock.now += 2
    assert collect_orphans(registry, objects, grace, clock=clock).orphans_deleted == 1
    assert not objects.exists(orphan) and objects.exists(kept["sha256"])
    assert artifacts.get("kept") == b"registered"


# -- the run state ---------------------------------------------------------------------


def _ref(name: str, version: int) -> dict[str, Any]:
    sha = digest(f"{name}{version}".encode())
    return {"name": name, "version": version, "sha256": sha, "size": 1, "uri": f"memory://{sha}"}


def test_references_ride_on_the_result_into_the_state_newest_version_kept() -> None:
    wf = Workflow("refs", version=1)
    wf.parallel("fan", ["a", "b"], next="c")
    wf.task("a", handlers.noop)
    wf.task("b", handlers.noop)
    wf.task("c", handlers.noop, next="done")
    driver = Driver(wf.end("done").build())
    driver.start()

    def succeed(node: str, refs: dict[str, Any]) -> None:
        command = driver.take(node)
        event = NodeSucceeded(
            at=driver.tick(),
            node=node,
            iteration=command.iteration,
            attempt=command.attempt,
            artifacts=refs,
        )
        assert event_from_dict(event_to_dict(event)) == event  # as the log stores it
        driver.apply(event)

    # Branch b registered version 2 of "draft" after a registered version 1, but reports
    # first: the state keeps version 2.
    succeed("b", {"draft": _ref("draft", 2)})
    succeed("a", {"draft": _ref("draft", 1), "notes": _ref("notes", 1)})
    assert driver.state.artifacts == {"draft": _ref("draft", 2), "notes": _ref("notes", 1)}
    succeed("c", {"draft": _ref("draft", 3)})
    assert driver.state.artifacts["draft"]["version"] == 3
    assert driver.state.status is RunStatus.SUCCEEDED
    restored = RunState.from_dict(driver.state.to_dict())
    assert restored.artifacts == driver.state.artifacts
    # Events from before artifacts existed still read.
    old = event_to_dict(NodeSucceeded(at=1.0, node="a"))
    del old["artifacts"]
    assert event_from_dict(old) == NodeSucceeded(at=1.0, node="a")
