"""What a circuit breaker saves a dependency during an outage.

    python -m bench.circuits              # 50 runs, a 6 s outage, retries every 100-200 ms

``--runs`` runs each call a dependency that is down for ``--outage`` seconds, with a
retry policy generous enough to outlast it (attempts 200, backoff 100 ms, max 200 ms).
With ``dependency: {name: payments, failures: 5, open_for: 1s}`` the circuit opens after
five runs fail, and the attempts that reach the dependency during the rest of the outage
are its probes. The baseline, in the same run: the same runs without ``dependency``,
every retry reaching the dependency. Prints, for each: attempts at the dependency during
the outage, runs succeeded, and the time from the dependency's return to the last run's
end; then the ratio of attempts. (The embedded runtime: worker threads, SQLite, memory
circuits — the breaker's logic is the fleet's; tests/acceptance/test_circuits.py runs it
on real workers and Redis.)
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from cairn.config import Settings
from cairn.model.failures import TransientError
from cairn.model.statuses import RunStatus
from cairn.runtime import Runtime

_down = threading.Event()
_attempts: list[float] = []
_lock = threading.Lock()


def charge(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    with _lock:
        _attempts.append(time.monotonic())
    if _down.is_set():
        raise TransientError("payments: 503")
    return {"charged": True}


def _workflow(guarded: bool) -> str:
    dependency = (
        "dependency: {name: payments, failures: 5, window: 1m, open_for: 1s}," if guarded else ""
    )
    return f"""
name: bench_circuit
version: 1
start: charge
nodes:
  charge: {{handler: "{__name__}:charge", next: done, {dependency}
            retry: {{attempts: 200, backoff: 100ms, max_delay: 200ms}}}}
  done: {{end: succeeded}}
"""


def _round(guarded: bool, args: argparse.Namespace) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as home:
        path = Path(home) / "bench_circuit.yaml"
        path.write_text(_workflow(guarded))
        settings = Settings(
            home=Path(home) / "cairn", workflows=[str(path)], scheduler_interval=0.05
        )
        _attempts.clear()
        _down.set()
        runtime = Runtime.build(settings, concurrency=4)
        runtime.start_workers()
        runtime.start_scheduler()
        try:
            started = time.monotonic()
            runs = [runtime.orchestrator.submit("bench_circuit", {}) for _ in range(args.runs)]
            time.sleep(max(0.0, args.outage - (time.monotonic() - started)))
            with _lock:
                during = len(_attempts)
            _down.clear()
            back = time.monotonic()
            succeeded = 0
            for run_id in runs:
                while not (view := runtime.orchestrator.get_run(run_id)).status.terminal:
                    time.sleep(0.02)
                succeeded += view.status is RunStatus.SUCCEEDED
            return {
                "attempts": during,
                "succeeded": succeeded,
                "drain_s": time.monotonic() - back,
            }
        finally:
            _down.clear()
            runtime.close()


def main() -> None:
    logging.disable(logging.WARNING)  # each failed attempt logs a warning: hundreds
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--outage", type=float, default=6.0)
    args = parser.parse_args()
    rounds = {
        "baseline (no circuit)": _round(False, args),
        "dependency: payments (circuit)": _round(True, args),
    }
    for name, r in rounds.items():
        print(
            f"{name:32} {r['attempts']:6.0f} attempts in the {args.outage:.0f} s outage, "
            f"{r['succeeded']:.0f}/{args.runs} succeeded, last run {r['drain_s']:.2f} s after"
        )
    base, guarded = rounds.values()
    print(
        "ratio (attempts without / with the circuit): "
        f"{base['attempts'] / guarded['attempts']:.1f}x"
    )


if __name__ == "__main__":
    main()
