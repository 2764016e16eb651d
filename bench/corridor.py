"""The step corridor against plain Celery: a chain of ten trivial steps and a fan-out of
eight joined into one more, on the same two worker processes, measured in one run.

    python -m bench.corridor --runs 200 --rounds 3

For each shape and each system, per round:

- **steps/s** with ``--runs`` runs submitted at once (cairn: ``cairn worker
  --concurrency=2`` prefork and the scheduler; Celery: ``celery worker`` prefork 2 with
  the chain of :mod:`bench.workflows` or the chord of :mod:`bench.wait_workflows` — a
  chord needs a result backend, Redis beside the broker);
- **machine CPU ms per step**: every process on the machine (workers, scheduler,
  PostgreSQL, Redis, this bench) from ``/proc/stat``'s busy time over the burst, less
  what the idle machine spent in a window measured just before, divided by the steps;
- **serial ms per step**: ``--serial`` runs one after another, each waited for before
  the next is sent; the median run's wall time over its steps — the latency of a step
  with nothing else in flight;
- **fleet CPU ms per step**: the same, counted by process instead — the workers (main
  processes and pool children), cairn's scheduler, the PostgreSQL backends of cairn's
  database and the Redis server; not the bench, which submits and polls. Other work on
  the machine does not move it, as it moves the machine's figure (whose idle rate is
  measured before the burst), but the Redis server is shared: what others ask of it
  during the burst is counted;
- **commits per step** (cairn): PostgreSQL's write transactions over the burst, the
  transaction ids it handed out (:func:`bench.chain.commits`), less one per run for its
  submission, which is no step (a plain Celery chain's is a publish): what the steps
  themselves commit.

A chain counts 10 steps, a fan-out 9 (eight branches and the node after the join; the
chord's callback is its ninth). The table shows the median round, and the ratios to
Celery of that round. Needs PostgreSQL and Redis (``bash scripts/services.sh``); uses
Redis dbs 12-15. Run it on a quiet machine: the machine CPU figure is everyone's.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import psycopg
import redis

from bench.celery_baseline import CHAIN_MARKS, marks_waiter, send_run
from bench.chain import REDIS, ROOT, commits, fleet, spawn, stop, wait_finished
from bench.step_profile import backends, children, cpu_s

SHAPES = {"chain10": 10, "fanout8": 9}
CAIRN_WORKFLOWS = {"chain10": "bench_chain10", "fanout8": "bench_fanout8"}
IDLE_WINDOW_S = 2.0
BROKER_DB, MARKS_DB, BACKEND_DB = 12, 13, 14


@dataclass(frozen=True)
class Result:
    steps_per_s: float
    cpu_ms_per_step: float
    serial_ms_per_step: float
    commits_per_step: float | None
    fleet_cpu_ms_per_step: float


def busy_s() -> float:
    """Seconds of CPU the whole machine has spent busy since boot (all cores)."""
    with open("/proc/stat") as stat:
        fields = [int(value) for value in stat.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def idle_rate() -> float:
    """CPU seconds per second the machine spends with nothing of the bench running."""
    before, started = busy_s(), time.perf_counter()
    time.sleep(IDLE_WINDOW_S)
    return (busy_s() - before) / (time.perf_counter() - started)


@dataclass(frozen=True)
class Burst:
    seconds: float
    cpu_s: float
    fleet_cpu_s: float


def fleet_pids(workers: Sequence[int], others: Sequence[int], database: str | None) -> list[int]:
    """The processes whose CPU is the fleet's: each worker and its pool children, the
    ``others`` (a scheduler, the Redis server), the backends of ``database``."""
    pids = [*workers, *(child for worker in workers for child in children(worker)), *others]
    return pids + (backends(database) if database is not None else [])


def redis_pid() -> int:
    return int(redis.Redis.from_url(REDIS).info("server")["process_id"])


@contextmanager
def burst(background: float, pids: Callable[[], list[int]]) -> Iterator[list[Burst]]:
    """Time a block, the machine's CPU in it less ``background`` per second, and the CPU
    of the processes ``pids()`` names (before and after: a process that ends between is
    not counted)."""
    found: list[Burst] = []
    first = pids()
    before, fleet_before, started = busy_s(), [cpu_s(pid) for pid in first], time.perf_counter()
    yield found
    elapsed = time.perf_counter() - started
    machine = max(0.0, busy_s() - before - background * elapsed)
    spent = dict(zip(first, fleet_before, strict=True))
    fleet = sum(cpu_s(pid) - spent.get(pid, 0.0) for pid in set(first) | set(pids()))
    found.append(Burst(elapsed, machine, fleet))


def cairn_round(
    shape: str, runs: int, serial: int, workdir: Path, settings: dict[str, str] | None = None
) -> Result:
    steps = SHAPES[shape]
    workflow = CAIRN_WORKFLOWS[shape]
    with fleet(
        f"corridor_{shape}",
        workdir,
        workers=1,
        worker_args=["--concurrency=2", "--pool=prefork"],
        CAIRN_WORKFLOWS="bench.workflows,bench.wait_workflows",
        BENCH_MARKS_URL=f"{REDIS}/{MARKS_DB}",
        **(settings or {}),
    ) as opened:
        client = opened.client
        for _warm in range(4):
            client.wait(client.submit(workflow, {}), 60)
        serial_ids = []
        for _run in range(serial):
            serial_ids.append(str(client.submit(workflow, {})))
            client.wait(serial_ids[-1], 60, poll_s=0.005)
        per_run = [taken / steps for taken in run_durations_s(opened.url, serial_ids)]
        time.sleep(1.0)
        background = idle_rate()
        before = commits()
        workers = [process.pid for process in opened.workers]
        scheduler = [] if opened.scheduler is None else [opened.scheduler.pid]
        database = opened.url.rpartition("/")[2]
        pids = partial(fleet_pids, workers, [*scheduler, redis_pid()], database)
        with burst(background, pids) as measured:
            run_ids = [str(client.submit(workflow, {})) for _ in range(runs)]
            wait_finished(opened.url, run_ids)
        made = commits() - before
        for run_id in run_ids:
            assert client.get_run(run_id).status.value == "succeeded", run_id
    (taken,) = measured
    total = runs * steps
    return Result(
        total / taken.seconds,
        taken.cpu_s * 1000 / total,
        statistics.median(per_run) * 1000,
        (made - runs) / total,
        taken.fleet_cpu_s * 1000 / total,
    )


def run_durations_s(url: str, run_ids: list[str]) -> list[float]:
    """Each run's time from its submission to its end, by the database's records (not
    the bench's polling)."""
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT extract(epoch FROM finished_at - created_at) FROM runs WHERE id = ANY(%s)",
            (run_ids,),
        ).fetchall()
    return [float(row[0]) for row in rows]


def celery_round(shape: str, runs: int, serial: int, workdir: Path) -> Result:
    from bench.wait_workflows import CHORD_MARKS, chord_baseline  # noqa: PLC0415
    from bench.workflows import baseline  # noqa: PLC0415

    steps = SHAPES[shape]
    broker, marks_url, backend = (f"{REDIS}/{db}" for db in (BROKER_DB, MARKS_DB, BACKEND_DB))
    for url in (broker, marks_url, backend):
        redis.Redis.from_url(url).flushdb()
    app = baseline if shape == "chain10" else chord_baseline
    app.conf.update(broker_url=broker, result_backend=backend)
    key = CHAIN_MARKS if shape == "chain10" else CHORD_MARKS
    # A chain marks each step; a chord marks its callback only, once per run.
    marks_per_run = steps if shape == "chain10" else 1
    send = partial(send_run, fanout=shape != "chain10", steps=steps)

    module = (
        "bench.workflows:baseline" if shape == "chain10" else "bench.wait_workflows:chord_baseline"
    )
    env = {
        **os.environ,
        "BENCH_BROKER_URL": broker,
        "BENCH_BACKEND_URL": backend,
        "BENCH_MARKS_URL": marks_url,
        "PYTHONPATH": str(ROOT),
    }
    worker = spawn(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            module,
            "worker",
            "--concurrency=2",
            "--pool=prefork",
            "--loglevel=WARNING",
            "--without-gossip",
            "--without-mingle",
            f"--hostname=corridor-{shape}@%h",
        ],
        env,
        workdir / f"corridor-celery-{shape}.log",
    )
    marks = redis.Redis.from_url(marks_url)
    wait = marks_waiter(marks, key, worker.poll)
    try:
        for warm in range(4):
            send(-1 - warm)
            wait((warm + 1) * marks_per_run)
        per_run = []
        for run in range(serial):
            marks.delete(key)
            sent = time.time()
            send(-100 - run)
            wait(marks_per_run)
            last = max(float(raw.split()[-1]) for raw in marks.lrange(key, 0, -1))
            per_run.append((last - sent) / steps)
        marks.delete(key)
        time.sleep(1.0)
        background = idle_rate()
        pids = partial(fleet_pids, [worker.pid], [redis_pid()], None)
        with burst(background, pids) as measured:
            for run in range(runs):
                send(run)
            wait(runs * marks_per_run)
    finally:
        stop(worker)
    (taken,) = measured
    total = runs * steps
    return Result(
        total / taken.seconds,
        taken.cpu_s * 1000 / total,
        statistics.median(per_run) * 1000,
        None,
        taken.fleet_cpu_s * 1000 / total,
    )


# One round: Celery's result, cairn's, and cairn's with the --compare settings (if any).
Round = tuple[Result, ...]


def median_round(results: list[Round]) -> Round:
    """The round whose cairn/Celery steps/s ratio is the median one."""
    ordered = sorted(results, key=lambda pair: pair[1].steps_per_s / pair[0].steps_per_s)
    return ordered[len(ordered) // 2]


def report(shape: str, results: list[Round], compared: str = "") -> None:
    celery, *cairns = median_round(results)
    ratios = [r[1].steps_per_s / r[0].steps_per_s for r in results]
    print(f"\n{shape} ({SHAPES[shape]} steps a run), median of {len(results)} round(s)")
    print(
        f"{'':<14} {'steps/s':>9} {'x Celery':>9} {'CPU ms/step':>12} {'x Celery':>9} "
        f"{'serial ms/step':>15} {'- Celery':>9} {'commits/step':>13} "
        f"{'fleet CPU ms/step':>18} {'x Celery':>9}"
    )
    names = ["plain Celery", "cairn", f"cairn {compared}"]
    for name, figures in zip(names, (celery, *cairns), strict=False):
        commits_shown = (
            "-" if figures.commits_per_step is None else f"{figures.commits_per_step:.2f}"
        )
        print(
            f"{name:<14} {figures.steps_per_s:>9.0f} "
            f"{figures.steps_per_s / celery.steps_per_s:>8.2f}x "
            f"{figures.cpu_ms_per_step:>12.2f} "
            f"{figures.cpu_ms_per_step / max(celery.cpu_ms_per_step, 1e-9):>8.2f}x "
            f"{figures.serial_ms_per_step:>15.2f} "
            f"{figures.serial_ms_per_step - celery.serial_ms_per_step:>+8.2f} {commits_shown:>13} "
            f"{figures.fleet_cpu_ms_per_step:>18.2f} "
            f"{figures.fleet_cpu_ms_per_step / max(celery.fleet_cpu_ms_per_step, 1e-9):>8.2f}x"
        )
    print(f"steps/s ratio in each round: {', '.join(f'{r:.2f}x' for r in ratios)}")
    serial = [r[1].serial_ms_per_step - r[0].serial_ms_per_step for r in results]
    print(f"serial ms/step - Celery in each round: {', '.join(f'{d:+.2f}' for d in serial)}")
    if compared:
        against = [r[2].steps_per_s / r[0].steps_per_s for r in results]
        print(f"  with {compared}: {', '.join(f'{r:.2f}x' for r in against)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200, help="runs in each burst")
    parser.add_argument("--serial", type=int, default=20, help="runs one at a time, per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--shapes", default="chain10,fanout8")
    parser.add_argument(
        "--compare",
        action="append",
        default=[],
        metavar="CAIRN_X=V",
        help="also run cairn with these settings in each round (a row of its own; the two "
        "fleets take turns to go first), e.g. CAIRN_BRANCHES_PER_MESSAGE=1; PG_<NAME>=V sets "
        "its database's <name> (PG_SYNCHRONOUS_COMMIT=off: what waiting for the disk costs; "
        "not durable, a diagnostic)",
    )
    args = parser.parse_args()
    compare = dict(item.split("=", 1) for item in args.compare)
    workdir = Path(os.environ.get("BENCH_WORKDIR", "/tmp/cairn-bench"))
    workdir.mkdir(parents=True, exist_ok=True)
    print(f"load average before: {os.getloadavg()[0]:.2f}; {os.cpu_count()} cores")
    for shape in args.shapes.split(","):
        results: list[Round] = []
        for round_ in range(args.rounds):
            celery = celery_round(shape, args.runs, args.serial, workdir)
            if not compare:
                results.append((celery, cairn_round(shape, args.runs, args.serial, workdir)))
                continue
            # Two fleets of the same settings, one after the other, measured serial steps
            # up to a millisecond apart (fanout8): the two take turns to go first, so that
            # neither has the same place in every round.
            turns = [None, compare][:: 1 if round_ % 2 == 0 else -1]
            ran = {
                bool(settings): cairn_round(shape, args.runs, args.serial, workdir, settings)
                for settings in turns
            }
            results.append((celery, ran[False], ran[True]))
        report(shape, results, " ".join(args.compare))


if __name__ == "__main__":
    main()
