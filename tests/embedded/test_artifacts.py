"""Artifacts off the test's thread: an async handler's puts and reads, which go to a
thread so as not to block its event loop, and a run in the embedded default on its
worker threads. Without threads: tests/unit/test_artifacts.py."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from cairn.artifacts.stores import FilesystemStore, open_store
from cairn.config import Settings
from cairn.model.statuses import RunStatus
from cairn.runtime import Runtime
from tests.unit import test_artifacts as unit
from tests.unit.test_artifacts import Execution

sqlite_store, execution = unit.sqlite_store, unit.execution


WORKFLOWS = str(Path(__file__).resolve().parents[1] / "integration" / "workflows")


def test_an_async_handler_puts_and_reads_artifacts_off_its_event_loop(
    execution: Execution,
) -> None:
    artifacts = execution()

    async def handler() -> tuple[dict[str, Any], bytes, str]:
        ref = await artifacts.put_async("page", "<html>…</html>", tool="browser")
        return ref, await artifacts.get_async("page"), await artifacts.text_async("page")

    ref, content, text = asyncio.run(handler())
    assert ref["version"] == 1 and content == "<html>…</html>".encode() and text == "<html>…</html>"
    assert artifacts.created() == {"page": ref}
    assert artifacts.info("page").tool == "browser"


def test_a_run_in_the_embedded_default_keeps_references_not_content(tmp_path: Path) -> None:
    runtime = Runtime.build(
        Settings(
            home=tmp_path,
            workflows=[WORKFLOWS],
            lease_ttl=0.6,
            heartbeat_interval=0.2,
            scheduler_interval=0.05,
        )
    )
    runtime.start_workers()
    runtime.start_scheduler()
    try:
        run_id = runtime.orchestrator.submit(
            "artifacts", {"topic": "cairns", "repeat": 2000, "fail_first": True}
        )
        deadline = time.monotonic() + 20
        while not (view := runtime.orchestrator.get_run(run_id)).status.terminal:
            assert time.monotonic() < deadline, "the run did not finish"
            time.sleep(0.02)
        assert view.status is RunStatus.SUCCEEDED and view.state is not None
        refs = view.state.artifacts
        assert sorted(refs) == ["draft", "draft-copy", "summary"]
        executions = runtime.orchestrator.get_run(run_id, with_executions=True).executions
        assert {e["node"]: e["attempt"] for e in executions}["draft"] == 2
        assert refs["draft"]["version"] == 1  # the retry's put was the same registration
        assert refs["draft"]["size"] == len("A draft about cairns.\n") * 2000
        assert refs["draft-copy"]["sha256"] == refs["draft"]["sha256"]
        # The state (and so every snapshot) holds the references, not the 44 kB draft.
        assert len(str(view.state.to_dict())) < 10_000
        objects = open_store(runtime.settings.effective_artifacts_url)
        assert isinstance(objects, FilesystemStore)
        assert objects.root == (tmp_path / "artifacts").resolve()
        assert len(list(objects.blobs())) == 2  # the draft (twice) and the summary
    finally:
        runtime.close()
