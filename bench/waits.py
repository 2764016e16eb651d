"""Waits, timers and joins: what parked runs cost the fleet, how fast a signal moves a run
on, how late durable timers fire, and a fan-out of eight joined against a Celery chord.

    python -m bench.waits --waiting 10000 --timers 10000 --signals 500 --fanout-runs 300

Real PostgreSQL and Redis (`bash scripts/services.sh`); every run gets a fresh, migrated
database and its own processes: one `cairn worker` (prefork, --concurrency slots) and the
scheduler(s), started as subprocesses and stopped, with the database dropped, on exit
(Ctrl-C and SIGTERM included). It empties Redis databases 5-9 of CAIRN_TEST_REDIS; like
the other benchmarks' they are also the integration tests': not beside `make test`.

1. **Parked runs.** The same fleet is watched over a window twice: empty, then with N
   runs parked in a `wait` node (1 h timeout). Per process (worker parent, its prefork
   children, scheduler): RSS, PSS and CPU % of one core, from /proc/<pid>/stat and
   /proc/<pid>/smaps_rollup; and whether any worker did work in the window (node
   executions dispatched or finished, events written, messages queued). Target: no
   worker busy, scheduler under 5 % of a core.
2. **Signal latency.** Signals to S of the parked runs (Client.signal, open loop at
   --signal-rate), each measured from just before the call to (a) the start of the next
   node's handler on a worker (it notes time.time() in Redis: one clock, this host's)
   and (b) that node's result recorded: the run's finished_at, the completion's time by
   PostgreSQL's clock (the same host's), carried forward by the worker to its commit.
3. **Timer lateness.** M runs whose wait times out straight into an end node (the
   scheduler's work only), submitted so that their timers come due spread evenly over
   --timer-window seconds, all pending before the first is due. Lateness is the fired
   TimerFired event's time minus the due time its ArmTimer recorded (both from the run's
   event log, both PostgreSQL's clock). Once per scheduler count in --schedulers.
   Target: p99 under 1 s.
4. **Fan-out 8 + join.** Runs/s of `parallel` (8 trivial branches, policy all) then one
   trivial node, vs a plain Celery chord of the same shape (8 trivial tasks + callback;
   broker settings as bench/chain.py's baseline, plus the Redis result backend a chord
   needs), alternated --rounds times on the same worker shape; median ratio.
"""

from __future__ import annotations

import argparse
import itertools
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, TypeVar

import psycopg
import redis
from celery import chord

from bench.chain import REDIS, admin, cairn_env, fresh_database, spawn, stop, wait_finished
from bench.wait_workflows import (
    AFTER_SIGNAL_MARKS,
    BRANCHES,
    CHORD_MARKS,
    FANOUT,
    PARKED,
    TIMER,
    timer_workflow,
)
from cairn.workers.fairness import PRIORITY_STEPS, list_name

# Redis databases of this bench (bench/chain.py takes 12-15, recovery 10-11).
BROKER_DB, LEASES_DB, MARKS_DB = 8, 9, 5
CHORD_BROKER_DB, CHORD_BACKEND_DB = 6, 7
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
SCHEDULER_CPU_TARGET = 5.0  # % of one core
TIMER_P99_TARGET_S = 1.0

T = TypeVar("T")


# Runs/s assumed when no runs were parked (and so the submit rate was not measured): it
# only sets how far ahead the timers are scheduled.
ASSUMED_SUBMIT_RATE = 300.0


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _stop_on_sigterm(_signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt("SIGTERM")


# -- processes and what they cost ----------------------------------------------------------


def _proc_stat(pid: int) -> tuple[int, int] | None:
    """(parent pid, user + system CPU in clock ticks) of a live process."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()  # after "pid (comm) "
    return int(fields[1]), int(fields[11]) + int(fields[12])


def _status_kib(pid: int, path: str, key: str) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/{path}").read_text().splitlines():
            if line.startswith(key):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def _children(pid: int) -> list[int]:
    """Every descendant of ``pid`` (prefork pool processes), oldest pid first."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            stat = _proc_stat(int(entry.name))
            if stat is not None:
                parents.setdefault(stat[0], []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in sorted(parents.get(todo.pop(), [])):
            found.append(child)
            todo.append(child)
    return sorted(found)


@dataclass
class Watched:
    label: str
    pid: int
    fleet: bool = True  # part of the cairn fleet (not a shared service)


@dataclass
class Usage:
    label: str
    pids: list[int]
    rss_kib: int
    pss_kib: int
    cpu_percent: float
    fleet: bool


def measure(watched: Sequence[Watched], window_s: float) -> list[Usage]:
    """CPU % of one core over the window and memory at its end, per watched entry (a
    service row may stand for several pids: give them the same label)."""
    before = {w.pid: _proc_stat(w.pid) for w in watched}
    started = time.monotonic()
    time.sleep(window_s)
    elapsed = time.monotonic() - started
    rows: dict[str, Usage] = {}
    for w in watched:
        first, last = before[w.pid], _proc_stat(w.pid)
        ticks = (last[1] - first[1]) if first is not None and last is not None else 0
        row = rows.setdefault(w.label, Usage(w.label, [], 0, 0, 0.0, w.fleet))
        row.pids.append(w.pid)
        row.rss_kib += _status_kib(w.pid, "status", "VmRSS:") or 0
        row.pss_kib += _status_kib(w.pid, "smaps_rollup", "Pss:") or 0
        row.cpu_percent += 100.0 * ticks / CLOCK_TICKS / elapsed
    return list(rows.values())


# -- the fleet -----------------------------------------------------------------------------


@dataclass
class Fleet:
    """A fresh database and the cairn processes on it; everything is undone by
    :meth:`close` (registered on an ExitStack, so also on Ctrl-C and errors)."""

    workdir: Path
    prefix: str
    concurrency: int
    scheduler_interval: float | None
    database: str = ""
    url: str = ""
    env: dict[str, str] = field(default_factory=dict)
    workers: list[subprocess.Popen[bytes]] = field(default_factory=list)
    schedulers: list[subprocess.Popen[bytes]] = field(default_factory=list)
    client: Any = None

    def open(self, stack: ExitStack) -> Fleet:
        from cairn.client import Client  # noqa: PLC0415
        from cairn.config import Settings  # noqa: PLC0415

        self.database, self.url = fresh_database(self.prefix)
        stack.callback(self.close)
        extra = {
            "BENCH_MARKS_URL": f"{REDIS}/{MARKS_DB}",
            "CAIRN_WORKFLOWS": "bench.wait_workflows",
        }
        if self.scheduler_interval is not None:
            extra["CAIRN_SCHEDULER_INTERVAL"] = str(self.scheduler_interval)
        self.env = cairn_env(self.url, broker_db=BROKER_DB, leases_db=LEASES_DB, **extra)
        redis.Redis.from_url(f"{REDIS}/{MARKS_DB}").flushdb()
        settings = Settings.from_env({k: v for k, v in self.env.items() if k.startswith("CAIRN_")})
        self.client = Client(settings)
        self.client.runtime  # noqa: B018 - registers the workflows before any process starts
        self.workers.append(
            spawn(
                [
                    sys.executable,
                    "-m",
                    "cairn.cli",
                    "worker",
                    f"--concurrency={self.concurrency}",
                    "--pool=prefork",
                ],
                self.env,
                self.workdir / f"{self.prefix}-worker.log",
            )
        )
        self.add_scheduler()
        return self

    def add_scheduler(self) -> None:
        index = len(self.schedulers) + 1
        self.schedulers.append(
            spawn(
                [sys.executable, "-m", "cairn.cli", "scheduler"],
                self.env,
                self.workdir / f"{self.prefix}-scheduler-{index}.log",
            )
        )

    def remove_scheduler(self) -> None:
        stop(self.schedulers.pop())

    def close(self) -> None:
        if self.client is not None:
            self.client.close()
            self.client = None
        for process in [*self.workers, *self.schedulers]:
            stop(process)
        self.workers.clear()
        self.schedulers.clear()
        if self.database:
            with admin() as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{self.database}" WITH (FORCE)')
            self.database = ""

    def check_alive(self) -> None:
        for process in [*self.workers, *self.schedulers]:
            if process.poll() is not None:
                raise RuntimeError(
                    f"process {process.args!r} exited with {process.returncode}; "
                    f"see its log in {self.workdir}"
                )

    def wait_ready(self, timeout_s: float = 60) -> None:
        """Workers consume (a fan-out run goes through), and every pool process has
        built its runtime, so that nothing is warming up in a measurement window."""
        for _ in range(3 * self.concurrency):
            run_id = self.client.submit(FANOUT, {})
            self.client.wait(run_id, timeout_s)

    def watched(self, *, services: bool) -> list[Watched]:
        rows: list[Watched] = []
        for worker in self.workers:
            rows.append(Watched("worker (consumer)", worker.pid))
            rows.extend(
                Watched(f"  worker pool process {n}", pid)
                for n, pid in enumerate(_children(worker.pid), 1)
            )
        for n, scheduler in enumerate(self.schedulers, 1):
            rows.append(Watched(f"scheduler {n}", scheduler.pid))
            rows.extend(Watched(f"  scheduler {n} child", pid) for pid in _children(scheduler.pid))
        if services:
            with psycopg.connect(self.url) as conn:
                backends = [
                    pid
                    for (pid,) in conn.execute(
                        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                        "AND pid <> pg_backend_pid()"
                    )
                ]
            rows.extend(Watched("PostgreSQL backends", pid, fleet=False) for pid in backends)
            server = redis.Redis.from_url(REDIS).info("server")
            rows.append(Watched("Redis server", int(server["process_id"]), fleet=False))
        return rows


@dataclass
class Activity:
    """What the workers did in a window, from the database and the broker."""

    executions: int
    events: int
    queued: int

    @property
    def busy(self) -> bool:
        return bool(self.executions or self.events or self.queued)


def db_now(url: str) -> float:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT extract(epoch FROM clock_timestamp())::float8").fetchone()
        assert row is not None
        return float(row[0])


def activity(url: str, since: float, queue: str = "cairn") -> Activity:
    with psycopg.connect(url) as conn:
        executions = conn.execute(
            "SELECT count(*) FROM node_executions WHERE dispatched_at >= to_timestamp(%s) "
            "OR finished_at >= to_timestamp(%s)",
            (since, since),
        ).fetchone()
        events = conn.execute("SELECT count(*) FROM events WHERE at >= %s", (since,)).fetchone()
    assert executions is not None and events is not None
    broker = redis.Redis.from_url(f"{REDIS}/{BROKER_DB}")  # a list per priority level
    queued = sum(int(broker.llen(list_name(queue, step))) for step in PRIORITY_STEPS)
    return Activity(int(executions[0]), int(events[0]), queued)


# -- submitting in parallel ----------------------------------------------------------------


def in_threads(count: int, threads: int, one: Callable[[int], T]) -> list[T]:
    """``one(i)`` for i in 0..count-1, taken in order by ``threads`` threads; stops early
    (and re-raises) on the first error or a Ctrl-C."""
    results: list[T | None] = [None] * count
    taken = itertools.count()
    lock = threading.Lock()
    failed = threading.Event()
    errors: list[BaseException] = []

    def loop() -> None:
        while not failed.is_set():
            with lock:
                index = next(taken)
            if index >= count:
                return
            try:
                results[index] = one(index)
            except BaseException as error:
                errors.append(error)
                failed.set()

    workers = [threading.Thread(target=loop, daemon=True) for _ in range(threads)]
    for worker in workers:
        worker.start()
    try:
        for worker in workers:
            while worker.is_alive():
                worker.join(0.2)
    finally:
        failed.set()
        for worker in workers:
            worker.join()
    if errors:
        raise errors[0]
    return [r for r in results if r is not None]


# -- 1. parked runs ------------------------------------------------------------------------


@dataclass
class Parked:
    run_ids: list[str]
    submit_rate: float  # runs/s
    met: bool


def bench_parked(fleet: Fleet, waiting: int, window_s: float, threads: int) -> Parked:
    """Print the fleet's cost empty and with ``waiting`` parked runs."""
    print(f"1. {waiting} runs parked in a wait node: the fleet over {window_s:g} s windows")
    since = db_now(fleet.url)
    empty = measure(fleet.watched(services=True), window_s)
    empty_activity = activity(fleet.url, since)

    started = time.perf_counter()
    run_ids = in_threads(waiting, threads, lambda _i: str(fleet.client.submit(PARKED, {})))
    submit_s = time.perf_counter() - started
    with psycopg.connect(fleet.url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM runs WHERE workflow = %s AND status = 'waiting'", (PARKED,)
        ).fetchone()
    assert row is not None and row[0] == waiting, f"{row} of {waiting} runs waiting"
    rate = waiting / submit_s
    print(
        f"   submitted {waiting} runs in {submit_s:.1f} s ({rate:.0f}/s, {threads} threads); "
        f"all {row[0]} waiting"
    )
    fleet.check_alive()
    time.sleep(2)  # let the submissions' last writes settle before the window
    since = db_now(fleet.url)
    parked = measure(fleet.watched(services=True), window_s)
    parked_activity = activity(fleet.url, since)
    fleet.check_alive()

    print(
        f"\n   {'':<28}{'':>12}  {'RSS MiB':>15}  {'PSS MiB':>15}  {'CPU % of a core':>15}\n"
        f"   {'process':<28}{'pids':>12}  {'empty':>7}{'parked':>8}  {'empty':>7}{'parked':>8}"
        f"  {'empty':>7}{'parked':>8}"
    )
    empty_by_label = {u.label: u for u in empty}
    for usage in parked:
        before = empty_by_label.get(usage.label)
        pids = (
            ",".join(map(str, usage.pids)) if len(usage.pids) == 1 else f"{len(usage.pids)} procs"
        )
        print(f"   {usage.label:<28}{pids:>12}  {_columns(before, usage)}")
    print(f"   {'fleet total':<28}{'':>12}  {_columns(_total(empty), _total(parked))}")
    for label, act in (("empty", empty_activity), ("parked", parked_activity)):
        print(
            f"   worker activity in the {label} window: {act.executions} node executions "
            f"dispatched or finished, {act.events} events written, {act.queued} messages "
            f"queued -> {'BUSY' if act.busy else 'no worker busy'}"
        )
    scheduler_cpu = max(u.cpu_percent for u in parked if u.label.startswith("scheduler"))
    met = not parked_activity.busy and scheduler_cpu < SCHEDULER_CPU_TARGET
    print(
        f"   target: no worker busy, scheduler < {SCHEDULER_CPU_TARGET:g} % of a core -> "
        f"scheduler {scheduler_cpu:.2f} %, {'met' if met else 'MISSED'}\n"
    )
    return Parked(run_ids, rate, met)


def _total(usages: Sequence[Usage]) -> Usage:
    fleet = [u for u in usages if u.fleet]
    return Usage(
        "fleet total",
        [pid for u in fleet for pid in u.pids],
        sum(u.rss_kib for u in fleet),
        sum(u.pss_kib for u in fleet),
        sum(u.cpu_percent for u in fleet),
        True,
    )


def _columns(empty: Usage | None, parked: Usage) -> str:
    nan = float("nan")
    return (
        f"{(empty.rss_kib / 1024 if empty else nan):>7.1f}{parked.rss_kib / 1024:>8.1f}  "
        f"{(empty.pss_kib / 1024 if empty else nan):>7.1f}{parked.pss_kib / 1024:>8.1f}  "
        f"{(empty.cpu_percent if empty else nan):>7.2f}{parked.cpu_percent:>8.2f}"
    )


# -- 2. signal latency ---------------------------------------------------------------------


def bench_signals(fleet: Fleet, run_ids: Sequence[str], rate: float) -> None:
    print(
        f"2. signal -> next node: {len(run_ids)} signals to parked runs, one every "
        f"{1000 / rate:.0f} ms (open loop)"
    )
    marks = redis.Redis.from_url(f"{REDIS}/{MARKS_DB}")
    marks.delete(AFTER_SIGNAL_MARKS)
    sent: dict[str, float] = {}
    call_s: list[float] = []
    started = time.monotonic()
    for index, run_id in enumerate(run_ids):
        delay = started + index / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        at = time.time()
        fleet.client.signal(run_id, "go", actor="bench")
        call_s.append(time.time() - at)
        sent[run_id] = at
    deadline = time.monotonic() + 120
    while marks.llen(AFTER_SIGNAL_MARKS) < len(run_ids):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{marks.llen(AFTER_SIGNAL_MARKS)} of {len(run_ids)} nodes ran")
        time.sleep(0.05)
    wait_finished(fleet.url, list(run_ids), timeout_s=120)
    started_at: dict[str, float] = {}
    raws: list[bytes] = marks.lrange(AFTER_SIGNAL_MARKS, 0, -1)  # type: ignore[assignment]
    for raw in raws:
        run_id, at_text = raw.decode().split()
        started_at.setdefault(run_id, float(at_text))  # a redelivery would note a second
    with psycopg.connect(fleet.url) as conn:
        finished: dict[str, float] = dict(
            conn.execute(
                "SELECT id, extract(epoch FROM finished_at)::float8 FROM runs "
                "WHERE id = ANY(%s) AND status = 'succeeded'",
                (list(run_ids),),
            ).fetchall()
        )
    assert len(finished) == len(run_ids), f"{len(finished)} of {len(run_ids)} runs succeeded"
    to_start = [(started_at[r] - sent[r]) * 1000 for r in run_ids]
    to_commit = [(finished[r] - sent[r]) * 1000 for r in run_ids]
    print(f"   {'from the signal call to':<44}{'p50 ms':>8}{'p99 ms':>8}{'max ms':>8}")
    for label, values in (
        ("the signal call returned", [c * 1000 for c in call_s]),
        ("the next node's handler started (worker)", to_start),
        ("its result recorded (the run's finished_at)", to_commit),
    ):
        print(
            f"   {label:<44}{percentile(values, 0.5):>8.1f}{percentile(values, 0.99):>8.1f}"
            f"{max(values):>8.1f}"
        )
    print()


# -- 3. timer lateness ---------------------------------------------------------------------


def bench_timers(
    fleet: Fleet, timers: int, window_s: float, submit_rate: float, threads: int
) -> bool:
    """``timers`` runs whose waits come due evenly over ``window_s``, starting once all are
    submitted; returns whether p99 lateness met the target."""
    schedulers = len(fleet.schedulers)
    submit_s = timers / submit_rate
    lead = 1.3 * submit_s + 5.0  # the first timer comes due after the last submission
    registered: set[int] = set()
    lock = threading.Lock()
    origin = time.time()

    def submit(index: int) -> str:
        due = origin + lead + window_s * index / timers
        timeout_ds = max(10, round((due - time.time()) * 10))
        with lock:
            if timeout_ds not in registered:
                fleet.client.register(timer_workflow(timeout_ds))
                registered.add(timeout_ds)
        return str(fleet.client.submit(TIMER, {}, version=timeout_ds))

    run_ids = in_threads(timers, threads, submit)
    submitted = time.time()
    scheduler_rows = [w for w in fleet.watched(services=False) if w.label.startswith("sched")]
    first_due = origin + lead
    print(
        f"   {schedulers} scheduler(s): {timers} runs submitted in {submitted - origin:.1f} s "
        f"({len(registered)} timeout versions); timers due from {first_due - submitted:+.1f} s "
        f"to {first_due + window_s - submitted:+.1f} s after the last submission"
    )
    # The scheduler's CPU while the timers come due (the window plus 5 s to catch up).
    time.sleep(max(0.0, first_due - time.time()))
    usage = measure(scheduler_rows, window_s + 5)
    wait_finished(fleet.url, run_ids, timeout_s=300)
    fleet.check_alive()
    with psycopg.connect(fleet.url) as conn:
        rows = conn.execute(
            """
            SELECT s.run_id, (c ->> 'due_at')::float8, f.at
            FROM events s
            CROSS JOIN LATERAL jsonb_array_elements(s.outcome -> 'commands') AS c
            JOIN events f ON f.run_id = s.run_id AND f.type = 'timer_fired'
            WHERE s.run_id = ANY(%s) AND s.type = 'run_started'
              AND c ->> 'command' = 'ArmTimer'
            """,
            (run_ids,),
        ).fetchall()
        statuses: dict[str, int] = dict(
            conn.execute(
                "SELECT status, count(*) FROM runs WHERE id = ANY(%s) GROUP BY status",
                (run_ids,),
            ).fetchall()
        )
    assert len(rows) == timers, f"{len(rows)} of {timers} timers fired: {statuses}"
    lateness = [fired - due for _run, due, fired in rows]
    dues = [due for _run, due, _fired in rows]
    fired = [at for _run, _due, at in rows]
    p50, p99 = percentile(lateness, 0.5), percentile(lateness, 0.99)
    met = p99 < TIMER_P99_TARGET_S
    cpu = ", ".join(f"{u.label} {u.cpu_percent:.0f} %" for u in usage)
    print(
        f"   due over {max(dues) - min(dues):.1f} s ({timers / window_s:.0f}/s); fired over "
        f"{max(fired) - min(fired):.1f} s; lateness p50 {p50 * 1000:.0f} ms, p99 "
        f"{p99 * 1000:.0f} ms, max {max(lateness) * 1000:.0f} ms, min "
        f"{min(lateness) * 1000:.0f} ms; CPU while due: {cpu}"
    )
    print(
        f"   target p99 < {TIMER_P99_TARGET_S:g} s -> {'met' if met else 'MISSED'}; "
        f"runs {dict(sorted(statuses.items()))}"
    )
    return met


# -- 4. fan-out 8 + join -------------------------------------------------------------------


def bench_cairn_fanout(runs: int, workdir: Path, concurrency: int) -> float:
    with ExitStack() as stack:
        fleet = Fleet(workdir, "cairn_fanout", concurrency, None).open(stack)
        fleet.wait_ready()
        time.sleep(1.5)
        started = time.perf_counter()
        run_ids = [str(fleet.client.submit(FANOUT, {})) for _ in range(runs)]
        wait_finished(fleet.url, run_ids)
        elapsed = time.perf_counter() - started
        with psycopg.connect(fleet.url) as conn:
            row = conn.execute(
                "SELECT count(*) FROM runs WHERE id = ANY(%s) AND status = 'succeeded'",
                (run_ids,),
            ).fetchone()
        assert row is not None and row[0] == runs, f"{row} of {runs} runs succeeded"
    return runs / elapsed


def bench_celery_chord(runs: int, workdir: Path, concurrency: int) -> float:
    from bench.wait_workflows import branch, chord_baseline, joined  # noqa: PLC0415

    broker, backend = f"{REDIS}/{CHORD_BROKER_DB}", f"{REDIS}/{CHORD_BACKEND_DB}"
    marks_url = f"{REDIS}/{MARKS_DB}"
    for url in (broker, backend):
        redis.Redis.from_url(url).flushdb()
    chord_baseline.conf.update(broker_url=broker, result_backend=backend)
    env = {
        **os.environ,
        "BENCH_BROKER_URL": broker,
        "BENCH_BACKEND_URL": backend,
        "BENCH_MARKS_URL": marks_url,
        "PYTHONPATH": str(Path(__file__).resolve().parents[1]),
    }
    marks = redis.Redis.from_url(marks_url)
    marks.delete(CHORD_MARKS)
    worker = spawn(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "bench.wait_workflows:chord_baseline",
            "worker",
            f"--concurrency={concurrency}",
            "--pool=prefork",
            "--loglevel=WARNING",
            "--without-gossip",
            "--without-mingle",
            "--hostname=chord@%h",
        ],
        env,
        workdir / "celery-chord-worker.log",
    )

    def send(run: int) -> None:
        chord(branch.si(run, i) for i in range(BRANCHES))(joined.s(run))

    def wait_marks(count: int, timeout_s: float = 600) -> None:
        deadline = time.monotonic() + timeout_s
        while marks.llen(CHORD_MARKS) < count:
            if worker.poll() is not None or time.monotonic() > deadline:
                raise TimeoutError(f"{marks.llen(CHORD_MARKS)} of {count} chords joined")
            time.sleep(0.01)

    try:
        for warm in range(3 * concurrency):
            send(-1 - warm)
        wait_marks(3 * concurrency, 60)
        marks.delete(CHORD_MARKS)
        time.sleep(1.5)
        started = time.perf_counter()
        for run in range(runs):
            send(run)
        wait_marks(runs)
        elapsed = time.perf_counter() - started
    finally:
        stop(worker)
    return runs / elapsed


# -- main ----------------------------------------------------------------------------------


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM, and SIGINT even where the shell ignores it for a background job, end
    the bench through its cleanup."""
    previous = signal.signal(signal.SIGTERM, _stop_on_sigterm)
    previous_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, previous_int)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--waiting", type=int, default=10_000, help="runs parked in a wait")
    parser.add_argument("--window", type=float, default=20.0, help="measurement window, s")
    parser.add_argument("--signals", type=int, default=500, help="signals sent to parked runs")
    parser.add_argument("--signal-rate", type=float, default=50.0, help="signals per second")
    parser.add_argument("--timers", type=int, default=10_000, help="pending timers")
    parser.add_argument(
        "--timer-window", type=float, default=25.0, help="the timers come due over this long, s"
    )
    parser.add_argument(
        "--schedulers",
        default="1,2",
        help="scheduler counts to fire the timers with, one timer round each",
    )
    parser.add_argument("--fanout-runs", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3, help="fan-out rounds of each system")
    parser.add_argument(
        "--concurrency", type=int, default=2, help="prefork slots of the one worker process"
    )
    parser.add_argument(
        "--scheduler-interval",
        type=float,
        default=None,
        help="CAIRN_SCHEDULER_INTERVAL, s (default: cairn's own, 0.5)",
    )
    parser.add_argument("--submit-threads", type=int, default=4, help="threads submitting runs")
    parser.add_argument(
        "--skip", default="", help="comma-separated parts to skip: parked,signals,timers,fanout"
    )
    args = parser.parse_args()
    skip = {part.strip() for part in args.skip.split(",") if part.strip()}
    scheduler_counts = [int(n) for n in args.schedulers.split(",") if n.strip()]
    if args.signals > args.waiting:
        parser.error("--signals must not exceed --waiting: signals go to parked runs")
    workdir = Path(os.environ.get("BENCH_WORKDIR", "/tmp/cairn-bench-waits"))
    workdir.mkdir(parents=True, exist_ok=True)
    interval = args.scheduler_interval
    load = Path("/proc/loadavg").read_text().split()[0]
    print(
        f"one cairn worker process (prefork, {args.concurrency} slots), scheduler interval "
        f"{interval if interval is not None else 0.5:g} s; {os.cpu_count()} cores, load "
        f"average {load} at start; logs in {workdir}\n"
    )
    verdicts: dict[str, bool] = {}
    with sigterm_as_interrupt():
        if not {"parked", "signals", "timers"} <= skip:
            with ExitStack() as stack:
                fleet = Fleet(workdir, "cairn_waits", args.concurrency, interval).open(stack)
                fleet.wait_ready()
                parked = bench_parked(fleet, args.waiting, args.window, args.submit_threads)
                verdicts["parked"] = parked.met
                if "signals" not in skip and args.signals:
                    bench_signals(fleet, parked.run_ids[: args.signals], args.signal_rate)
                if "timers" not in skip and args.timers:
                    print(
                        f"3. timer lateness: {args.timers} timers due over {args.timer_window:g} s"
                        f" (with {args.waiting - args.signals} parked runs' timers pending too)"
                    )
                    for count in scheduler_counts:
                        while len(fleet.schedulers) < count:
                            fleet.add_scheduler()
                        while len(fleet.schedulers) > count:
                            fleet.remove_scheduler()
                        time.sleep(2)
                        verdicts[f"timers x{count}"] = bench_timers(
                            fleet,
                            args.timers,
                            args.timer_window,
                            parked.submit_rate or ASSUMED_SUBMIT_RATE,
                            args.submit_threads,
                        )
                    print()
        if "fanout" not in skip and args.fanout_runs:
            print(
                f"4. fan-out {BRANCHES} + join + 1 node: {args.fanout_runs} runs, "
                f"{args.rounds} round(s) of each\n"
                f"   {'':<28}{'runs/s':>8}"
            )
            ratios = []
            for _round in range(args.rounds):
                celery_rate = bench_celery_chord(args.fanout_runs, workdir, args.concurrency)
                cairn_rate = bench_cairn_fanout(args.fanout_runs, workdir, args.concurrency)
                ratios.append(cairn_rate / celery_rate)
                print(f"   {'plain Celery chord':<28}{celery_rate:>8.1f}")
                print(f"   {'cairn parallel + join':<28}{cairn_rate:>8.1f}")
                print(f"   {'  ratio':<28}{ratios[-1]:>8.2f}x")
            print(
                f"   cairn / Celery chord runs/s, median of {len(ratios)}: "
                f"{statistics.median(ratios):.2f}x (range {min(ratios):.2f}-{max(ratios):.2f})"
            )
    if verdicts:
        print(
            "\ntargets: "
            + ", ".join(f"{name} {'met' if ok else 'MISSED'}" for name, ok in verdicts.items())
        )


if __name__ == "__main__":
    main()
