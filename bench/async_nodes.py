"""How many nodes one worker process keeps waiting on slow calls at once.

    python -m bench.async_nodes                       # 200 nodes, each a 2 s call
    python -m bench.async_nodes --nodes 400 --delay 1

Each node makes one HTTP call that a local stand-in answers after ``--delay`` seconds.
One worker process runs them all (``--pool threads --concurrency N``): as ``async def``
handlers, each awaiting on the process's event loop, and — the baseline, in the same run —
as plain handlers blocking their pool threads; then plain handlers on the default pool
(prefork, two processes: one node each at a time) for a tenth of the nodes. Prints each
one's wall time from submit to the last run's end, nodes/s, and how far it is from the
ideal (every node at once: one delay).
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

    def do_GET(self) -> None:
        time.sleep(self.delay_s)
        body = b'{"ok": true}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return


def _measure(
    label: str, workflow: str, nodes: int, *, pool: str, concurrency: int, url: str, workdir: Path
) -> float:
    from cairn.client import Client  # noqa: PLC0415
    from cairn.config import Settings  # noqa: PLC0415
    from cairn.engine.batches import SubmitItem  # noqa: PLC0415

    database, db_url = fresh_database("cairn_async")
    env = cairn_env(db_url, broker_db=12, leases_db=13)
    settings = Settings.from_env({k: v for k, v in env.items() if k.startswith("CAIRN_")})
    worker = spawn(
        [
            sys.executable,
            "-m",
            "cairn.cli",
            "worker",
            f"--pool={pool}",
            f"--concurrency={concurrency}",
        ],
        env,
        workdir / f"worker-{workflow}-{pool}.log",
    )
    client = Client(settings)
    try:
        client.wait(client.submit(workflow, {"url": url}), 60)  # the worker is up, warm
        items = [SubmitItem(workflow, {"url": url}) for _ in range(nodes)]
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
        f"{label:<44} {nodes:>6} {elapsed:>9.2f} {nodes / elapsed:>9.1f}",
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
        f"{args.nodes} nodes, each one {args.delay:g} s call; one worker process unless said\n"
        f"{'':<44} {'nodes':>6} {'wall s':>9} {'nodes/s':>9}"
    )
    n = args.nodes

    def measure(label: str, workflow: str, nodes: int, pool: str, concurrency: int) -> float:
        return _measure(
            label, workflow, nodes, pool=pool, concurrency=concurrency, url=url, workdir=workdir
        )

    rate_async = measure(f"async def, threads pool x{n}", "bench_await_async", n, "threads", n)
    rate_sync = measure(
        f"plain def, threads pool x{n} (baseline)", "bench_await_sync", n, "threads", n
    )
    rate_prefork = measure(
        "plain def, prefork x2 (the default pool)",
        "bench_await_sync",
        max(2, n // 10),
        "prefork",
        2,
    )
    server.shutdown()
    ideal = n / args.delay
    print(
        f"\nasync: {rate_async / ideal:.2f} of the ideal ({ideal:.0f} nodes/s: all at once); "
        f"{rate_async / rate_sync:.2f}x blocking threads, {rate_async / rate_prefork:.0f}x "
        "the default prefork pool"
    )


if __name__ == "__main__":
    main()
