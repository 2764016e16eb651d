"""How fast runs get in: batch enqueue throughput and single-submit latency.

    python -m bench.submit --runs 10000 --batch 1000 --singles 500

On a fresh, migrated PostgreSQL database with the broker on Redis (no workers: what is
measured is getting runs in — each run's first step is decided, written and its message
published — not running them):

- **batch**: ``Client.submit_batch`` of ``--runs`` runs in batches of ``--batch`` (one
  transaction per batch): runs/s, and seconds per batch p50/p99;
- **single**: ``--singles`` one-at-a-time ``Client.submit`` calls: latency p50/p99 and
  runs/s; the baseline, measured in the same run, is the raw commit of one empty
  PostgreSQL transaction (``INSERT`` into a temporary table), p50/p99.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Sequence

import psycopg

from bench.chain import admin, cairn_env, fresh_database

WORKFLOW = "bench_chain10"


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--singles", type=int, default=500)
    args = parser.parse_args()

    from cairn.client import Client  # noqa: PLC0415
    from cairn.config import Settings  # noqa: PLC0415

    database, url = fresh_database("cairn_bench_submit")
    env = cairn_env(url, broker_db=12, leases_db=13)
    settings = Settings.from_env({k: v for k, v in env.items() if k.startswith("CAIRN_")})
    client = Client(settings)
    try:
        client.submit(WORKFLOW, {})  # warm: registry, connections, prepared statements

        batch_s: list[float] = []
        started = time.perf_counter()
        for first in range(0, args.runs, args.batch):
            items = [
                {"workflow": WORKFLOW, "input": {"n": n}}
                for n in range(first, min(first + args.batch, args.runs))
            ]
            t0 = time.perf_counter()
            answers = client.submit_batch(items)
            batch_s.append(time.perf_counter() - t0)
            assert all(answer.ok for answer in answers)
        batch_total = time.perf_counter() - started

        single_s: list[float] = []
        started = time.perf_counter()
        for n in range(args.singles):
            t0 = time.perf_counter()
            client.submit(WORKFLOW, {"single": n})
            single_s.append(time.perf_counter() - t0)
        single_total = time.perf_counter() - started

        commit_s: list[float] = []
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE TEMPORARY TABLE bench_commit (n int)")
            for n in range(args.singles):
                t0 = time.perf_counter()
                conn.execute("INSERT INTO bench_commit VALUES (%s)", (n,))
                commit_s.append(time.perf_counter() - t0)
    finally:
        client.close()
        with admin() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')

    ms = 1000.0
    print(f"batch enqueue: {args.runs} runs in batches of {args.batch}")
    print(
        f"  {args.runs / batch_total:,.0f} runs/s; per batch p50 {percentile(batch_s, 0.5):.3f} s,"
        f" p99 {percentile(batch_s, 0.99):.3f} s"
    )
    print(f"single submit: {args.singles} calls, one at a time")
    print(
        f"  p50 {percentile(single_s, 0.5) * ms:.2f} ms, p99 {percentile(single_s, 0.99) * ms:.2f}"
        f" ms, mean {statistics.mean(single_s) * ms:.2f} ms ({args.singles / single_total:,.0f}"
        " runs/s)"
    )
    print(
        f"  baseline, one autocommit INSERT: p50 {percentile(commit_s, 0.5) * ms:.2f} ms,"
        f" p99 {percentile(commit_s, 0.99) * ms:.2f} ms"
    )


if __name__ == "__main__":
    main()
