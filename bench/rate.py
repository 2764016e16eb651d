"""A fleet-wide rate limit against a provider that enforces its own.

    python -m bench.rate                     # 300 runs, 10 requests a second

Two workers run ``--runs`` runs of one model call each against the model stand-in, which
refuses (429, with the Retry-After its window gives) any request past ``--rate`` within
a second. With ``rate: {key: bench-provider, requests: 10/s}`` (600 a minute, spread
over each second: bench/workflows.py) the provider should see at most ten in any
second and refuse none, and the runs take about runs / rate seconds. The baseline, in the
same run: the same runs with no rate limit — the provider's 429s push back, each refused
call a failed attempt retried after its Retry-After by the node's policy. Prints, for
each: wall time, runs succeeded per second against the limit, the most requests the
provider saw in any 1 s window (all, and those it answered rather than refused) and in
any 6 s window, requests refused (429), requests per run, runs failed.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from bench.chain import fleet
from bench.workflows import RATE
from cairn.testing.model_server import ModelServer, Reply


def _round(workflow: str, args: argparse.Namespace, workdir: Path) -> dict[str, float]:
    with (
        ModelServer(limit_requests=(args.rate, 1.0)) as model,
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
        time.sleep(1.1)  # the warm-up's request out of the window
        model.reset()
        started = time.monotonic()
        runs = [client.submit(workflow, {"ask": f"run {n}"}) for n in range(args.runs)]
        ended = [client.wait(run_id, 900) for run_id in runs]
        wall = time.monotonic() - started
        failed = sum(view.status.value != "succeeded" for view in ended)
        return {
            "wall_s": wall,
            "rate": (args.runs - failed) / wall,
            "peak_1s": model.peak_in_window(1.0),
            "answered_1s": model.peak_in_window(1.0, refused=False),
            "peak_6s": model.peak_in_window(6.0),
            "refused": model.over_rate,
            "requests_per_run": model.count() / args.runs,
            "failed": failed,
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--delay", type=float, default=0.05, help="seconds per call")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--slots", type=int, default=16, help="threads per worker")
    parser.add_argument("--rate", type=int, default=RATE, help="the provider's requests/s")
    args = parser.parse_args()
    workdir = Path(os.environ.get("BENCH_WORKDIR", "/tmp/cairn-bench-rate"))
    workdir.mkdir(parents=True, exist_ok=True)
    ideal = args.runs / RATE
    print(
        f"{args.runs} runs, one {args.delay:g} s call each; {args.workers} workers x "
        f"{args.slots} threads; provider: {args.rate} requests in any second; key limit "
        f"{RATE}/s ({RATE * 60}/min); ideal {ideal:.0f} s"
    )
    print(
        f"{'':<20} {'wall s':>7} {'ok/s':>6} {'limit':>6} {'peak 1s':>8} {'answered':>9} "
        f"{'peak 6s':>8} {'429s':>6} {'req/run':>8} {'failed':>7}"
    )
    for label, workflow in (
        (f"rate {RATE}/s", "bench_rated"),
        ("no rate (baseline)", "bench_unlimited"),
    ):
        got = _round(workflow, args, workdir)
        print(
            f"{label:<20} {got['wall_s']:>7.1f} {got['rate']:>6.2f} {RATE:>6} "
            f"{got['peak_1s']:>8.0f} {got['answered_1s']:>9.0f} "
            f"{got['peak_6s']:>8.0f} {got['refused']:>6.0f} "
            f"{got['requests_per_run']:>8.2f} {got['failed']:>7.0f}"
        )


if __name__ == "__main__":
    main()
