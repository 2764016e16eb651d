"""How many nodes one worker process keeps waiting on slow calls at once.

    python -m bench.async_nodes                       # 200 nodes, each a 2 s call
    python -m bench.async_nodes --nodes 400 --delay 1

Each node makes one HTTP call that a local stand-in answers after ``--delay`` seconds;
the stand-in counts the calls open at once. In one run: ``async def`` nodes on a default
``cairn worker`` (prefork, two processes, no options), each handed to its process's
event loop and holding no pool slot; the baseline, the same on the same worker with
``CAIRN_ASYNC_NODES=0`` (each async node holds its pool process while it awaits, as
before) for a tenth of the nodes; then one process with ``--pool threads --concurrency N``
(what such nodes needed before), async and, blocking their threads, plain. Prints each
one's wall time from submit to the last run's end, nodes/s, the most calls open at once,
and how far it is from the ideal (every node at once: one delay).
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from bench.chain import admin, cairn_env, fresh_database, spawn, stop, wait_finished


class _Slow(BaseHTTPRequestHandler):
    delay_s = 2.0
    lock = threading.Lock()
    open_now = 0
    peak = 0

    def do_GET(self) -> None:
        with self.lock:
            _Slow.open_now += 1
            _Slow.peak = max(_Slow.peak, _Slow.open_now)
        try:
            time.sleep(self.delay_s)
        finally:
            with self.lock:
                _Slow.open_now -= 1
        body = b'{"ok": true}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return


def _measure(
    label: str,
    workflow: str,
    nodes: int,
    *,
    options: list[str],
    url: str,
    workdir: Path,
    **settings: str,
) -> float:
    from cairn.client import Client  # noqa: PLC0415
    from cairn.config import Settings  # noqa: PLC0415
    from cairn.engine.batches import SubmitItem  # noqa: PLC0415

    database, db_url = fresh_database("cairn_async")
    env = cairn_env(db_url, broker_db=12, leases_db=13, **settings)
    config = Settings.from_env({k: v for k, v in env.items() if k.startswith("CAIRN_")})
    worker = spawn(
        [sys.executable, "-m", "cairn.cli", "worker", *options],
        env,
        workdir / f"worker-{workflow}-{len(os.listdir(workdir))}.log",
    )
    client = Client(config)
    try:
        client.wait(client.submit(workflow, {"url": url}), 60)  # the worker is up, warm
        items = [SubmitItem(workflow, {"url": url}) for _ in range(nodes)]
        _Slow.peak = _Slow.open_now
        started = time.monotonic()
        run_ids = [s.run_id for s in client.runtime.orchestrator.submit_batch(items)]
        assert all(run_ids), "a submit was refused"
        wait_finished(db_url, [r for r in run_ids if r is not None])
        elapsed = time.monotonic() - started
    finally:
        client.close()
        stop(worker)
        with admin() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
    print(
        f"{label:<58} {nodes:>6} {elapsed:>9.2f} {nodes / elapsed:>9.1f} {_Slow.peak:>6}",
        flush=True,
    )
    return nodes / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=200)
    parser.add_argument("--delay", type=float, default=2.0, help="seconds each call takes")
    args = parser.parse_args()
    workdir = Path(os.environ.get("BENCH_WORKDIR", "/tmp/cairn-bench-async"))
    workdir.mkdir(parents=True, exist_ok=True)
    _Slow.delay_s = args.delay
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Slow)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/slow"
    print(
        f"{args.nodes} nodes, each one {args.delay:g} s call\n"
        f"{'':<58} {'nodes':>6} {'wall s':>9} {'nodes/s':>9} {'open':>6}"
    )
    n = args.nodes

    def measure(label: str, workflow: str, nodes: int, *options: str, **settings: str) -> float:
        return _measure(
            label, workflow, nodes, options=list(options), url=url, workdir=workdir, **settings
        )

    awaiting = measure("async def, default worker (prefork x2)", "bench_await_async", n)
    holding = measure(
        "async def, default worker, each holding its slot (before)",
        "bench_await_async",
        max(2, n // 10),
        CAIRN_ASYNC_NODES="0",
    )
    threads = f"--concurrency={n}"
    measure(
        f"async def, one process, threads pool x{n}",
        "bench_await_async",
        n,
        "--pool=threads",
        threads,
    )
    measure(
        f"plain def, one process, threads pool x{n}",
        "bench_await_sync",
        n,
        "--pool=threads",
        threads,
    )
    server.shutdown()
    ideal = n / args.delay
    print(
        f"\nasync nodes on a default worker: {awaiting / ideal:.2f} of the ideal ({ideal:.0f} "
        f"nodes/s: all at once); {awaiting / holding:.0f}x the same worker with each "
        "holding its pool slot"
    )


if __name__ == "__main__":
    main()
