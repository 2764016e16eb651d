"""Durable retries under injected transient failures: how many runs succeed on the first
try, and how many with the node's retry policy.

    python -m bench.retries --runs 200 --failure-rate 0.3

The same runs (the same injected failures, drawn per run and attempt) go through two
workflows: one node without a retry policy, and the same node retried up to 5 attempts
with exponential backoff (0.1 s, full jitter, durable timers fired by the scheduler).
Real PostgreSQL, Redis, one Celery worker process and one scheduler.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter
from pathlib import Path

from bench.chain import admin, cairn_env, fresh_database, spawn, stop, wait_finished


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--failure-rate", type=float, default=0.3)
    args = parser.parse_args()

    import psycopg  # noqa: PLC0415

    from cairn.client import Client  # noqa: PLC0415
    from cairn.config import Settings  # noqa: PLC0415

    workdir = Path(os.environ.get("BENCH_WORKDIR", "/tmp/cairn-bench-retries"))
    workdir.mkdir(parents=True, exist_ok=True)
    database, url = fresh_database("cairn_retries")
    env = cairn_env(url, broker_db=12, leases_db=13, CAIRN_SCHEDULER_INTERVAL="0.05")
    settings = Settings.from_env({k: v for k, v in env.items() if k.startswith("CAIRN_")})
    worker = spawn(
        [sys.executable, "-m", "cairn.cli", "worker", "--concurrency=2"],
        env,
        workdir / "worker.log",
    )
    scheduler = spawn(
        [sys.executable, "-m", "cairn.cli", "scheduler"], env, workdir / "scheduler.log"
    )
    client = Client(settings)
    results: dict[str, tuple[Counter[str], Counter[int], float]] = {}
    try:
        for workflow in ("bench_without_retries", "bench_with_retries"):
            started = time.perf_counter()
            run_ids = [
                client.submit(workflow, {"seed": index, "failure_rate": args.failure_rate})
                for index in range(args.runs)
            ]
            wait_finished(url, run_ids)
            elapsed = time.perf_counter() - started
            with psycopg.connect(url) as conn:
                statuses = Counter(
                    status
                    for (status,) in conn.execute(
                        "SELECT status FROM runs WHERE id = ANY(%s)", (run_ids,)
                    )
                )
                attempts = Counter(
                    int(attempt)
                    for (attempt,) in conn.execute(
                        "SELECT attempt FROM node_executions WHERE run_id = ANY(%s) "
                        "AND node = 'call' AND status = 'succeeded'",
                        (run_ids,),
                    )
                )
            results[workflow] = (statuses, attempts, elapsed)
    finally:
        client.close()
        for process in (worker, scheduler):
            stop(process)
        with admin() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')

    print(f"{args.runs} runs, {args.failure_rate:.0%} of attempts fail transiently (injected)\n")
    print(f"{'':<28}{'succeeded':>10}{'failed':>8}{'time':>9}   succeeded on attempt")
    for workflow, label in (
        ("bench_without_retries", "first try only (no retry)"),
        ("bench_with_retries", "retry: 5 attempts, backoff"),
    ):
        statuses, attempts, elapsed = results[workflow]
        spread = ", ".join(f"{a}: {n}" for a, n in sorted(attempts.items()))
        print(
            f"{label:<28}{statuses['succeeded']:>10}{statuses['failed']:>8}"
            f"{elapsed:>8.1f}s   {spread}"
        )
    expected_first = args.runs * (1 - args.failure_rate)
    expected_retry = args.runs * (1 - args.failure_rate**5)
    print(
        f"\nexpected: {expected_first:.0f} on the first try, {expected_retry:.1f} with 5 attempts"
    )


if __name__ == "__main__":
    main()
