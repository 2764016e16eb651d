"""What a checkpoint inside a node costs.

    python -m bench.checkpoints                     # 40 runs x 20 turns, 500-byte messages
    python -m bench.checkpoints --turns 40 --message-bytes 2000

Each run is one async node taking ``--turns`` model turns (an assistant message each, no
call); with checkpoints, ``await ctx.checkpoint_async()`` after every turn. Both variants
run in the same process setup, one after the other, on fresh databases; the one without
checkpoints is the baseline. Prints wall time, PostgreSQL commits, and per checkpoint:
the added time and commits (the target: one commit per checkpoint, no more).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from bench.chain import admin, cairn_env, commits, fresh_database, spawn, stop, wait_finished


def _measure(
    runs: int, turns: int, message_bytes: int, *, checkpoint: bool, workdir: Path
) -> tuple[float, int]:
    from cairn.client import Client  # noqa: PLC0415
    from cairn.config import Settings  # noqa: PLC0415
    from cairn.engine.batches import SubmitItem  # noqa: PLC0415

    database, url = fresh_database("cairn_ckpt")
    env = cairn_env(url, broker_db=12, leases_db=13)
    settings = Settings.from_env({k: v for k, v in env.items() if k.startswith("CAIRN_")})
    log = workdir / f"worker-{'ckpt' if checkpoint else 'plain'}.log"
    worker = spawn(
        [sys.executable, "-m", "cairn.cli", "worker", "--pool=threads", "--concurrency=4"],
        env,
        log,
    )
    client = Client(settings)
    run_input = {"turns": turns, "message_bytes": message_bytes, "checkpoint": checkpoint}
    try:
        client.wait(client.submit("bench_turns", run_input), 60)  # up and warm
        time.sleep(1.0)
        before = commits(database)
        started = time.perf_counter()
        submitted = client.runtime.orchestrator.submit_batch(
            [SubmitItem("bench_turns", run_input) for _ in range(runs)]
        )
        wait_finished(url, [s.run_id for s in submitted if s.run_id is not None])
        elapsed = time.perf_counter() - started
    finally:
        client.close()
        stop(worker)
    try:
        # An idle backend reports its commits late (PGSTAT_IDLE_INTERVAL); one that ended
        # has reported them all.
        time.sleep(0.5)
        committed = commits(database) - before
    finally:
        with admin() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
    return elapsed, committed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--message-bytes", type=int, default=500)
    args = parser.parse_args()
    workdir = Path(os.environ.get("BENCH_WORKDIR", "/tmp/cairn-bench-checkpoints"))
    workdir.mkdir(parents=True, exist_ok=True)
    shape = (args.runs, args.turns, args.message_bytes)
    plain_s, plain_commits = _measure(*shape, checkpoint=False, workdir=workdir)
    ckpt_s, ckpt_commits = _measure(*shape, checkpoint=True, workdir=workdir)
    checkpoints = args.runs * args.turns
    print(
        f"{args.runs} runs x {args.turns} turns, {args.message_bytes}-byte messages; one worker "
        "process, --pool threads --concurrency 4\n"
        f"{'':<28} {'wall s':>8} {'commits':>8}\n"
        f"{'no checkpoints (baseline)':<28} {plain_s:>8.2f} {plain_commits:>8}\n"
        f"{'a checkpoint every turn':<28} {ckpt_s:>8.2f} {ckpt_commits:>8}\n"
        f"\nper checkpoint: {(ckpt_s - plain_s) / checkpoints * 1000:.2f} ms of wall time, "
        f"{(ckpt_commits - plain_commits) / checkpoints:.2f} commits ({checkpoints} checkpoints)"
    )


if __name__ == "__main__":
    main()
