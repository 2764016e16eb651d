"""Circuit breaking on the embedded runtime (SQLite, worker threads, memory circuits): a
rate limit's key is guarded like a declared dependency. (In definitions:
tests/unit/test_circuits.py; an outage's probes, one a period of real time:
tests/integration/test_circuits.py; on real services: tests/acceptance/test_circuits.py.)"""

from __future__ import annotations

import time
from pathlib import Path

from cairn.config import Settings
from cairn.model.statuses import RunStatus
from cairn.runtime import Runtime
from tests.support import payments

RATED = f"""
name: rated
version: 1
start: call
nodes:
  call: {{handler: "{payments.HANDLER}", next: done, retry: none,
          rate: {{key: provider, requests: 100/s}}}}
  done: {{end: succeeded}}
"""


def test_a_rate_limits_key_is_guarded_like_a_declared_dependency(tmp_path: Path) -> None:
    """Its provider failing every run (five in a row, the default) opens the key's
    circuit, though the task declares no dependency."""
    (tmp_path / "rated.yaml").write_text(RATED)
    settings = Settings(home=tmp_path / "home", workflows=[str(tmp_path / "rated.yaml")])
    payments.down.set()
    runtime = Runtime.build(settings, concurrency=1)
    runtime.start_workers()
    try:
        runs = [runtime.orchestrator.submit("rated", {}) for _ in range(5)]
        deadline = time.monotonic() + 20
        for run_id in runs:
            while not (view := runtime.orchestrator.get_run(run_id)).status.terminal:
                assert time.monotonic() < deadline, f"{run_id} never ended"
                time.sleep(0.02)
            assert view.status is RunStatus.FAILED
        assert runtime.circuits is not None
        (circuit,) = runtime.circuits.reports()
        assert (circuit.dependency, circuit.state) == ("rate:default/provider", "open")
    finally:
        payments.down.clear()
        runtime.close()
