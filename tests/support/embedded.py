"""The embedded runtime as the in-process tests build it: settings with short timings
over the shared workflow files, and waiting for a run to end."""

from __future__ import annotations

import time
from pathlib import Path

from cairn.config import Settings
from cairn.model.statuses import RunStatus
from cairn.runtime import Runtime

WORKFLOWS = str(Path(__file__).resolve().parents[1] / "integration" / "workflows")


def settings(home: Path, **overrides: object) -> Settings:
    fast: dict[str, object] = {
        "workflows": [WORKFLOWS],
        "recovery_after": 0.5,
        "lease_ttl": 0.6,
        "heartbeat_interval": 0.2,
        "scheduler_interval": 0.05,
    }
    return Settings(home=home, **{**fast, **overrides})


def wait(runtime: Runtime, run_id: str, timeout_s: float = 20.0) -> RunStatus:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status = runtime.orchestrator.get_run(run_id).status
        if status.terminal:
            return status
        time.sleep(0.02)
    raise AssertionError(f"run {run_id} did not finish")
