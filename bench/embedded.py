"""cairn embedded — one process, no broker — beside LangGraph with its PostgreSQL
checkpointer, the same trivial step bodies, the same number of workflows in flight,
measured in the same run.

    python -m bench.embedded --runs 200

Each system keeps ``--in-flight`` workflows running at once (8: a thread each submits a
workflow and waits for its end, then the next) through two shapes of ten trivial steps:
``chain10`` (ten in a row) and ``fanout8`` (one step, eight in parallel, joined, one
more). cairn runs embedded (``Runtime`` with its worker threads, ``CAIRN_WORKER_THREADS``
of them) on its default SQLite file and on PostgreSQL; LangGraph runs the same graphs
with ``PostgresSaver`` on PostgreSQL, checkpointing each step before the next
(``durability="sync"``: cairn commits each step before the next is dispatched). Prints
steps/s per system and shape, each round, and the medians' ratios against LangGraph.
Needs PostgreSQL (`bash scripts/services.sh`) and the ``bench`` extra
(``pip install -e ".[bench]"``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.chain import admin, fresh_database
from cairn.definitions.builder import Workflow

STEPS = 10
BRANCHES = 8


def noop(ctx: Any, state: dict[str, Any]) -> None:
    return None


# The two shapes, as cairn definitions (CAIRN_WORKFLOWS=bench.embedded).
embedded_chain10 = Workflow("embedded_chain10", version=1)
for _index in range(1, STEPS + 1):
    embedded_chain10.task(f"s{_index}", noop, next=f"s{_index + 1}" if _index < STEPS else "done")
embedded_chain10.end("done")

_BRANCH_NAMES = [f"b{index}" for index in range(1, BRANCHES + 1)]
embedded_fanout8 = Workflow("embedded_fanout8", version=1)
embedded_fanout8.task("first", noop, next="fan")
embedded_fanout8.parallel("fan", _BRANCH_NAMES, next="last")
for _name in _BRANCH_NAMES:
    embedded_fanout8.task(_name, noop)
embedded_fanout8.task("last", noop, next="done")
embedded_fanout8.end("done")

SHAPES = {"chain10": "embedded_chain10", "fanout8": "embedded_fanout8"}


@dataclass
class Figures:
    system: str
    shape: str
    runs: int
    seconds: float

    @property
    def steps_per_s(self) -> float:
        return self.runs * STEPS / self.seconds


def in_flight(runs: int, workers: int, one: Callable[[int], None]) -> float:
    """Seconds for ``runs`` calls of ``one`` (a workflow from start to end), ``workers``
    of them at a time, each called with its driver's number."""
    left = [runs]
    lock = threading.Lock()
    errors: list[BaseException] = []

    def drive(driver: int) -> None:
        while True:
            with lock:
                if left[0] == 0 or errors:
                    return
                left[0] -= 1
            try:
                one(driver)
            except BaseException as error:  # reported after the others stop
                errors.append(error)
                return

    threads = [threading.Thread(target=drive, args=(n,)) for n in range(workers)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return time.perf_counter() - started


# -- cairn embedded ---------------------------------------------------------------------


@contextmanager
def cairn_embedded(database_url: str | None, threads: int) -> Iterator[Callable[[str], None]]:
    """An embedded runtime (worker threads and scheduler in this process) on
    ``database_url`` (None: its SQLite default in a fresh home); yields a function that
    runs one workflow to its end."""
    from cairn.config import Settings  # noqa: PLC0415
    from cairn.model.statuses import RunStatus  # noqa: PLC0415
    from cairn.runtime import Runtime  # noqa: PLC0415

    with tempfile.TemporaryDirectory(prefix="cairn-embedded-") as home:
        values: dict[str, Any] = {
            "home": Path(home),
            "workflows": ["bench.embedded"],
            "worker_threads": threads,
            "log_level": "WARNING",
        }
        if database_url is not None:
            values["database_url"] = database_url
        runtime = Runtime.build(Settings(**values))
        ended: dict[str, threading.Event] = {}
        statuses: dict[str, RunStatus] = {}

        def watch(run_id: str, decision: Any) -> None:
            status = decision.state.status
            if status.terminal:
                statuses[run_id] = status
                ended.setdefault(run_id, threading.Event()).set()

        runtime.orchestrator.after_commit.append(watch)
        runtime.start_workers()
        runtime.start_scheduler()

        def run(workflow: str) -> None:
            run_id = runtime.orchestrator.submit(workflow, {})
            if not ended.setdefault(run_id, threading.Event()).wait(120):
                raise TimeoutError(f"run {run_id} did not end within 120 s")
            if statuses[run_id] is not RunStatus.SUCCEEDED:
                raise RuntimeError(f"run {run_id} ended {statuses[run_id]}")

        try:
            yield run
        finally:
            runtime.close()


def bench_cairn(database_url: str | None, shape: str, runs: int, args: Any) -> Figures:
    name = "cairn embedded, SQLite" if database_url is None else "cairn embedded, PostgreSQL"
    with cairn_embedded(database_url, args.threads) as run:
        workflow = SHAPES[shape]
        in_flight(args.in_flight, args.in_flight, lambda _driver: run(workflow))  # warm up
        seconds = in_flight(runs, args.in_flight, lambda _driver: run(workflow))
    return Figures(name, shape, runs, seconds)


# -- LangGraph + PostgresSaver ---------------------------------------------------------


def langgraph_graphs(checkpointer: Any) -> dict[str, Any]:
    """The two shapes as LangGraph graphs of no-op nodes."""
    from typing import TypedDict  # noqa: PLC0415

    from langgraph.graph import END, START, StateGraph  # noqa: PLC0415

    class State(TypedDict, total=False):
        n: int

    def step(_state: State) -> dict[str, Any]:
        return {}

    chain = StateGraph(State)
    names = [f"s{index}" for index in range(1, STEPS + 1)]
    for name in names:
        chain.add_node(name, step)
    for before, after in zip([START, *names], [*names, END], strict=True):
        chain.add_edge(before, after)

    fan = StateGraph(State)
    fan.add_node("first", step)
    fan.add_node("last", step)
    fan.add_edge(START, "first")
    for name in _BRANCH_NAMES:
        fan.add_node(name, step)
        fan.add_edge("first", name)
    fan.add_edge(_BRANCH_NAMES, "last")  # the join: "last" waits for every branch
    fan.add_edge("last", END)
    return {
        "chain10": chain.compile(checkpointer=checkpointer),
        "fanout8": fan.compile(checkpointer=checkpointer),
    }


@contextmanager
def langgraph_postgres(url: str, drivers: int) -> Iterator[list[dict[str, Any]]]:
    """Yields each driver's graphs by shape. Each driver has a saver of its own on the
    shared pool: one ``PostgresSaver`` takes a lock around every statement, and shared by
    the drivers it would make LangGraph's steps wait for each other."""
    from langgraph.checkpoint.postgres import PostgresSaver  # noqa: PLC0415
    from psycopg.rows import dict_row  # noqa: PLC0415
    from psycopg_pool import ConnectionPool  # noqa: PLC0415

    plain = url.replace("postgresql+psycopg://", "postgresql://")
    kwargs = {"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row}
    with ConnectionPool(plain, min_size=drivers, max_size=drivers, kwargs=kwargs) as pool:
        PostgresSaver(pool).setup()  # type: ignore[arg-type]
        yield [langgraph_graphs(PostgresSaver(pool)) for _ in range(drivers)]  # type: ignore[arg-type]


def bench_langgraph(url: str, shape: str, runs: int, args: Any) -> Figures:
    with langgraph_postgres(url, args.in_flight) as graphs:

        def run(driver: int) -> None:
            config = {"configurable": {"thread_id": str(uuid.uuid4())}}
            graphs[driver][shape].invoke({"n": 0}, config, durability=args.durability)

        in_flight(args.in_flight, args.in_flight, run)  # warm up
        seconds = in_flight(runs, args.in_flight, run)
    return Figures("LangGraph + PostgresSaver", shape, runs, seconds)


@contextmanager
def postgres_database(prefix: str) -> Iterator[str]:
    """A fresh migrated database for one measurement, dropped afterwards; its URL."""
    name, url = fresh_database(prefix)
    try:
        yield url
    finally:
        with admin() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def measure_round(shape: str, args: Any) -> dict[str, Figures]:
    figures: dict[str, Figures] = {}
    with postgres_database("langgraph_bench") as url:
        figures["langgraph"] = bench_langgraph(url, shape, args.runs, args)
    with postgres_database("cairn_embedded") as url:
        figures["postgres"] = bench_cairn(url, shape, args.runs, args)
    figures["sqlite"] = bench_cairn(None, shape, args.runs, args)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200, help="workflows per measurement")
    parser.add_argument("--in-flight", type=int, default=8, help="workflows running at once")
    parser.add_argument(
        "--threads", type=int, default=8, help="cairn's worker threads (CAIRN_WORKER_THREADS)"
    )
    parser.add_argument("--rounds", type=int, default=3, help="median of this many rounds")
    parser.add_argument("--shapes", default="chain10,fanout8", help="comma-separated")
    parser.add_argument(
        "--durability",
        choices=["sync", "async"],
        default="sync",
        help="LangGraph's: sync saves each checkpoint before the next step (as cairn "
        "commits); async saves it while the next step runs",
    )
    args = parser.parse_args()
    os.environ.setdefault("CAIRN_LOG_LEVEL", "WARNING")
    print(
        f"{args.runs} workflows x {STEPS} trivial steps, {args.in_flight} in flight; cairn "
        f"with {args.threads} worker threads; LangGraph durability={args.durability}; "
        f"{args.rounds} round(s); load average {os.getloadavg()[0]:.2f} at start\n"
    )
    systems = {
        "langgraph": "LangGraph + PostgresSaver",
        "postgres": "cairn embedded, PostgreSQL",
        "sqlite": "cairn embedded, SQLite",
    }
    print(f"{'shape':<9} {'round':>5}  " + "".join(f"{name:>28}" for name in systems.values()))
    medians: dict[str, dict[str, float]] = {}
    for shape in args.shapes.split(","):
        rounds: dict[str, list[float]] = {key: [] for key in systems}
        for number in range(1, args.rounds + 1):
            figures = measure_round(shape, args)
            for key in systems:
                rounds[key].append(figures[key].steps_per_s)
            cells = "".join(f"{figures[key].steps_per_s:>22.0f} st/s" for key in systems)
            print(f"{shape:<9} {number:>5}  {cells}")
        medians[shape] = {key: statistics.median(values) for key, values in rounds.items()}
    print("\nmedian steps/s, and against LangGraph's measured in this run:")
    for shape, median in medians.items():
        base = median["langgraph"]
        print(
            f"  {shape:<8} LangGraph {base:>6.0f}   cairn PostgreSQL {median['postgres']:>6.0f} "
            f"({median['postgres'] / base:.2f}x)   cairn SQLite {median['sqlite']:>6.0f} "
            f"({median['sqlite'] / base:.2f}x; {median['sqlite'] / median['postgres']:.2f}x "
            "PostgreSQL's)"
        )
    print(
        "targets: cairn on PostgreSQL >= 0.8x LangGraph on both shapes; SQLite no slower "
        f"than PostgreSQL. Load average {os.getloadavg()[0]:.2f} at the end."
    )


if __name__ == "__main__":
    main()
