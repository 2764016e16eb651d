"""Errors reach Sentry tagged with their run, workflow and node — through a local
transport that keeps the envelopes the SDK would send — from a run on the embedded
runtime's threads."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import sentry_sdk

from cairn import Workflow
from cairn.model.statuses import RunStatus
from cairn.observe.sentry import init_sentry
from cairn.runtime import Runtime
from tests.support.embedded import settings, wait
from tests.unit.test_sentry import Captured


@pytest.fixture
def captured() -> Iterator[Captured]:
    transport = Captured()
    yield transport
    sentry_sdk.get_global_scope().set_client(None)  # off again, for the other tests


def test_a_failing_node_reaches_sentry_with_its_tags(tmp_path: Path, captured: Captured) -> None:
    probe = Workflow("sentry_probe", version=1)
    probe.task(
        "flaky",
        "tests.integration.handlers:flaky",
        next="charge",
        retry={"attempts": 3, "backoff": "10ms"},
    )
    probe.task("charge", "tests.integration.handlers:boom", next="done")
    # No lease may run out here: an attempt that lost its lease is run again, and a
    # second run of `charge` is a second event (the fast leases of the other embedded
    # tests ran out under a loaded machine's heartbeats).
    runtime = Runtime.build(settings(tmp_path, lease_ttl=10.0, heartbeat_interval=1.0))
    assert init_sentry(runtime.settings, transport=captured)
    runtime.orchestrator.registry.register(probe.end("done").build())
    runtime.start_workers()
    runtime.start_scheduler()
    try:
        run_id = runtime.orchestrator.submit(
            "sentry_probe", {"ledger": str(tmp_path / "ledger"), "succeed_on": 2}
        )
        assert wait(runtime, run_id) is RunStatus.FAILED
        sentry_sdk.flush()
        deadline = time.monotonic() + 5
        while not captured.events and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        runtime.close()
    # The transient failure was retried, not reported; the permanent one was, tagged.
    (event,) = captured.events
    assert event["tags"] == {
        "run_id": run_id,
        "workflow": "sentry_probe",
        "node": "charge",
        "iteration": 1,
        "attempt": 1,
        "phase": "run",
    }
    assert event["exception"]["values"][-1]["type"] == "PermanentError"
