"""What one trivial step costs, counted: a chain of ten trivial steps on one ``cairn
worker`` process (prefork, one child unless ``--concurrency`` says more) and the
scheduler, on PostgreSQL and two Redis servers of the bench's own (the broker's and the
leases'), so that nothing else on the machine is in the counts.

    python -m bench.step_profile --runs 100 [--py-spy PATH] [--set CAIRN_X=value ...]

``--set`` passes settings to the fleet, e.g. ``--set CAIRN_CONTINUE_STEPS=false`` for
every step through the broker; ``--compare CAIRN_X=value`` profiles the fleet once with
the setting and once without, in that order, in the same invocation. ``--celery``
profiles the baseline instead — the same shape as a plain Celery chain or chord (that of
:mod:`bench.corridor`) on a ``celery worker`` with as many children — counted the same
way, process by process.

Prints, per step, over a burst of ``--runs`` runs submitted at once:

- PostgreSQL transactions: write transactions, exactly (transaction ids handed out),
  and read-only ones (a read is one statement, its own transaction with no id): all the
  run's database's backends report, less the writes — reported up to seconds late, so a
  little short; both less the scheduler's idle polling measured just before;
- Redis commands on each server by name (``INFO commandstats``), the broker's and the
  leases', less their idle rate;
- CPU per step of each process (the worker's parent and child, the scheduler, both
  Redis servers, the PostgreSQL backends of the run's database) from ``/proc``;
- with ``--py-spy``: where the worker child's CPU goes, by function (self and
  inclusive samples), sampled by py-spy for the burst;
- with ``--stages``: the pool children's CPU in each stage of a step, counted
  (:mod:`bench.stage_cpu`).
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import redis

from bench import stage_cpu
from bench.celery_baseline import CHAIN_MARKS, marks_waiter, send_run
from bench.chain import ROOT, admin, commits, fresh_database, spawn, stop, wait_finished
from bench.wait_workflows import CHORD_MARKS, FANOUT

IDLE_WINDOW_S = 3.0
INCLUSIVE_SHOWN = ("cairn.", "json.", "psycopg.connection", "redis.client", "sqlalchemy.engine")
STEPS = 10


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def redis_server(workdir: Path, name: str) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    port = _free_port()
    process = subprocess.Popen(
        [
            "redis-server",
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(workdir),
        ],
        stdout=open(workdir / f"{name}-redis.log", "wb"),  # noqa: SIM115 - the server's
        stderr=subprocess.STDOUT,
    )
    url = f"redis://127.0.0.1:{port}/0"
    client = redis.Redis.from_url(url)
    for _try in range(100):
        try:
            client.ping()
            break
        except redis.ConnectionError:
            time.sleep(0.05)
    try:
        yield url, process
    finally:
        process.terminate()
        process.wait()


def cpu_s(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rpartition(")")[2].split()
    except FileNotFoundError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as found:
            return [int(child) for child in found.read().split()]
    except FileNotFoundError:
        return []


def backends(database: str) -> list[int]:
    with admin() as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
            (database,),
        ).fetchall()
    return [int(row[0]) for row in rows]


def transactions(database: str) -> tuple[int, int]:
    """(write transactions so far, exact: :func:`bench.chain.commits`; all transactions
    of the run's database, as its backends have reported them — up to ten seconds late,
    so the read-only ones are counted a little short)."""
    with admin() as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        row = conn.execute(
            "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = %s",
            (database,),
        ).fetchone()
    assert row is not None
    writes = commits()
    return writes, int(row[0]) - writes


def commandstats(url: str) -> collections.Counter[str]:
    info: dict[str, Any] = redis.Redis.from_url(url).info("commandstats")
    return collections.Counter(
        {name.removeprefix("cmdstat_"): int(stats["calls"]) for name, stats in info.items()}
    )


class Meter:
    """Counts and CPU of the fleet between two readings."""

    def __init__(self, database: str, servers: dict[str, str], pids: dict[str, int]) -> None:
        self.database, self.servers, self.pids = database, servers, pids

    def read(self) -> dict[str, Any]:
        pids = dict(self.pids)
        pids.update({f"worker child {n}": c for n, c in enumerate(children(pids["worker"]))})
        cpu = {name: cpu_s(pid) for name, pid in pids.items()}
        cpu["postgres backends"] = sum(cpu_s(pid) for pid in backends(self.database))
        return {
            "time": time.perf_counter(),
            "xact": transactions(self.database),
            "redis": {name: commandstats(url) for name, url in self.servers.items()},
            "cpu": cpu,
        }


def delta(after: dict[str, Any], before: dict[str, Any]) -> dict[str, Any]:
    return {
        "seconds": after["time"] - before["time"],
        "commits": after["xact"][0] - before["xact"][0],
        "reads": after["xact"][1] - before["xact"][1],
        "redis": {name: after["redis"][name] - before["redis"][name] for name in after["redis"]},
        "cpu": {name: after["cpu"][name] - before["cpu"].get(name, 0.0) for name in after["cpu"]},
    }


def less_idle(burst: dict[str, Any], idle: dict[str, Any]) -> dict[str, Any]:
    """The burst's counts less what the idle fleet did in as long a time."""
    scale = burst["seconds"] / idle["seconds"]
    return {
        "commits": burst["commits"] - idle["commits"] * scale,
        "reads": burst["reads"] - idle["reads"] * scale,
        "redis": {
            name: {
                command: calls - idle["redis"][name].get(command, 0) * scale
                for command, calls in counts.items()
            }
            for name, counts in burst["redis"].items()
        },
        "cpu": {
            name: used - idle["cpu"].get(name, 0.0) * scale for name, used in burst["cpu"].items()
        },
    }


def report(measured: dict[str, Any], steps: int) -> None:
    print(f"\nper step (over {steps} steps, less the idle fleet):")
    print(f"  PostgreSQL commits   {measured['commits'] / steps:6.2f}")
    print(f"  PostgreSQL reads     {measured['reads'] / steps:6.2f}  (read-only transactions)")
    for name, counts in measured["redis"].items():
        total = sum(counts.values()) / steps
        shown = ", ".join(
            f"{command} {calls / steps:.2f}"
            for command, calls in sorted(counts.items(), key=lambda item: -item[1])
            if calls / steps >= 0.05
        )
        print(f"  Redis {name:<8} {total:6.2f} commands: {shown}")
    print("  CPU ms per step:")
    for name, used in sorted(measured["cpu"].items(), key=lambda item: -item[1]):
        print(f"    {name:<20} {used * 1000 / steps:6.3f}")
    print(f"    {'total':<20} {sum(measured['cpu'].values()) * 1000 / steps:6.3f}")


def spy_summary(raw: Path, top: int) -> None:
    """py-spy's raw (collapsed) stacks: samples by function, self and inclusive."""
    own: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        count = int(count_text)
        frames = [_short(frame) for frame in stack.split(";")]
        total += count
        own[frames[-1]] += count
        for frame in set(frames):
            inclusive[frame] += count
    print(f"\nworker child, {total} samples: by own time")
    for frame, count in own.most_common(top):
        print(f"  {100 * count / total:5.1f}%  {frame}")
    print("by inclusive time (cairn's frames, and where they spend it)")
    shown = [
        (frame, count)
        for frame, count in inclusive.most_common()
        if frame.startswith(INCLUSIVE_SHOWN) and count < 0.86 * total
    ]
    for frame, count in shown[: top * 2]:
        print(f"  {100 * count / total:5.1f}%  {frame}")


def _short(frame: str) -> str:
    """``function (path/to/module.py:line)`` as ``module.function``, lines dropped."""
    function, _, where = frame.partition(" (")
    path = where.rsplit(":", 1)[0]
    for marker in ("site-packages/", "/wt-corridor/", "/lib/python3"):
        if marker in path:
            path = path.split(marker, 1)[1]
    return f"{path.removesuffix('.py').replace('/', '.')}.{function}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--workflow", default="bench_chain10")
    parser.add_argument("--py-spy", dest="py_spy", default=shutil.which("py-spy"))
    parser.add_argument(
        "--spy-on",
        choices=("child", "main"),
        default="child",
        help="the worker's process py-spy samples: the pool child that runs steps, or the "
        "main process (Celery's consumer, which receives each message)",
    )
    parser.add_argument(
        "--concurrency",
        type=int,
        default=1,
        help="the worker's pool children; with more than one, siblings of a fan-out can "
        "complete at once and one loses its commit to the other (py-spy samples the first)",
    )
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--set", dest="settings", action="append", default=[])
    parser.add_argument("--compare", default=None)
    parser.add_argument(
        "--stages",
        action="store_true",
        help="also count the pool children's CPU in each stage of a step (bench.stage_cpu)",
    )
    parser.add_argument(
        "--celery",
        action="store_true",
        help="profile the baseline instead: the same shape as a plain Celery chain "
        f"(--workflow bench_chain10) or chord ({FANOUT}) on a celery worker of as many "
        "children, counted the same way",
    )
    args = parser.parse_args()
    fixed = dict(setting.split("=", 1) for setting in args.settings)
    variants = (
        [fixed] if args.compare is None else [fixed | dict([args.compare.split("=", 1)]), fixed]
    )
    for variant in variants:
        print(f"\n=== {' '.join(f'{k}={v}' for k, v in variant.items()) or 'defaults'}")
        profile(args, variant)


@dataclass
class Fleet:
    """What is profiled: its processes by name (``worker`` the one whose pool children
    run the steps), its Redis servers by name, and how a burst of runs is sent, waited
    for and counted in steps."""

    pids: dict[str, int]
    servers: dict[str, str]
    database: str
    send: Callable[[int], Any]
    wait: Callable[[Any], None]
    steps: Callable[[Any], int]


def profile(args: argparse.Namespace, settings: dict[str, str]) -> None:
    print(f"load average before: {os.getloadavg()[0]:.2f}; {os.cpu_count()} cores")
    workdir = Path(tempfile.mkdtemp(prefix="step-profile-"))
    database, url = fresh_database("step_profile")
    opened = _celery_fleet if args.celery else _cairn_fleet
    try:
        with (
            redis_server(workdir, "broker") as broker,
            redis_server(workdir, "leases") as leases,
            opened(Setup(args, settings, workdir, database, url, broker, leases)) as fleet,
        ):
            burst, idle, sent, raw = _measured(args, fleet, workdir)
            total = fleet.steps(sent)
    finally:
        with admin() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
    print(f"{args.runs} runs of {_shape(args)}: {total} steps in {burst['seconds']:.2f} s")
    report(less_idle(burst, idle), total)
    if args.stages and not args.celery:
        stage_cpu.report(workdir)
    if raw is not None and raw.exists():
        spy_summary(raw, args.top)
    print(f"\nlogs in {workdir}")


def _measured(
    args: argparse.Namespace, fleet: Fleet, workdir: Path
) -> tuple[dict[str, Any], dict[str, Any], Any, Path | None]:
    """The fleet idle, then a burst of ``--runs`` runs (py-spy sampling it if asked):
    the two deltas, what was sent, and py-spy's raw stacks."""
    meter = Meter(fleet.database, fleet.servers, fleet.pids)
    time.sleep(1.0)
    start = meter.read()
    time.sleep(IDLE_WINDOW_S)
    idle = delta(meter.read(), start)
    spy, raw = None, None
    if args.py_spy:
        raw = workdir / "spy.txt"
        worker = fleet.pids["worker"]
        spy = subprocess.Popen(
            [
                *(args.py_spy, "record", "--rate", "250"),
                *("--pid", str(children(worker)[0] if args.spy_on == "child" else worker)),
                *("--format", "raw", "--output", str(raw), "--nonblocking", "--gil"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=open(workdir / "spy.log", "wb"),  # noqa: SIM115
        )
        time.sleep(1.0)
    before = meter.read()
    sent = fleet.send(args.runs)
    fleet.wait(sent)
    burst = delta(meter.read(), before)
    if spy is not None:
        spy.send_signal(2)
        spy.wait(30)
    return burst, idle, sent, raw


def _shape(args: argparse.Namespace) -> str:
    if not args.celery:
        return str(args.workflow)
    return "a plain Celery " + ("chord" if args.workflow == FANOUT else "chain")


Server = tuple[str, "subprocess.Popen[bytes]"]


@dataclass(frozen=True)
class Setup:
    """What a fleet is started with: the options, settings, log folder, database and the
    two Redis servers (the broker's, and the leases' or the result backend's)."""

    args: argparse.Namespace
    settings: dict[str, str]
    workdir: Path
    database: str
    url: str
    broker: Server
    second: Server


@contextmanager
def _cairn_fleet(setup: Setup) -> Iterator[Fleet]:
    """One ``cairn worker`` (prefork, ``--concurrency`` children) and the scheduler."""
    from cairn.client import Client  # noqa: PLC0415
    from cairn.config import Settings  # noqa: PLC0415

    args, workdir, url, broker, leases = (
        setup.args,
        setup.workdir,
        setup.url,
        setup.broker,
        setup.second,
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAIRN_")}
    env.update(
        CAIRN_DATABASE_URL=url,
        CAIRN_BROKER_URL=broker[0],
        CAIRN_REDIS_URL=leases[0],
        CAIRN_WORKFLOWS="bench.workflows,bench.wait_workflows",
        CAIRN_LOG_LEVEL="WARNING",
        PYTHONPATH=str(ROOT),
    )
    if args.stages:  # each worker imports it, and counts its children's stages
        env["CAIRN_WORKFLOWS"] += ",bench.stage_cpu"
        env["BENCH_STAGES_DIR"] = str(workdir)
    env.update(setup.settings)  # --set may name any of the above
    command = [sys.executable, "-m", "cairn.cli", "worker"]
    worker = spawn(
        [*command, f"--concurrency={args.concurrency}", "--pool=prefork"],
        env,
        workdir / "worker.log",
    )
    scheduler = spawn(
        [sys.executable, "-m", "cairn.cli", "scheduler"], env, workdir / "scheduler.log"
    )
    client = Client(Settings.from_env({k: v for k, v in env.items() if k.startswith("CAIRN_")}))

    def send(runs: int) -> list[str]:
        return [str(client.submit(args.workflow, {})) for _ in range(runs)]

    def steps(run_ids: list[str]) -> int:
        with psycopg.connect(url) as conn:
            row = conn.execute(
                "SELECT count(*) FROM node_executions WHERE run_id = ANY(%s)", (run_ids,)
            ).fetchone()
        return int(row[0]) if row else 0

    try:
        for _warm in range(5):
            client.wait(client.submit(args.workflow, {}), 60)
        yield Fleet(
            {
                "worker": worker.pid,
                "scheduler": scheduler.pid,
                "redis broker": broker[1].pid,
                "redis leases": leases[1].pid,
            },
            {"broker": broker[0], "leases": leases[0]},
            setup.database,
            send,
            lambda run_ids: wait_finished(url, run_ids),
            steps,
        )
    finally:
        client.close()
        stop(scheduler)
        stop(worker)


@contextmanager
def _celery_fleet(setup: Setup) -> Iterator[Fleet]:
    """The baseline: one ``celery worker`` (prefork, ``--concurrency`` children) running
    the same shape as a plain Celery chain (:data:`bench.workflows.baseline`: each task
    notes its end in Redis) or chord (:data:`bench.wait_workflows.chord_baseline`: results
    in a Redis backend, the callback notes the run's end), JSON, late acks, prefetch 1."""
    from bench.wait_workflows import chord_baseline  # noqa: PLC0415
    from bench.workflows import baseline  # noqa: PLC0415

    args, workdir, broker, backend = setup.args, setup.workdir, setup.broker, setup.second
    fanout = args.workflow == FANOUT
    marks_url = backend[0].removesuffix("/0") + "/1"
    app = chord_baseline if fanout else baseline
    app.conf.update(broker_url=broker[0], result_backend=backend[0] if fanout else None)
    env = {
        **os.environ,
        "BENCH_BROKER_URL": broker[0],
        "BENCH_BACKEND_URL": backend[0],
        "BENCH_MARKS_URL": marks_url,
        "PYTHONPATH": str(ROOT),
    }
    module = "bench.wait_workflows:chord_baseline" if fanout else "bench.workflows:baseline"
    worker = spawn(
        [
            *(sys.executable, "-m", "celery", "-A", module, "worker", "--pool=prefork"),
            *(f"--concurrency={args.concurrency}", "--loglevel=WARNING"),
            *("--without-gossip", "--without-mingle", "--without-heartbeat"),
        ],
        env,
        workdir / "worker.log",
    )
    marks = redis.Redis.from_url(marks_url)
    key, per_run = (CHORD_MARKS, 1) if fanout else (CHAIN_MARKS, STEPS)
    marked = marks_waiter(marks, key, worker.poll)

    def send(runs: int) -> int:
        marks.delete(key)
        for run in range(runs):
            send_run(run, fanout=fanout, steps=STEPS)
        return runs

    def wait(runs: int) -> None:
        marked(runs * per_run)

    try:
        for _warm in range(5):
            wait(send(1))
        yield Fleet(
            {"worker": worker.pid, "redis broker": broker[1].pid, "redis backend": backend[1].pid},
            {"broker": broker[0], "backend": backend[0]},
            setup.database,
            send,
            wait,
            lambda runs: runs * (9 if fanout else STEPS),
        )
    finally:
        stop(worker)


if __name__ == "__main__":
    main()
