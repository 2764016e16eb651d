"""Throughput and cost of a 10-step chain: cairn on PostgreSQL + Redis + Celery vs a plain
Celery chain of the same ten trivial tasks, measured in the same run.

    python -m bench.chain --runs 200

Prints runs/s, steps/s, per-step latency p50/p99 and PostgreSQL commits per step (write
transactions, :func:`commits`, less one per run for its submission), for both, and the
ratios. Needs PostgreSQL and Redis (`bash scripts/services.sh`). Both systems get two
worker processes.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

import httpx
import psycopg
import redis
from celery import chain
from psycopg import sql

ROOT = Path(__file__).resolve().parents[1]
PG_ADMIN = os.environ.get("CAIRN_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/postgres")
REDIS = os.environ.get("CAIRN_TEST_REDIS", "redis://127.0.0.1:6379")
STEPS = 10


@dataclass
class Figures:
    name: str
    runs: int
    seconds: float
    step_latencies_s: list[float]
    commits: int | None = None

    @property
    def runs_per_s(self) -> float:
        return self.runs / self.seconds

    @property
    def steps_per_s(self) -> float:
        return self.runs * STEPS / self.seconds

    def percentile(self, q: float) -> float:
        ordered = sorted(self.step_latencies_s)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000

    def row(self) -> str:
        # Less each run's submission, which is no step: what the steps themselves commit.
        per_step = (
            None if self.commits is None else (self.commits - self.runs) / (self.runs * STEPS)
        )
        commits = "-" if per_step is None else f"{per_step:.2f}"
        return (
            f"{self.name:<22} {self.runs_per_s:>8.1f} {self.steps_per_s:>9.1f} "
            f"{self.percentile(0.5):>9.2f} {self.percentile(0.99):>9.2f} {commits:>14}"
        )


def admin() -> psycopg.Connection[Any]:
    return psycopg.connect(PG_ADMIN, autocommit=True)


def commits() -> int:
    """PostgreSQL's write transactions so far: the transaction ids it has handed out.

    Every transaction that writes (or locks a row) is given one when it first does,
    and only those flush the WAL; a read-only one takes none. The counter is the
    cluster's, exact the moment it is read — ``pg_stat_database.xact_commit`` is not: a
    busy backend reports its counts at most once a second and an idle one up to ten
    seconds late (PGSTAT_IDLE_INTERVAL), so a burst read a second after it ends loses a
    tenth to a fifth of its commits. The benches run alone on their PostgreSQL."""
    with admin() as conn:
        row = conn.execute("SELECT pg_snapshot_xmax(pg_current_snapshot())::text").fetchone()
        assert row is not None
        return int(row[0])


def fresh_database(prefix: str) -> tuple[str, str]:
    """A new, migrated PostgreSQL database for one benchmark: (name, URL)."""
    from cairn.store.database import make_engine, upgrade  # noqa: PLC0415

    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    with admin() as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = f"{PG_ADMIN.rpartition('/')[0]}/{name}"
    engine = make_engine(url)
    upgrade(engine)
    engine.dispose()
    return name, url


def cairn_env(url: str, *, broker_db: int, leases_db: int, **settings: str) -> dict[str, str]:
    """The environment of cairn processes on this database and two emptied Redis dbs."""
    for db in (broker_db, leases_db):
        redis.Redis.from_url(f"{REDIS}/{db}").flushdb()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAIRN_")}
    env.update(
        {
            "CAIRN_DATABASE_URL": url,
            "CAIRN_BROKER_URL": f"{REDIS}/{broker_db}",
            "CAIRN_REDIS_URL": f"{REDIS}/{leases_db}",
            "CAIRN_WORKFLOWS": "bench.workflows",
            "CAIRN_LOG_LEVEL": os.environ.get("BENCH_LOG_LEVEL", "WARNING"),
            "PYTHONPATH": str(ROOT),
            **settings,
        }
    )
    return env


def spawn(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        return subprocess.Popen(
            args, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


def api_ready(base_url: str, timeout_s: float = 60.0) -> None:
    """Wait until the ``cairn api`` at ``base_url`` answers ``/readyz``."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if httpx.get(f"{base_url}/readyz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError("the API did not start")
        time.sleep(0.2)


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@dataclass
class Fleet:
    """A benchmark's cairn: its workers and scheduler as processes, a client beside them."""

    client: Any  # cairn.client.Client
    url: str  # its database's
    workers: list[subprocess.Popen[bytes]]
    scheduler: subprocess.Popen[bytes] | None = None


@contextmanager
def fleet(
    prefix: str,
    workdir: Path,
    *,
    workers: int,
    worker_args: Sequence[str],
    **settings: str,
) -> Iterator[Fleet]:
    """A fresh database and Redis dbs 12 and 13, ``workers`` ``cairn worker`` processes
    (``worker_args``: its options) and a scheduler, logging to ``workdir/<prefix>-*``;
    everything stopped and the database dropped afterwards. A setting named ``PG_<NAME>``
    is the database's (``ALTER DATABASE ... SET <name>``), for its sessions alone — e.g.
    ``PG_SYNCHRONOUS_COMMIT=off``, to show what waiting for the disk costs (not durable:
    a diagnostic, never a way to run cairn)."""
    from cairn.client import Client  # noqa: PLC0415
    from cairn.config import Settings  # noqa: PLC0415

    database, url = fresh_database(prefix)
    for key in [key for key in settings if key.startswith("PG_")]:
        name, value = key.removeprefix("PG_").lower(), settings.pop(key)
        with admin() as conn:
            conn.execute(
                sql.SQL("ALTER DATABASE {} SET {} = {}").format(
                    sql.Identifier(database), sql.Identifier(name), sql.Literal(value)
                )
            )
    env = cairn_env(url, broker_db=12, leases_db=13, **settings)
    processes = [
        spawn(
            [sys.executable, "-m", "cairn.cli", "worker", *worker_args],
            env,
            workdir / f"{prefix}-worker-{n}.log",
        )
        for n in range(workers)
    ]
    scheduler = spawn(
        [sys.executable, "-m", "cairn.cli", "scheduler"], env, workdir / f"{prefix}-sch.log"
    )
    client = Client(Settings.from_env({k: v for k, v in env.items() if k.startswith("CAIRN_")}))
    try:
        yield Fleet(client, url, processes, scheduler)
    finally:
        client.close()
        stop(scheduler)
        for process in processes:
            stop(process)
        with admin() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')


def bench_cairn(
    runs: int,
    concurrency: int,
    workdir: Path,
    pool: str = "prefork",
    processes: int = 1,
    *,
    redis_leases: bool = True,
    workflow: str = "bench_chain10",
) -> Figures:
    from cairn.client import Client  # noqa: PLC0415
    from cairn.config import Settings  # noqa: PLC0415

    database, url = fresh_database("cairn_bench")
    env = cairn_env(url, broker_db=14, leases_db=15)
    if not redis_leases:  # each process its own in-memory leases: the fleet is unguarded
        del env["CAIRN_REDIS_URL"]
    settings = Settings.from_env({k: v for k, v in env.items() if k.startswith("CAIRN_")})
    workers = [
        spawn(
            [
                sys.executable,
                "-m",
                "cairn.cli",
                "worker",
                f"--concurrency={concurrency}",
                f"--pool={pool}",
            ],
            env,
            workdir / f"cairn-worker-{index}.log",
        )
        for index in range(processes)
    ]
    scheduler = spawn(
        [sys.executable, "-m", "cairn.cli", "scheduler"], env, workdir / "cairn-scheduler.log"
    )
    client = Client(settings)
    try:
        warm = client.submit(workflow, {})
        client.wait(warm, 60)
        time.sleep(1.5)
        before = commits()
        started = time.perf_counter()
        run_ids = [client.submit(workflow, {}) for _ in range(runs)]
        wait_finished(url, run_ids)
        elapsed = time.perf_counter() - started
        for run_id in run_ids:
            assert client.get_run(run_id).status.value == "succeeded", run_id
        after = commits()
        latencies = []
        for run_id in run_ids:
            times = [event["at"] for event in client.events(run_id)]
            latencies.extend(b - a for a, b in pairwise(times))
    finally:
        client.close()
        for worker in workers:
            stop(worker)
        stop(scheduler)
        with admin() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
    name = "cairn (durable)" if redis_leases else "cairn, no Redis leases"
    name = {
        "bench_chain10_ephemeral": "cairn, half ephemeral",
        "bench_chain10_untimed": "cairn, no node timeouts",
    }.get(workflow, name)
    return Figures(name, runs, elapsed, latencies, after - before)


def bench_celery(
    runs: int, concurrency: int, workdir: Path, pool: str = "prefork", processes: int = 1
) -> Figures:
    broker, marks_url = f"{REDIS}/12", f"{REDIS}/13"
    for url in (broker, marks_url):
        redis.Redis.from_url(url).flushdb()
    env = {
        **os.environ,
        "BENCH_BROKER_URL": broker,
        "BENCH_MARKS_URL": marks_url,
        "PYTHONPATH": str(ROOT),
    }
    os.environ.update(BENCH_BROKER_URL=broker, BENCH_MARKS_URL=marks_url)
    from bench.workflows import baseline, step  # noqa: PLC0415

    baseline.conf.broker_url = broker
    workers = [
        spawn(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "bench.workflows:baseline",
                "worker",
                f"--concurrency={concurrency}",
                f"--pool={pool}",
                "--loglevel=WARNING",
                "--without-gossip",
                "--without-mingle",
                f"--hostname=baseline{index}@%h",
            ],
            env,
            workdir / f"celery-worker-{index}.log",
        )
        for index in range(processes)
    ]
    marks = redis.Redis.from_url(marks_url)
    try:
        chain(step.si(-1, i) for i in range(STEPS)).apply_async()
        _wait_marks(marks, STEPS)
        marks.delete("bench:marks")
        started = time.perf_counter()
        submitted = {}
        for run in range(runs):
            submitted[run] = time.time()
            chain(step.si(run, i) for i in range(STEPS)).apply_async()
        _wait_marks(marks, runs * STEPS)
        elapsed = time.perf_counter() - started
        finished: dict[int, list[float]] = defaultdict(list)
        raws: list[bytes] = marks.lrange("bench:marks", 0, -1)  # type: ignore[assignment]
        for raw in raws:
            run_text, _index, at = raw.decode().split()
            finished[int(run_text)].append(float(at))
        latencies: list[float] = []
        for run, marks_of_run in finished.items():
            ordered = sorted([submitted[run], *marks_of_run])
            latencies.extend(b - a for a, b in pairwise(ordered))
    finally:
        for worker in workers:
            stop(worker)
    return Figures("plain Celery chain", runs, elapsed, latencies)


def wait_finished(url: str, run_ids: list[str], timeout_s: float = 600) -> None:
    """One cheap query a tenth of a second: the bench must not load the machine it measures."""
    deadline = time.monotonic() + timeout_s
    with psycopg.connect(url) as conn:  # each poll ends in a rollback: not a commit
        while True:
            row = conn.execute(
                "SELECT count(*) FROM runs WHERE id = ANY(%s) AND finished_at IS NULL", (run_ids,)
            ).fetchone()
            conn.rollback()
            if row is not None and row[0] == 0:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"{row} runs unfinished after {timeout_s} s")
            time.sleep(0.1)


def _wait_marks(marks: redis.Redis, count: int, timeout_s: float = 600) -> None:
    deadline = time.monotonic() + timeout_s
    while marks.llen("bench:marks") < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {marks.llen('bench:marks')} of {count} steps finished")
        time.sleep(0.01)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument(
        "--concurrency", type=int, default=2, help="slots per worker process (prefork: processes)"
    )
    parser.add_argument("--pool", choices=["prefork", "threads"], default="prefork")
    parser.add_argument(
        "--processes",
        type=int,
        default=1,
        help="worker processes (with --pool threads: two is the fair setup)",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="alternate the two systems this many times; the ratio is the median round's "
        "(a shared machine drifts: one round of each can differ by a third)",
    )
    parser.add_argument(
        "--lease-cost",
        action="store_true",
        help="also run cairn with in-process leases instead of Redis, to show what the "
        "fleet's leases and heartbeats cost",
    )
    parser.add_argument(
        "--untimed",
        action="store_true",
        help="also run the chain with node_timeout: none, to show what arming and disarming "
        "each step's default timeout costs",
    )
    parser.add_argument(
        "--ephemeral",
        action="store_true",
        help="also run the chain with every other step persist: ephemeral, to show what "
        "skipping those steps' own commits saves",
    )
    args = parser.parse_args()
    workdir = Path(os.environ.get("BENCH_WORKDIR", "/tmp/cairn-bench"))
    workdir.mkdir(parents=True, exist_ok=True)
    setup = (args.runs, args.concurrency, workdir, args.pool, args.processes)
    print(
        f"{args.runs} runs x {STEPS} trivial steps; both systems on {args.processes} "
        f"worker process(es), pool {args.pool}, {args.concurrency} slot(s) each; "
        f"{args.rounds} round(s)\n"
    )
    print(f"{'':<22} {'runs/s':>8} {'steps/s':>9} {'p50 ms':>9} {'p99 ms':>9} {'commits/step':>14}")
    ratios: list[float] = []
    lease_costs: list[float] = []
    ephemeral_gains: list[float] = []
    timeout_costs: list[float] = []
    for _round in range(args.rounds):
        celery_figures = bench_celery(*setup)
        cairn_figures = bench_cairn(*setup)
        print(celery_figures.row())
        print(cairn_figures.row())
        ratios.append(cairn_figures.steps_per_s / celery_figures.steps_per_s)
        print(f"{'  ratio':<22} {ratios[-1]:>18.2f}x")
        if args.lease_cost:
            unleased = bench_cairn(*setup, redis_leases=False)
            print(unleased.row())
            lease_costs.append(1 - cairn_figures.steps_per_s / unleased.steps_per_s)
            print(f"{'  Redis leases cost':<22} {lease_costs[-1] * 100:>17.0f}%")
        if args.untimed:
            untimed = bench_cairn(*setup, workflow="bench_chain10_untimed")
            print(untimed.row())
            timeout_costs.append(1 - cairn_figures.steps_per_s / untimed.steps_per_s)
            print(f"{'  timeouts cost':<22} {timeout_costs[-1] * 100:>17.0f}%")
        if args.ephemeral:
            half = bench_cairn(*setup, workflow="bench_chain10_ephemeral")
            print(half.row())
            ephemeral_gains.append(half.steps_per_s / cairn_figures.steps_per_s)
            print(f"{'  vs all durable':<22} {ephemeral_gains[-1]:>18.2f}x")
    print(
        f"\ncairn / plain Celery steps/s, median of {len(ratios)}: "
        f"{statistics.median(ratios):.2f}x  (range {min(ratios):.2f}-{max(ratios):.2f}; "
        f"target >= 0.5x; commits/step target <= 1.5)"
    )
    if ephemeral_gains:
        print(
            f"half the steps ephemeral, steps/s against all durable, median of "
            f"{len(ephemeral_gains)}: {statistics.median(ephemeral_gains):.2f}x"
        )
    if timeout_costs:
        print(
            f"default node timeouts (a timer armed and disarmed per step) cost, median of "
            f"{len(timeout_costs)}: {statistics.median(timeout_costs) * 100:.0f}% of steps/s"
        )
    if lease_costs:
        print(
            f"Redis leases and heartbeats cost, median of {len(lease_costs)}: "
            f"{statistics.median(lease_costs) * 100:.0f}% of steps/s (target <= 15%)"
        )


if __name__ == "__main__":
    main()
