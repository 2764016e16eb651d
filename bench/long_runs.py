"""Does a step cost more late in a long run? Per-step overhead of a 10-visit and a
1,000-visit loop of one trivial node, on one worker against PostgreSQL and Redis.

    python -m bench.long_runs                # 30 short runs and 1 long one, per variant
    python -m bench.long_runs --long 2000 --short-runs 50

Three variants, each measured short and long in the same fleet, runs one at a time:

- ``plain``: the node only counts its visits;
- ``reducer``: each visit also adds 200 bytes to a list the state accumulates
  (``reducers: {notes: append}``): the step returns its one item;
- ``whole list``: the same list kept without a reducer, the handler returning the whole
  list each visit — the baseline the reducer replaces.

A step's overhead is its run's time from the first event to the last over its visits
(the events' own database times: nothing the bench does in between counts). Prints ms
per step short and long, the long/short ratio (target: within 1.10 for plain and
reducer), and the stored bytes per event of the long run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from cairn.definitions.builder import Workflow

NOTE = "x" * 200


def visit(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    return {"i": int(state.get("i", 0)) + 1}


def visit_noting(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    return {"i": int(state.get("i", 0)) + 1, "notes": [NOTE]}


def visit_whole_list(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    return {"i": int(state.get("i", 0)) + 1, "notes": [*state.get("notes", []), NOTE]}


def more(state: dict[str, Any]) -> bool:
    return bool(state["i"] < state["n"])


def _loop(name: str, handler: Any, **options: Any) -> Workflow:
    cases = {True: "visit", False: "done"}
    wf = Workflow(name, version=1, max_visits=1_000_000, **options)
    return wf.task("visit", handler, branch={"guard": more, "cases": cases}).end("done")


loop_plain = _loop("bench_loop", visit)
loop_reducer = _loop("bench_loop_reducer", visit_noting, reducers={"notes": "append"})
loop_whole = _loop("bench_loop_whole", visit_whole_list)
VARIANTS = {
    "plain": "bench_loop",
    "reducer": "bench_loop_reducer",
    "whole list": "bench_loop_whole",
}


@dataclass
class Measured:
    ms_per_step: float
    bytes_per_event: float


def _measure(client: Any, url: str, workflow: str, visits: int, runs: int) -> Measured:
    """``runs`` runs of ``visits`` visits, one after the other: the mean step time of
    each run, averaged, and the mean size of the events' stored data."""
    from bench.chain import wait_finished  # noqa: PLC0415

    per_step: list[float] = []
    sizes: list[float] = []
    for _ in range(runs):
        run_id = client.submit(workflow, {"n": visits, "i": 0})
        wait_finished(url, [run_id])  # one cheap query a tenth of a second
        with psycopg.connect(url) as conn:
            status = conn.execute("SELECT status FROM runs WHERE id = %s", (run_id,)).fetchone()
            assert status is not None and status[0] == "succeeded", (run_id, status)
            first, last, steps, size = conn.execute(
                "SELECT min(at), max(at), count(*) FILTER (WHERE type = 'node_succeeded'),"
                " avg(octet_length(data::text)) FROM events WHERE run_id = %s",
                (run_id,),
            ).fetchone() or (0, 0, 0, 0)
        per_step.append((last - first) / max(steps, 1) * 1000)
        sizes.append(float(size))
    return Measured(statistics.mean(per_step), statistics.mean(sizes))


def main() -> None:
    from bench.chain import fleet  # noqa: PLC0415 - the workers import this module too

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--short", type=int, default=10, help="visits of a short run")
    parser.add_argument("--long", type=int, default=1000, help="visits of a long run")
    parser.add_argument("--short-runs", type=int, default=30)
    parser.add_argument("--long-runs", type=int, default=1)
    parser.add_argument("--variants", nargs="*", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument(
        "--state-cache-bytes",
        default=None,
        help="CAIRN_STATE_CACHE_BYTES for the fleet (a state larger is not kept on its run's "
        "row, and each step restores it from a snapshot and the events since)",
    )
    args = parser.parse_args()
    workdir = Path(os.environ.get("BENCH_WORKDIR", "/tmp/cairn-bench-long"))
    workdir.mkdir(parents=True, exist_ok=True)
    print(
        f"a loop of one trivial node: {args.short_runs} runs of {args.short} visits against "
        f"{args.long_runs} of {args.long}, one at a time; one worker process (prefork, "
        "concurrency 1), PostgreSQL and Redis\n"
    )
    header = f"{'':<12} {'short ms/step':>14} {'long ms/step':>13} {'long/short':>11}"
    print(f"{header} {'bytes/event (long)':>19}")
    cache = (
        {}
        if args.state_cache_bytes is None
        else {"CAIRN_STATE_CACHE_BYTES": args.state_cache_bytes}
    )
    with fleet(
        "cairn_long",
        workdir,
        workers=1,
        worker_args=["--pool=prefork", "--concurrency=1"],
        CAIRN_WORKFLOWS="bench.long_runs",
        **cache,
    ) as cairn:
        cairn.client.wait(cairn.client.submit("bench_loop", {"n": 3, "i": 0}), 60)  # warm
        time.sleep(1.0)
        for variant in args.variants:
            workflow = VARIANTS[variant]
            short = _measure(cairn.client, cairn.url, workflow, args.short, args.short_runs)
            long = _measure(cairn.client, cairn.url, workflow, args.long, args.long_runs)
            print(
                f"{variant:<12} {short.ms_per_step:>14.2f} {long.ms_per_step:>13.2f} "
                f"{long.ms_per_step / short.ms_per_step:>11.2f} {long.bytes_per_event:>19,.0f}"
            )


if __name__ == "__main__":
    main()
