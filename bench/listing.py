"""The runs listing and a run's pages at ten thousand and at a million runs: flat?

    python -m bench.listing                        # 10,000 runs, then 1,000,000
    python -m bench.listing --small 5000 --large 200000 --repeat 20

A throwaway database is seeded in bulk (one server-side INSERT ... SELECT per table:
runs spread over 30 days in four workflows and every status, a few events each) to the
small size, then grown to the large one; a real ``cairn api`` process answers. A few real
runs (a wait that loops on a signal, ticked 20 times) are the run pages timed. Each URL
in ``URLS`` — the API's, and the console's pages with a signed-in session — is asked
``--repeat`` times (after a warm-up) at each size; printed: the request's time at the
client (median, p99) at both sizes and the ratio of the medians — about 1.0 when the
page stays flat. Add a page to ``URLS`` to time it too.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from bench.chain import admin, api_ready, cairn_env, fresh_database, spawn, stop
from bench.streams import WORKFLOW, free_port

KEY = "bench-listing-key-0123456789ab"
# (label, path): {placeholders} are filled from what the seeding found (see _places).
URLS: list[tuple[str, str]] = [
    ("runs: first page", "/v1/runs?limit=50"),
    ("runs: deep page (middle)", "/v1/runs?limit=50&cursor={deep_cursor}"),
    ("runs: status=failed", "/v1/runs?limit=50&status=failed"),
    ("runs: status=cancelled (rare)", "/v1/runs?limit=50&status=cancelled"),
    ("runs: status=waiting", "/v1/runs?limit=50&status=waiting"),
    ("runs: running+waiting", "/v1/runs?limit=50&status=running&status=waiting"),
    ("runs: workflow", "/v1/runs?limit=50&workflow=checkout"),
    ("runs: workflow+status", "/v1/runs?limit=50&workflow=checkout&status=failed"),
    (
        "runs: a day, 2 days ago",
        "/v1/runs?limit=50&created_after={day_from}&created_before={day_to}",
    ),
    ("runs: status, deep", "/v1/runs?limit=50&status=succeeded&cursor={deep_cursor}"),
    ("counts", "/v1/runs/counts"),
    ("counts: workflow", "/v1/runs/counts?workflow=checkout"),
    ("counts: a day", "/v1/runs/counts?created_after={day_from}&created_before={day_to}"),
    ("run: detail", "/v1/runs/{run}"),
    ("run: events", "/v1/runs/{run}/events"),
    ("run: history (timeline)", "/v1/runs/{run}/history"),
    # The console's pages (a signed-in session), rendered in full.
    ("console: runs page", "/console/runs"),
    ("console: runs page, failed", "/console/runs?status=failed"),
    ("console: runs page, a workflow", "/console/runs?workflow=checkout"),
    ("console: a run's page", "/console/runs/{run}"),
]
WORKFLOWS = ("checkout", "report", "triage", "bench_ticks")
# Of every 1,000 runs: how many end in each status (the rest succeed).
SHARES = {"failed": 40, "waiting": 20, "running": 15, "cancelled": 1, "compensated": 4}
SPAN_S = 30 * 86400
EVENTS_PER_RUN = 3

SEED_RUNS = """
INSERT INTO runs (id, namespace, workflow, version, status, input, current, last_seq,
                  snapshot_seq, created_at, updated_at, priority, workflow_namespace)
SELECT 'seed-' || lpad(n::text, 9, '0'), 'default',
       (CAST(:workflows AS text[]))[1 + (n * 7919) % 4], 1,
       CASE WHEN n % 1000 < :failed THEN 'failed'
            WHEN n % 1000 < :waiting THEN 'waiting'
            WHEN n % 1000 < :running THEN 'running'
            WHEN n % 1000 < :cancelled THEN 'cancelled'
            WHEN n % 1000 < :compensated THEN 'compensated'
            ELSE 'succeeded' END,
       '{}', '[]', :events, 0, t, t, 0, 'default'
FROM generate_series(CAST(:first AS bigint), :last) AS n,
     LATERAL (SELECT now() - ((n * 104729) % :span) * interval '1 second' AS t) AS at
"""
SEED_EVENTS = """
INSERT INTO events (run_id, seq, type, data, outcome, at)
SELECT 'seed-' || lpad(n::text, 9, '0'), seq, 'seeded', '{}', '{}', extract(epoch FROM now())
FROM generate_series(CAST(:first AS bigint), :last) AS n, generate_series(1, :events) AS seq
"""


@dataclass
class Timing:
    median_ms: float
    p99_ms: float


def seed(url: str, first: int, last: int) -> float:
    """Runs ``first``..``last`` and their events; the seconds it took."""
    from sqlalchemy import text  # noqa: PLC0415

    from cairn.store.database import make_engine  # noqa: PLC0415

    started = time.monotonic()
    bounds, edge = {}, 0
    for status, share in SHARES.items():
        edge += share
        bounds[status] = edge
    engine = make_engine(url)
    try:
        with engine.begin() as connection:
            span = {"first": first, "last": last, "events": EVENTS_PER_RUN}
            connection.execute(
                text(SEED_RUNS),
                {**span, **bounds, "workflows": list(WORKFLOWS), "span": SPAN_S},
            )
            connection.execute(text(SEED_EVENTS), span)
        with engine.connect() as connection:  # VACUUM: the visibility map index-only reads use
            connection.execution_options(isolation_level="AUTOCOMMIT").execute(
                text("VACUUM ANALYZE runs, events")
            )
    finally:
        engine.dispose()
    return time.monotonic() - started


def _places(run_id: str) -> dict[str, Any]:
    """What the URLs' placeholders stand for: a real run, a cursor half way down."""
    from cairn.model.selection import page_cursor  # noqa: PLC0415

    now = time.time()
    middle = now - SPAN_S / 2  # seeded runs are spread evenly over the span
    return {
        "run": run_id,
        "deep_cursor": page_cursor(datetime.fromtimestamp(middle, UTC), "seed-"),
        "day_from": int(now - 3 * 86400),
        "day_to": int(now - 2 * 86400),
    }


def measure(
    api: httpx.Client, places: dict[str, Any], repeat: int, session: str
) -> dict[str, Timing]:
    found: dict[str, Timing] = {}
    for label, path in URLS:
        url = path.format(**places)
        if path.startswith("/console/"):
            headers = {"Cookie": f"cairn_session={session}"}
        else:
            headers = {"Authorization": f"Bearer {KEY}"}
        for _ in range(3):  # warm: connection, caches, plans
            response = api.get(url, headers=headers)
            assert response.status_code == 200, (url, response.text)
        took = []
        for _ in range(repeat):
            started = time.perf_counter()
            response = api.get(url, headers=headers)
            took.append(time.perf_counter() - started)
            assert response.status_code == 200, (url, response.text)
        ordered = sorted(took)
        p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
        found[label] = Timing(statistics.median(took) * 1000, p99 * 1000)
    return found


def _session(client: Any) -> str:
    """A console session of an admin that reads payloads (every page, in full)."""
    from cairn.console.sessions import start_session  # noqa: PLC0415
    from cairn.model.principals import Principal, Role  # noqa: PLC0415

    who = Principal("bench", "default", Role.ADMIN, payloads=True)
    return start_session(client.runtime.store, who, 3600).token


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", type=int, default=10_000)
    parser.add_argument("--large", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    from cairn.client import Client  # noqa: PLC0415
    from cairn.config import Settings  # noqa: PLC0415

    results: list[tuple[int, float, dict[str, Timing]]] = []
    with tempfile.TemporaryDirectory() as tmp:
        definition = Path(tmp) / "bench_ticks.yaml"
        definition.write_text(WORKFLOW)
        database, url = fresh_database("cairn_bench_listing")
        env = cairn_env(url, broker_db=12, leases_db=13, CAIRN_WORKFLOWS=str(definition))
        client = Client(Settings.from_env({k: v for k, v in env.items() if k.startswith("CAIRN_")}))
        port = free_port()
        api_env = {**env, "CAIRN_API_KEYS": f"default:{KEY}"}
        server = spawn(
            [sys.executable, "-m", "cairn.cli", "api", f"--port={port}"],
            api_env,
            Path(tmp) / "api.log",
        )
        try:
            session = _session(client)
            run_id = client.submit("bench_ticks")
            for _ in range(20):
                client.signal(run_id, "tick", {})
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as api:
                api_ready(str(api.base_url).rstrip("/"))
                seeded = 0
                for size in (args.small, args.large):
                    took = seed(url, seeded + 1, size)
                    seeded = size
                    places = _places(run_id)
                    results.append((size, took, measure(api, places, args.repeat, session)))
        finally:
            client.close()
            stop(server)
            with admin() as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
    _report(results, args.repeat)


def _report(results: list[tuple[int, float, dict[str, Timing]]], repeat: int) -> None:
    (small, small_s, before), (large, large_s, after) = results
    print(
        f"one API process; {repeat} requests per URL, time at the client (ms); seeded "
        f"{small:,} runs in {small_s:.1f} s, grown to {large:,} in {large_s:.1f} s"
    )
    head = f"{small:,} runs"
    tail = f"{large:,} runs"
    print(f"{'':<32} {head:>17} {tail:>17} {'ratio':>6}")
    print(f"{'':<32} {'median':>8} {'p99':>8} {'median':>8} {'p99':>8} {'':>6}")
    for label, _path in URLS:
        a, b = before[label], after[label]
        print(
            f"{label:<32} {a.median_ms:>8.1f} {a.p99_ms:>8.1f} {b.median_ms:>8.1f} "
            f"{b.p99_ms:>8.1f} {b.median_ms / a.median_ms:>6.2f}"
        )


if __name__ == "__main__":
    main()
