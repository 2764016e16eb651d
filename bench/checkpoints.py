"""What a checkpoint inside a node costs, and whether it grows with the node's history.

    python -m bench.checkpoints                     # 20 runs x 10 and x 100 turns
    python -m bench.checkpoints --runs 40 --turns 10 40 --message-bytes 2000

Each run is one async node taking its turns (an assistant message of ``--message-bytes``
each, no call); with checkpoints, ``await ctx.checkpoint_async()`` after every turn. For
each number of turns, the node without checkpoints (the baseline) and with them run one
after the other in the same setup, on fresh databases. Prints wall time and PostgreSQL
commits, and per checkpoint: the added time and commits (the target: one commit per
checkpoint) and the bytes it stored (a trigger notes the size of each row written to
``node_checkpoints``), beside the bytes of history a node has at its last checkpoint
(what a checkpoint saving everything would write). The bytes per checkpoint at the most
turns over those at the fewest is the ratio that should stay near 1: a checkpoint stores
what changed since the last one.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psycopg

from bench.chain import admin, cairn_env, commits, fresh_database, spawn, stop, wait_finished

# Notes the size of every checkpoint row written (inserted, or updated in place).
SIZES = """
CREATE TABLE bench_checkpoint_sizes (bytes integer NOT NULL);
CREATE FUNCTION bench_note_checkpoint() RETURNS trigger AS $$
BEGIN
  INSERT INTO bench_checkpoint_sizes VALUES (octet_length(NEW.context::text));
  RETURN NEW;
END $$ LANGUAGE plpgsql;
CREATE TRIGGER bench_note_checkpoint AFTER INSERT OR UPDATE ON node_checkpoints
  FOR EACH ROW EXECUTE FUNCTION bench_note_checkpoint();
"""


@dataclass
class Measured:
    seconds: float
    commits: int
    stored: list[int]  # the bytes of each checkpoint row written
    history_bytes: float  # a run's messages at its end, as JSON


def _measure(
    runs: int, turns: int, message_bytes: int, *, checkpoint: bool, workdir: Path
) -> Measured:
    from cairn.client import Client  # noqa: PLC0415
    from cairn.config import Settings  # noqa: PLC0415
    from cairn.engine.batches import SubmitItem  # noqa: PLC0415

    database, url = fresh_database("cairn_ckpt")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(SIZES)
    env = cairn_env(url, broker_db=12, leases_db=13)
    settings = Settings.from_env({k: v for k, v in env.items() if k.startswith("CAIRN_")})
    log = workdir / f"worker-{'ckpt' if checkpoint else 'plain'}-{turns}.log"
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
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("TRUNCATE bench_checkpoint_sizes")
        before = commits()
        started = time.perf_counter()
        submitted = client.runtime.orchestrator.submit_batch(
            [SubmitItem("bench_turns", run_input) for _ in range(runs)]
        )
        run_ids = [s.run_id for s in submitted if s.run_id is not None]
        wait_finished(url, run_ids)
        elapsed = time.perf_counter() - started
    finally:
        client.close()
        stop(worker)
    try:
        committed = commits() - before
        with psycopg.connect(url) as conn:
            stored = [row[0] for row in conn.execute("SELECT bytes FROM bench_checkpoint_sizes")]
            history = conn.execute(
                "SELECT avg(octet_length((state->'messages')::text)) FROM runs WHERE id = ANY(%s)",
                (run_ids,),
            ).fetchone()
    finally:
        with admin() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
    return Measured(elapsed, committed, stored, float(history[0] or 0) if history else 0.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--turns", type=int, nargs="+", default=[10, 100])
    parser.add_argument("--message-bytes", type=int, default=500)
    args = parser.parse_args()
    workdir = Path(os.environ.get("BENCH_WORKDIR", "/tmp/cairn-bench-checkpoints"))
    workdir.mkdir(parents=True, exist_ok=True)
    print(
        f"{args.runs} runs of one node, {args.message_bytes}-byte messages, a checkpoint "
        "after every turn against none; one worker process, --pool threads --concurrency 4\n"
    )
    print(
        f"{'turns':>5} {'plain s':>8} {'ckpt s':>8} {'ms/ckpt':>8} {'commits/ckpt':>13} "
        f"{'bytes/ckpt':>11} {'history at end':>15}"
    )
    per_checkpoint: dict[int, float] = {}
    for turns in args.turns:
        shape = (args.runs, turns, args.message_bytes)
        plain = _measure(*shape, checkpoint=False, workdir=workdir)
        ckpt = _measure(*shape, checkpoint=True, workdir=workdir)
        count = args.runs * turns
        per_checkpoint[turns] = statistics.mean(ckpt.stored) if ckpt.stored else 0.0
        print(
            f"{turns:>5} {plain.seconds:>8.2f} {ckpt.seconds:>8.2f} "
            f"{(ckpt.seconds - plain.seconds) / count * 1000:>8.2f} "
            f"{(ckpt.commits - plain.commits) / count:>13.2f} "
            f"{per_checkpoint[turns]:>11,.0f} {ckpt.history_bytes:>15,.0f}"
        )
    fewest, most = min(per_checkpoint), max(per_checkpoint)
    print(
        f"\nbytes per checkpoint, {most} turns / {fewest} turns: "
        f"{per_checkpoint[most] / per_checkpoint[fewest]:.2f}x  (flat: ~1.0x; a checkpoint "
        f"saving the whole history would store about half the history at the end each time)"
    )


if __name__ == "__main__":
    main()
