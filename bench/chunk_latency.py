"""How soon a person watching a run sees what its streaming model call says.

    python -m bench.chunk_latency                 # 10 calls x 30 words, a word per 50 ms

A worker streams each call through ``ctx.model`` from the model stand-in, which sends a
word every ``--gap`` seconds; an SSE client follows the run's stream through the API.
For each word: the time from the stand-in sending it (its request's arrival plus its
pacing: a few milliseconds early at most, so the figure errs high) to the client reading
it as an ``event: chunk``;
and, the baseline in the same run, to the client reading the step's ``node_succeeded``
event — how soon it saw the words before chunks were streamed. Prints p50/p99 of both.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import httpx

from bench.chain import admin, api_ready, cairn_env, fresh_database, spawn, stop
from cairn.testing.model_server import ModelServer, Reply

KEY = "bench-key-0123456789abcdef"


def _free_port() -> int:
    import socket  # noqa: PLC0415

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _follow(api: httpx.Client, run_id: str) -> tuple[list[float], float]:
    """Arrival times of the run's text chunks, and of its node_succeeded event."""
    chunks: list[float] = []
    succeeded = 0.0
    with api.stream(
        "GET", f"/v1/runs/{run_id}/stream", headers={"Authorization": f"Bearer {KEY}"}, timeout=60
    ) as r:
        fields: dict[str, str] = {}
        for line in r.iter_lines():
            if line:
                name, _, value = line.partition(": ")
                fields[name] = value
                continue
            kind = fields.get("event")
            if kind == "chunk" and json.loads(fields["data"])["text"]:
                chunks.append(time.time())
            elif kind == "node_succeeded":
                succeeded = time.time()
            elif kind == "end":
                break
            fields = {}
    return chunks, succeeded


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--words", type=int, default=30)
    parser.add_argument("--gap", type=float, default=0.05, help="seconds between words")
    args = parser.parse_args()
    from cairn.client import Client  # noqa: PLC0415
    from cairn.config import Settings  # noqa: PLC0415

    workdir = Path(os.environ.get("BENCH_WORKDIR", "/tmp/cairn-bench-chunks"))
    workdir.mkdir(parents=True, exist_ok=True)
    streamed: list[float] = []
    waited: list[float] = []
    with ModelServer() as model:
        database, url = fresh_database("cairn_chunks")
        env = cairn_env(url, broker_db=12, leases_db=13, MODEL_URL=model.url)
        settings = Settings.from_env({k: v for k, v in env.items() if k.startswith("CAIRN_")})
        port = _free_port()
        worker = spawn(
            [sys.executable, "-m", "cairn.cli", "worker", "--pool=threads", "--concurrency=2"],
            env,
            workdir / "worker.log",
        )
        api_env = {**env, "CAIRN_API_KEYS": f"default:{KEY}"}
        server = spawn(
            [sys.executable, "-m", "cairn.cli", "api", f"--port={port}"],
            api_env,
            workdir / "api.log",
        )
        client = Client(settings)
        try:
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as api:
                api_ready(f"http://127.0.0.1:{port}")
                text = " ".join(f"w{n}" for n in range(args.words))
                model.script(Reply(text="warm"))
                client.wait(client.submit("bench_streamed", {"ask": "warm up"}), 60)
                for call in range(args.calls):
                    model.script(Reply(text=text, chunk_delay_s=args.gap))
                    run_id = client.submit("bench_streamed", {"ask": f"call {call}"})
                    arrivals, succeeded = _follow(api, run_id)
                    sent_at = model.requests[-1].at
                    # The stand-in sends its role chunk at once, then word k after k + 1
                    # gaps.
                    sends = [sent_at + (k + 1) * args.gap for k in range(len(arrivals))]
                    streamed += [a - s for a, s in zip(arrivals, sends, strict=True)]
                    waited += [succeeded - s for s in sends]
        finally:
            client.close()
            stop(server)
            stop(worker)
            with admin() as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')

    def p(values: list[float], q: float) -> float:
        ordered = sorted(values)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000

    rows = [("event: chunk (streamed)", streamed), ("node_succeeded (baseline)", waited)]
    print(
        f"{args.calls} streamed calls x {args.words} words, a word every "
        f"{args.gap * 1000:.0f} ms; {len(streamed)} words\n{'':<28} {'p50 ms':>8} {'p99 ms':>8}"
    )
    for label, values in rows:
        print(f"{label:<28} {p(values, 0.5):>8.1f} {p(values, 0.99):>8.1f}")
    print(f"\nmedian {statistics.median(streamed) * 1000:.1f} ms from the stand-in to the client")


if __name__ == "__main__":
    main()
