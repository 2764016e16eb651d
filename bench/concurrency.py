"""A shared concurrency limit against a provider that enforces its own.

    python -m bench.concurrency                     # 200 runs, limit 10, 0.2 s a call

Workers with more processes than the limit run ``--runs`` runs of one model call each
against the model stand-in, which answers each call after ``--delay`` seconds and
refuses (429) any call past ``--provider-limit`` at once. With ``concurrency: {key:
bench-provider, limit: 10}`` the provider never sees more than ten; the ideal wall time is
runs x delay / limit. The baseline, in the same run: the same runs without the limit,
which the provider's 429s then push back on (each refused call a failed attempt, retried
after the node's backoff). Prints, for each: wall time and its ratio to the ideal, the
peak of calls at the provider, calls refused, requests per run.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from bench.chain import fleet
from bench.workflows import LIMIT
from cairn.testing.model_server import ModelServer, Reply


def _round(workflow: str, args: argparse.Namespace, workdir: Path) -> dict[str, float]:
    with (
        ModelServer(limit_in_flight=args.provider_limit) as model,
        fleet(
            workflow,
            workdir,
            workers=args.workers,
            worker_args=["--pool=threads", f"--concurrency={args.slots}"],
            MODEL_URL=model.url,
        ) as cairn,
    ):
        model.responder = lambda _request: Reply(text="ok", delay_s=args.delay)
        client = cairn.client
        client.wait(client.submit(workflow, {"ask": "warm up"}), 60)
        model.reset()
        started = time.monotonic()
        runs = [client.submit(workflow, {"ask": f"run {n}"}) for n in range(args.runs)]
        failed = sum(client.wait(run_id, 600).status.value != "succeeded" for run_id in runs)
        wall = time.monotonic() - started
        return {
            "wall_s": wall,
            "peak": model.peak_in_flight,
            "refused": model.over_limit,
            "requests_per_run": model.count() / args.runs,
            "failed": failed,
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--delay", type=float, default=0.2, help="seconds per call")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--slots", type=int, default=16, help="threads per worker")
    parser.add_argument("--provider-limit", type=int, default=LIMIT)
    args = parser.parse_args()
    workdir = Path(os.environ.get("BENCH_WORKDIR", "/tmp/cairn-bench-limits"))
    workdir.mkdir(parents=True, exist_ok=True)
    ideal = args.runs * args.delay / LIMIT
    print(
        f"{args.runs} runs, one {args.delay:g} s call each; {args.workers} workers x "
        f"{args.slots} threads; provider limit {args.provider_limit} at once; ideal "
        f"{ideal:.1f} s at {LIMIT} at once"
    )
    print(
        f"{'':<22} {'wall s':>8} {'x ideal':>8} {'peak':>5} {'429s':>6} {'req/run':>8} "
        f"{'failed':>7}"
    )
    for label, workflow in (
        ("limit 10", "bench_limited"),
        ("no limit (baseline)", "bench_unlimited"),
    ):
        got = _round(workflow, args, workdir)
        print(
            f"{label:<22} {got['wall_s']:>8.1f} {got['wall_s'] / ideal:>8.2f} "
            f"{got['peak']:>5.0f} {got['refused']:>6.0f} {got['requests_per_run']:>8.2f} "
            f"{got['failed']:>7.0f}"
        )


if __name__ == "__main__":
    main()
