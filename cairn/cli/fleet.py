"""``cairn status --fleet``: the leases, queues, pools, circuits, rate buckets and
workers of the whole deployment, read once and printed (or as JSON)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cairn.cli._app import out
from cairn.cli.deployment import deployment
from cairn.cli.liveness import age, liveness

if TYPE_CHECKING:
    from cairn.lease.waits import WaitHistogram
    from cairn.observe.limits import CircuitView, PoolReport
    from cairn.store.code_faults import CodeFaultRecord


@dataclass
class Fleet:
    stats: dict[str, int]
    waits: WaitHistogram
    running: list[dict[str, Any]]
    backlogs: dict[str, int | None]
    pools: list[PoolReport]
    circuits: list[CircuitView]
    rates: list[Any]
    heartbeat_interval: float
    code_faults: list[CodeFaultRecord]

    def to_dict(self) -> dict[str, Any]:
        waits = self.waits
        return {
            "leases": self.stats,
            "lease_wait": {
                "count": waits.count,
                "sum_s": waits.sum_s,
                "buckets": dict(waits.cumulative()),
            },
            "running": self.running,
            "queues": self.backlogs,
            "concurrency": [pool.to_dict() for pool in self.pools],
            "circuits": [view.to_dict() for view in self.circuits],
            "rates": [bucket.to_dict() for bucket in self.rates],
            "code_faults": [fault.to_dict() for fault in self.code_faults],
        }


def fleet_status(as_json: bool) -> None:
    fleet = read_fleet()
    if as_json:
        print(json.dumps(fleet.to_dict(), indent=2, default=str))
    else:
        print_fleet(fleet)


def read_fleet() -> Fleet:
    from cairn.definitions.queues import known_queues
    from cairn.observe import activity
    from cairn.observe.limits import circuit_views, is_circuit_pool, pool_reports
    from cairn.parts import celery_publisher

    with deployment() as opened:
        parts, settings, leases = opened.parts, opened.settings, opened.leases
        pools = pool_reports(parts.store, parts.slots)
        # An embedded broker's queue is this process's own, empty: nothing to show.
        broker = celery_publisher(settings) if settings.broker_url is not None else None
        queues = known_queues(settings.queues, settings.queue)
        with parts.store.reading() as tx:  # every namespace's: an operator's view
            faults = tx.code_faults(activity.CODE_FAULTS_WITHIN_S)
            builds = [b.build for b in tx.builds(activity.BUILD_QUEUES_WITHIN_S)]
        backlogs = activity.backlogs(queues, broker.backlog, builds) if broker is not None else {}
        return Fleet(
            stats=leases.stats(),
            waits=leases.waits(),
            running=leases.running(),
            backlogs=backlogs,
            pools=[pool for pool in pools if not is_circuit_pool(pool)],
            circuits=circuit_views(parts.circuits, pools),
            rates=parts.rates.report(),
            heartbeat_interval=settings.heartbeat_interval,
            code_faults=faults,
        )


def print_fleet(fleet: Fleet) -> None:
    counts = {name: count for name, count in fleet.stats.items() if "|" not in name}
    out.print(
        "leases: " + ", ".join(f"{name} {count}" for name, count in sorted(counts.items()))
        if counts
        else "leases: none taken yet"
    )
    if fleet.backlogs:  # a queue that fills while the others drain has no worker consuming it
        queued = (f"{q} {'?' if n is None else n}" for q, n in fleet.backlogs.items())
        out.print("queued: " + ", ".join(queued), markup=False)
    anomalies = [
        [*name.split("|")[1:], str(n)]
        for name, n in fleet.stats.items()
        if name.startswith("anomalies|")
    ]
    if anomalies:  # "anomalies|workflow|kind|action" (cairn.observe.alerts)
        out.print(
            "anomalies: " + ", ".join(f"{w} {k} {a} {n}" for w, k, a, n in sorted(anomalies)),
            markup=False,
        )
    for fault in fleet.code_faults:  # the first thing to fix: its runs wait for it
        out.print(
            f"cannot run: {fault.namespace}/{fault.workflow}@{fault.version} on worker "
            f"{fault.worker} ({fault.count} time(s), last {age(time.time() - fault.last_at)} "
            f"ago): {fault.fault}",
            markup=False,
        )
    if fleet.waits.count:  # the histogram behind cairn_lease_wait_seconds
        out.print(f"lease wait (publish to lease): {fleet.waits.summary()}", markup=False)
    for pool in fleet.pools:
        limit = f"/{pool.limit}" if pool.limit is not None else ""
        waited = f" (oldest {age(pool.oldest_wait_s)})" if pool.oldest_wait_s is not None else ""
        out.print(
            f"concurrency {pool.pool}: {pool.running}{limit} running, "
            f"{pool.waiting} waiting{waited}",
            markup=False,
        )
    for view in fleet.circuits:
        out.print(circuit_line(view), markup=False)
    for bucket in fleet.rates:
        out.print(rate_line(bucket), markup=False)
    print_workers(fleet.running, fleet.heartbeat_interval)


def print_workers(running: list[dict[str, Any]], interval_s: float) -> None:
    from cairn.observe.activity import executions, workers

    held = executions(running)
    if not held:
        out.print("no node is running")
    for worker in workers(held, interval_s):
        out.print(
            f"{worker.worker}: {worker.state}, {worker.running} running, "
            f"last beat {age(worker.last_beat_s)} ago",
            markup=False,
        )
        for execution in held:
            if str(execution.beat.get("worker") or "?") != worker.worker:
                continue
            out.print(
                f"  {execution.run_id} {execution.node}#{execution.iteration} "
                f"({execution.phase}): {liveness(execution.beat, interval_s)}",
                markup=False,
            )


def rate_line(bucket: Any) -> str:
    """``rate default/openai: requests 12/600 per 60 s, tokens 8000/200000 per 60 s, 3 waiting``."""
    parts = []
    for unit, used, cap, period in (
        ("requests", bucket.requests_used, bucket.requests_limit, bucket.requests_period_s),
        ("tokens", bucket.tokens_used, bucket.tokens_limit, bucket.tokens_period_s),
    ):
        if cap is not None:
            parts.append(f"{unit} {used}/{cap} per {age(round(period))}")
    if bucket.waiting:
        parts.append(f"{bucket.waiting} waiting")
    if bucket.paused_for_s:
        parts.append(f"paused {bucket.paused_for_s:.1f}s more (429)")
    return f"rate {bucket.bucket}: " + ", ".join(parts)


def circuit_line(view: CircuitView) -> str:
    circuit = view.circuit
    if circuit.state == "closed":
        told = f"closed, {circuit.failures} run(s) failed in a row"
    elif circuit.state == "open":
        left = max(0.0, (circuit.open_until or 0.0) - time.time())
        told = f"OPEN ({circuit.failures} failures, opened {circuit.opens}x), probe in {age(left)}"
    else:
        told = f"HALF-OPEN ({circuit.failures} failures, opened {circuit.opens}x), probing"
    return f"circuit {circuit.dependency}: {told}; {view.waiting} waiting, {view.probing} probing"
