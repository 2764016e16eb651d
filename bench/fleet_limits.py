"""A concurrency limit and a rate limit shared by a fleet, half of which is killed.

    python -m bench.fleet_limits            # 1,000 runs, limit 10, 600 requests/min

Four workers run ``--runs`` runs of one model call each (``--delay`` seconds) under
``concurrency: {key: bench-provider, limit: 10}`` and ``rate: {key: bench-provider,
requests: 600/min}``, against the model stand-in, which refuses (429) an eleventh call at
once and a 601st request in any 60 s. ``--kill-at`` seconds in, two of the four workers
are killed -9 in the middle of their calls: the slots their executions held come back
once those leases expire (``CAIRN_LEASE_TTL``, 5 s here), and the executions themselves
are recovered and run again.

Prints the stand-in's own figures (its log is the proof): the most calls at once, the
most requests in any 60 s, refusals; wall time against the limits' bound (the first 600
requests in the first minute at ``limit / delay`` a second, the rest after their units
come back); runs succeeded; and how long after the kill the provider had ten calls in
flight again (the dead holders' slots back in use). The baseline, in the same run: the
same runs with neither limit (the stand-in's refusals push back).
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import time
from pathlib import Path

from bench.chain import fleet
from bench.workflows import LIMIT, PER_MINUTE
from cairn.testing.model_server import ModelServer, Reply

LEASE_TTL = 5.0


def _bound(runs: int, delay: float) -> float:
    """The least wall time the limits allow: ``PER_MINUTE`` requests a minute (the window
    slides: a unit comes back a minute after it was taken), at most ``LIMIT`` at once."""
    burst = LIMIT / delay  # requests a second at most, by the concurrency limit
    minutes = math.ceil(runs / PER_MINUTE) - 1
    return minutes * 60 + (runs - minutes * PER_MINUTE) / burst


def _round(workflow: str, args: argparse.Namespace, workdir: Path, kill: bool) -> dict[str, float]:
    with (
        ModelServer(limit_in_flight=LIMIT, limit_requests=(PER_MINUTE, 60.0)) as model,
        fleet(
            workflow,
            workdir,
            workers=4,
            worker_args=["--pool=threads", f"--concurrency={args.slots}"],
            MODEL_URL=model.url,
            CAIRN_LEASE_TTL=str(LEASE_TTL),
            CAIRN_HEARTBEAT_INTERVAL="1",
            CAIRN_RECOVERY_AFTER="10",
        ) as cairn,
    ):
        model.responder = lambda _request: Reply(text="ok", delay_s=args.delay)
        client = cairn.client
        client.wait(client.submit(workflow, {"ask": "warm up"}), 60)
        time.sleep(0.5)
        model.reset()
        started = time.monotonic()
        runs = [client.submit(workflow, {"ask": f"run {n}"}) for n in range(args.runs)]
        back_after = float("nan")
        if kill:
            time.sleep(max(0.0, args.kill_at - (time.monotonic() - started)))
            killed_at = time.monotonic()
            for worker in cairn.workers[:2]:
                os.killpg(worker.pid, signal.SIGKILL)
            # The stand-in sees the killed calls' clients go; the pool is full again only
            # once the dead leases' slots have expired and been taken.
            time.sleep(0.5)
            while model.in_flight < LIMIT and time.monotonic() - killed_at < 120:
                if model.count() >= args.runs:  # too little work left to fill the pool
                    break
                time.sleep(0.05)
            else:
                back_after = time.monotonic() - killed_at
        ended = [client.wait(run_id, 900) for run_id in runs]
        wall = time.monotonic() - started
        return {
            "wall_s": wall,
            "succeeded": sum(view.status.value == "succeeded" for view in ended),
            "peak": model.peak_in_flight,
            "peak_minute": model.peak_in_window(60.0, refused=False),
            "refused": model.over_limit + model.over_rate,
            "back_s": back_after,
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--delay", type=float, default=0.5, help="seconds per call")
    parser.add_argument("--slots", type=int, default=8, help="threads per worker")
    parser.add_argument("--kill-at", type=float, default=20.0, help="seconds in")
    args = parser.parse_args()
    workdir = Path(os.environ.get("BENCH_WORKDIR", "/tmp/cairn-bench-fleet"))
    workdir.mkdir(parents=True, exist_ok=True)
    bound = _bound(args.runs, args.delay)
    print(
        f"{args.runs} runs, one {args.delay:g} s call each; 4 workers x {args.slots} threads; "
        f"limits {LIMIT} at once and {PER_MINUTE}/min (the stand-in refuses past either); "
        f"the limits' bound {bound:.1f} s"
    )
    print(
        f"{'':<34} {'wall s':>7} {'x bound':>8} {'ok':>5} {'peak':>5} {'peak/60s':>9} "
        f"{'429s':>6} {'slots back':>11}"
    )
    rounds = (
        ("limit 10 + 600/min, 2 of 4 killed", "bench_shared_quota", True),
        ("no limits (baseline)", "bench_unlimited", False),
    )
    for label, workflow, kill in rounds:
        got = _round(workflow, args, workdir, kill)
        back = "-" if math.isnan(got["back_s"]) else f"{got['back_s']:.1f} s"
        print(
            f"{label:<34} {got['wall_s']:>7.1f} {got['wall_s'] / bound:>8.2f} "
            f"{got['succeeded']:>5.0f} {got['peak']:>5.0f} {got['peak_minute']:>9.0f} "
            f"{got['refused']:>6.0f} {back:>11}"
        )
    print(
        f"(slots back: after the kill, until {LIMIT} calls were in flight again; "
        f"lease TTL {LEASE_TTL:g} s)"
    )


if __name__ == "__main__":
    main()
