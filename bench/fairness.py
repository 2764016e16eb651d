"""Two namespaces sharing the workers: one submits 2,000 runs, then the other 20.

    python -m bench.fairness                     # 2,000 + 20 runs, 10 ms a node, 2 workers

Each run is one node of ``--work`` seconds. Workers (``--workers`` processes of one
slot each) and a scheduler run throughout; the big namespace submits its runs in batches
of 1,000, and right after, the small one submits its 20. A run's **wait** is from its
submit to its end (``runs.created_at`` to ``finished_at``, both the database's clock).
Reported per namespace: p50 and p95 wait. The small namespace's **fair share**: while both
have work, each gets half the workers, so its k-th run ends about 2k / throughput after
it was submitted — its ideal p95 is 2 x ceil(0.95 x 20) / throughput (the throughput
measured in the same round). The **baseline** in the same run: the same workload with
``CAIRN_FAIRNESS=off`` (first in, first out), where the small namespace waits behind the
whole backlog.

It also times the publish path's extra cost: ``--probe`` single-message publishes with
fairness on and off (the one script call per publish), to a queue no worker reads.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import time
from pathlib import Path
from typing import Any

import psycopg

from bench.chain import cairn_env, fleet, wait_finished

BIG, SMALL = "big", "small"


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def _round(fairness: str, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    with fleet(
        f"fair-{fairness}",
        workdir,
        workers=args.workers,
        worker_args=["--concurrency=1"],
        CAIRN_FAIRNESS=fairness,
    ) as cairn:
        client, url = cairn.client, cairn.url
        for _ in range(args.workers * 2):  # every worker up and consuming
            client.wait(client.submit("bench_fair_step", {"work_s": 0}), 120)
        item = {"workflow": "bench_fair_step", "input": {"work_s": args.work}}
        started = time.monotonic()
        ids: dict[str, list[str]] = {BIG: [], SMALL: []}
        for offset in range(0, args.big, 1000):
            count = min(1000, args.big - offset)
            answers = client.submit_batch([item] * count, namespace=BIG)
            ids[BIG] += [a.run_id for a in answers if a.run_id is not None]
        answers = client.submit_batch([item] * args.small, namespace=SMALL)
        ids[SMALL] = [a.run_id for a in answers if a.run_id is not None]
        wait_finished(url, ids[BIG] + ids[SMALL], timeout_s=1200)
        wall = time.monotonic() - started
        waits: dict[str, list[float]] = {}
        with psycopg.connect(url) as conn:
            for namespace, run_ids in ids.items():
                rows = conn.execute(
                    "SELECT extract(epoch FROM finished_at - created_at), status FROM runs "
                    "WHERE id = ANY(%s)",
                    (run_ids,),
                ).fetchall()
                assert all(status == "succeeded" for _, status in rows), rows[:3]
                waits[namespace] = [float(seconds) for seconds, _ in rows]
        throughput = (args.big + args.small) / wall
        return {"wall_s": wall, "throughput": throughput, "waits": waits}


def _probe(args: argparse.Namespace) -> dict[str, float]:
    """Microseconds a single-message publish takes, fairness on and off (same broker),
    in alternating rounds so that a change in the machine's load meets both alike."""
    from cairn.config import Settings  # noqa: PLC0415
    from cairn.model.messages import NodeMessage  # noqa: PLC0415
    from cairn.workers.app import CeleryPublisher, make_celery  # noqa: PLC0415
    from cairn.workers.fairness import KEY_PREFIX, PRIORITY_STEPS, list_name  # noqa: PLC0415

    env = cairn_env("postgresql://unused/none", broker_db=12, leases_db=13)
    queue = "bench-fair-probe"
    message = NodeMessage("r", "w", 1, "n", 1, 1, queue=queue, namespace="probe")
    publishers = {}
    for label, fairness in (("on", True), ("off", False)):
        settings = Settings.from_env(
            {"CAIRN_BROKER_URL": env["CAIRN_BROKER_URL"], "CAIRN_FAIRNESS": str(fairness)}
        )
        publishers[label] = CeleryPublisher(make_celery(settings), settings.queue)
    spent: dict[str, list[float]] = {"on": [], "off": []}
    for publisher in publishers.values():
        for _ in range(50):  # warm: connections, scripts loaded
            publisher.publish([message])
    rounds = 10
    for _ in range(rounds):
        for label, publisher in publishers.items():
            for _ in range(args.probe // rounds):
                begun = time.perf_counter()
                publisher.publish([message])
                spent[label].append(time.perf_counter() - begun)
    client = publishers["on"].fairness.client
    client.delete(KEY_PREFIX + queue, *(list_name(queue, s) for s in PRIORITY_STEPS))
    for publisher in publishers.values():
        publisher.app.close()
    return {label: statistics.median(times) * 1e6 for label, times in spent.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--big", type=int, default=2000)
    parser.add_argument("--small", type=int, default=20)
    parser.add_argument("--work", type=float, default=0.01, help="seconds a node")
    parser.add_argument("--workers", type=int, default=2, help="worker processes")
    parser.add_argument("--probe", type=int, default=2000, help="publishes timed")
    args = parser.parse_args()
    workdir = Path(os.environ.get("BENCH_WORKDIR", "/tmp/cairn-bench-fairness"))
    workdir.mkdir(parents=True, exist_ok=True)
    print(
        f"namespace {BIG!r}: {args.big} runs, then {SMALL!r}: {args.small}; one node of "
        f"{args.work * 1000:g} ms; {args.workers} worker processes"
    )
    print(
        f"{'':<24} {'runs/s':>7} {'big p50':>8} {'big p95':>8} {'small p50':>10} "
        f"{'small p95':>10} {'fair p95':>9} {'x fair':>7}"
    )
    for label, fairness in (("fairness on", "on"), ("fairness off (baseline)", "off")):
        got = _round(fairness, args, workdir)
        big, small = got["waits"][BIG], got["waits"][SMALL]
        fair = 2 * math.ceil(0.95 * args.small) / got["throughput"]
        small_p95 = _percentile(small, 0.95)
        print(
            f"{label:<24} {got['throughput']:>7.1f} {_percentile(big, 0.5):>7.2f}s "
            f"{_percentile(big, 0.95):>7.2f}s {_percentile(small, 0.5):>9.2f}s "
            f"{small_p95:>9.2f}s {fair:>8.2f}s {small_p95 / fair:>7.2f}"
        )
    times = _probe(args)
    print(
        f"publish, one message (median of {args.probe}): fairness on {times['on']:.0f} us, "
        f"off {times['off']:.0f} us (+{times['on'] - times['off']:.0f} us)"
    )


if __name__ == "__main__":
    main()
