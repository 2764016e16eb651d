"""What restoring a run's state at a seq costs (``cairn state --at``, each ``cairn bisect``
check), for runs of 100, 1,000 and 10,000 events: it must grow with the events since the
snapshot it starts from, not with the run's length.

    python -m bench.history --sizes 100 1000 10000 --samples 200

Real PostgreSQL, in a throwaway database created and dropped here (no Redis, no broker,
no worker). Each run is built through the orchestrator itself: a loop of one node whose
every result is recorded with ``Orchestrator.complete``, one event per visit, snapshots
written as the engine writes them (every ``--snapshot-every`` events and at the end).
For each run, random seqs (the same ones for every mode) are restored with
``Timeline.state_at`` — a read transaction, the latest snapshot at or before the seq, the
events since replayed through the decider — three ways:

- **as written**: every snapshot the engine wrote is still there;
- **compacted**: after ``Scheduler.compact`` (the newest ``snapshot_keep`` and one per
  stretch of 10 x snapshot-every events survive) — what an old run looks like;
- **from seq 0**: the baseline, snapshots ignored: the same fold from the empty state.

Prints, per run and mode, the events replayed (p50 / max) and the restore time p50/p99
(each seq restored three times, the best kept: the figure is the restore's cost, not the
machine's other load), and how long ``cairn history`` takes (it folds the whole log
once, by design).
"""

from __future__ import annotations

import argparse
import bisect
import random
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from bench.chain import admin, fresh_database
from cairn.config import Settings
from cairn.definitions.builder import Workflow
from cairn.engine.orchestrator import Orchestrator
from cairn.engine.reads import replay
from cairn.lease.memory import MemoryLeases
from cairn.model.events import NodeSucceeded
from cairn.model.messages import NodeMessage
from cairn.model.outcomes import NodeOutcome
from cairn.model.state import RunState
from cairn.model.statuses import NodeStatus
from cairn.scheduler.process import Scheduler
from cairn.store.backends import store_for
from cairn.store.database import make_engine
from cairn.store.sql import Store
from cairn.timetravel.timeline import Timeline

FIELDS = 20  # the vars a visit rewrites: a state of a few hundred bytes that stays put
WARM_UP = 5
REPEAT = 3


def tick(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    """Never called: the bench reports the results a worker would."""
    raise NotImplementedError


def more(state: dict[str, Any]) -> bool:
    return int(state["count"]) < int(state["visits"])


def loop_workflow(max_visits: int) -> Workflow:
    loop = Workflow("bench_history_loop", version=1)
    loop.task(
        "tick",
        tick,
        branch={"guard": more, "cases": {"true": "tick", "false": "done"}},
        max_visits=max_visits,
    )
    loop.end("done")
    return loop


@dataclass
class Collected:
    """A publisher that keeps the dispatches for the bench to answer."""

    messages: list[NodeMessage] = field(default_factory=list)

    def publish(self, messages: Sequence[NodeMessage]) -> bool:
        self.messages.extend(messages)
        return True


def build_run(orchestrator: Orchestrator, publisher: Collected, events: int) -> str:
    """A finished run of ``events`` events: run_started, then one result per visit."""
    visits = events - 1
    run_id = orchestrator.submit("bench_history_loop", {"visits": visits, "count": 0})
    while publisher.messages:
        message = publisher.messages.pop()
        output = {"count": message.iteration, f"field_{message.iteration % FIELDS}": "x" * 16}
        succeeded = NodeSucceeded(
            at=0.0,
            node=message.node,
            iteration=message.iteration,
            attempt=message.attempt,
            output=output,
        )
        outcome = NodeOutcome(succeeded, NodeStatus.SUCCEEDED, result=output, duration_s=0.001)
        assert orchestrator.complete(message, outcome, worker="bench").recorded
    return run_id


def from_seq_zero(orchestrator: Orchestrator, run_id: str, seq: int) -> RunState:
    """The baseline: the same fold, from the empty state, snapshots ignored."""
    with orchestrator.store.reading() as tx:
        row = tx.run(run_id)
        definition = orchestrator.registry.get(row.workflow, row.version, tx)
        state = RunState(run_id, definition.name, definition.version)
        for _event_row, replayed in replay(definition, state, tx.events_after(run_id, 0, seq)):
            state = replayed
    return state


@dataclass
class Figures:
    mode: str
    snapshots: int
    replayed: list[int]
    seconds: list[float]

    def row(self, events: int) -> str:
        ordered = sorted(self.seconds)
        p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
        return (
            f"{events:>7}  {self.mode:<12} {self.snapshots:>9}  "
            f"{statistics.median(self.replayed):>8.0f} / {max(self.replayed):<6} "
            f"{statistics.median(self.seconds) * 1000:>9.2f} {p99 * 1000:>9.2f}"
        )


def measure(
    mode: str,
    seqs: Sequence[int],
    snapshots: list[int],
    restore: Callable[[int], RunState],
) -> Figures:
    for seq in seqs[:WARM_UP]:  # connections and caches warm before the clock runs
        restore(seq)
    seconds = []
    for seq in seqs:
        # Best of a few: the figure is the restore's cost, not the machine's other load.
        tries = []
        for _ in range(REPEAT):
            started = time.perf_counter()
            restore(seq)
            tries.append(time.perf_counter() - started)
        seconds.append(min(tries))
    # Events replayed: those after the latest snapshot at or before the seq.
    replayed = [
        seq - (snapshots[i - 1] if (i := bisect.bisect_right(snapshots, seq)) else 0)
        for seq in seqs
    ]
    return Figures(mode, len(snapshots), replayed, seconds)


def snapshot_seqs(store: Store, run_id: str) -> list[int]:
    with store.reading() as tx:
        return tx.snapshot_seqs(run_id)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1_000, 10_000])
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--baseline-samples", type=int, default=40)
    parser.add_argument("--snapshot-every", type=int, default=50)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()

    database, url = fresh_database("cairn_history")
    settings = Settings(
        database_url=url,
        snapshot_every_events=args.snapshot_every,
        snapshot_every_s=86_400,  # count-driven only: the figures do not depend on speed
    )
    store = store_for(make_engine(url))
    publisher = Collected()
    orchestrator = Orchestrator(store, publisher, settings)
    orchestrator.registry.register(loop_workflow(max(args.sizes)).build())
    scheduler = Scheduler(orchestrator, MemoryLeases(), settings)
    rows: list[str] = []
    histories: list[str] = []
    try:
        for events in args.sizes:
            started = time.perf_counter()
            run_id = build_run(orchestrator, publisher, events)
            built = time.perf_counter() - started
            timeline = Timeline(orchestrator, run_id)
            draw = random.Random(args.seed)
            # The latest seq is read from the run row's cache: leave it out.
            seqs = [draw.randint(1, events - 1) for _ in range(args.samples)]
            written = snapshot_seqs(store, run_id)
            rows.append(measure("as written", seqs, written, timeline.state_at).row(events))
            while scheduler.compact():
                pass
            compacted = snapshot_seqs(store, run_id)
            rows.append(measure("compacted", seqs, compacted, timeline.state_at).row(events))
            baseline = seqs[: args.baseline_samples]
            rows.append(
                measure(
                    "from seq 0",
                    baseline,
                    [],
                    partial(from_seq_zero, orchestrator, run_id),
                ).row(events)
            )
            started = time.perf_counter()
            steps = len(timeline.history().steps)
            histories.append(
                f"{events:>7}  {steps:>6} steps  {(time.perf_counter() - started) * 1000:>9.1f} ms"
                f"   (run built in {built:.1f} s)"
            )
    finally:
        store.dispose()
        with admin() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')

    print(
        f"state at a random seq (Timeline.state_at), PostgreSQL, a snapshot every "
        f"{args.snapshot_every} events; {args.samples} seqs per run "
        f"({args.baseline_samples} from seq 0)"
    )
    print(
        f"{'events':>7}  {'restore from':<12} {'snapshots':>9}  {'replayed p50 / max':<18}"
        f"{'p50 ms':>7} {'p99 ms':>9}"
    )
    for row in rows:
        print(row)
    print("\ncairn history (the whole log folded once)")
    for line in histories:
        print(line)


if __name__ == "__main__":
    main()
