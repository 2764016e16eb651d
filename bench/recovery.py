"""How fast a node runs again after its worker is killed with SIGKILL.

    python -m bench.recovery --kills 5                        # the default settings
    python -m bench.recovery --kills 20 --lease-ttl 3 --heartbeat-interval 0.75 \
        --scheduler-interval 0.2                                # a faster configuration

Two worker processes run; each round starts a run whose node sleeps, kills the worker
process group running it, and starts a replacement. The node must run again on the other
worker once its lease expires and the scheduler's recovery finds it: the target is within
the lease TTL plus one scheduler interval. Prints p50/p99 against that target, and the
settings it ran with (every setting not given is cairn's default, CAIRN_RECOVERY_AFTER
included: a dead worker's claim is found by its lapsed lease, not by that sweep).
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench.chain import admin, cairn_env, fresh_database, spawn, stop


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    from cairn.client import Client  # noqa: PLC0415
    from cairn.config import Settings  # noqa: PLC0415

    defaults = Settings()
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--lease-ttl", type=float, default=defaults.lease_ttl)
    parser.add_argument("--heartbeat-interval", type=float, default=defaults.heartbeat_interval)
    parser.add_argument("--scheduler-interval", type=float, default=defaults.scheduler_interval)
    args = parser.parse_args()

    workdir = Path(os.environ.get("BENCH_WORKDIR", "/tmp/cairn-bench-recovery"))
    workdir.mkdir(parents=True, exist_ok=True)
    ledger = workdir / "ledger.txt"
    ledger.unlink(missing_ok=True)
    database, url = fresh_database("cairn_recovery")
    env = cairn_env(
        url,
        broker_db=10,
        leases_db=11,
        CAIRN_LEASE_TTL=str(args.lease_ttl),
        CAIRN_HEARTBEAT_INTERVAL=str(args.heartbeat_interval),
        CAIRN_SCHEDULER_INTERVAL=str(args.scheduler_interval),
    )
    settings = Settings.from_env({k: v for k, v in env.items() if k.startswith("CAIRN_")})

    def worker(index: int) -> subprocess.Popen[bytes]:
        return spawn(
            [sys.executable, "-m", "cairn.cli", "worker", "--concurrency=1"],
            env,
            workdir / f"worker-{index}.log",
        )

    workers = [worker(0), worker(1)]
    scheduler = spawn(
        [sys.executable, "-m", "cairn.cli", "scheduler"], env, workdir / "scheduler.log"
    )
    client = Client(settings)
    delays = []
    try:
        for kill in range(args.kills):
            run_id = client.submit("bench_recovery", {"ledger": str(ledger)})
            started = _starts(ledger, run_id, 1, timeout_s=60)[0]
            pid = int(started[1])
            victim = next(w for w in workers if _in_group(pid, w.pid))
            killed_at = time.time()
            os.killpg(victim.pid, signal.SIGKILL)
            victim.wait()
            workers.remove(victim)
            workers.append(worker(kill + 2))
            again = _starts(ledger, run_id, 2, timeout_s=120)[1]
            delays.append(float(again[2]) - killed_at)
            client.wait(run_id, 60)
            print(f"kill {kill + 1:>2}: node ran again after {delays[-1]:.2f} s", flush=True)
    finally:
        client.close()
        for process in [*workers, scheduler]:
            stop(process)
        with admin() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
    ordered = sorted(delays)
    p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
    target = args.lease_ttl + args.scheduler_interval
    print(
        f"\n{len(delays)} kills: p50 {statistics.median(delays):.2f} s, p99 {p99:.2f} s, "
        f"max {ordered[-1]:.2f} s; lease TTL {args.lease_ttl:g} s + scheduler interval "
        f"{args.scheduler_interval:g} s = target {target:.2f} s (heartbeat interval "
        f"{args.heartbeat_interval:g} s, CAIRN_RECOVERY_AFTER {settings.recovery_after:g} s)"
    )


def _starts(ledger: Path, run_id: str, count: int, timeout_s: float) -> list[list[str]]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if ledger.exists():
            lines = [
                line.split() for line in ledger.read_text().splitlines() if line.startswith(run_id)
            ]
            if len(lines) >= count:
                return lines
        time.sleep(0.02)
    raise TimeoutError(f"run {run_id}: fewer than {count} executions after {timeout_s} s")


def _in_group(pid: int, group: int) -> bool:
    try:
        return os.getpgid(pid) == group
    except ProcessLookupError:
        return False


if __name__ == "__main__":
    main()
