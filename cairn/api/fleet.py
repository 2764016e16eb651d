"""``/v1/fleet``: what the workers share — the namespace's concurrency pools and rate
buckets, the dependencies' circuits — and what they are doing: the workers and their
heartbeats, the queues' depths, the stalled executions. Read by the API and by the
console's fleet page."""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated

from fastapi import APIRouter, Depends

from cairn.api.access import Reader
from cairn.api.deps import runtime_of
from cairn.api.models import Activity, CircuitList, PoolList, RateList
from cairn.api.scope import ERRORS
from cairn.definitions.queues import known_queues
from cairn.model.principals import Permission
from cairn.observe import activity
from cairn.observe.limits import circuit_views, pool_reports
from cairn.runtime import Runtime

router = APIRouter(prefix="/v1")


@router.get("/fleet/concurrency", response_model=PoolList, responses=ERRORS)
def concurrency(runtime: Annotated[Runtime, Depends(runtime_of)], who: Reader) -> PoolList:
    """The namespace's concurrency pools: per pool, how many executions hold a slot,
    how many wait for one, and how long the oldest has waited."""
    slots = runtime.slots
    reports = pool_reports(runtime.store, slots) if slots is not None else []
    mine = [r.to_dict() for r in reports if r.pool.startswith(f"{who.namespace}/")]
    return PoolList(pools=mine)


@router.get("/fleet/circuits", response_model=CircuitList, responses=ERRORS)
def circuits(runtime: Annotated[Runtime, Depends(runtime_of)], _who: Reader) -> CircuitList:
    """The dependencies' circuits (fleet-wide, shared by every namespace): each one
    open, half-open, or counting failures, and how many executions wait for it."""
    slots, breakers = runtime.slots, runtime.circuits
    pools = pool_reports(runtime.store, slots) if slots is not None else []
    views = circuit_views(breakers, pools) if breakers is not None else []
    return CircuitList(circuits=[view.to_dict() for view in views])


@router.get("/fleet/rates", response_model=RateList, responses=ERRORS)
def rates(runtime: Annotated[Runtime, Depends(runtime_of)], who: Reader) -> RateList:
    """The namespace's rate buckets: per key, the requests and tokens used within
    its period and still available, how many calls wait for their turn, and how
    long a provider's 429 still pauses it."""
    buckets = runtime.rates.report() if runtime.rates is not None else []
    mine = [b.to_dict() for b in buckets if b.bucket.startswith(f"{who.namespace}/")]
    return RateList(buckets=mine)


@router.get("/fleet/activity", response_model=Activity, responses=ERRORS)
def fleet_activity(runtime: Annotated[Runtime, Depends(runtime_of)], who: Reader) -> Activity:
    """What the fleet is doing now: the workers holding executions (fleet-wide: a worker
    serves every namespace), each alive or suspect with its freshest heartbeat; each
    queue's depth at the broker (fleet-wide too); and the namespace's own running
    executions, with the stalled ones (beating without progress, or silent) apart."""
    settings = runtime.settings
    interval = settings.heartbeat_interval
    running = activity.read_running(runtime.leases)
    with runtime.store.reading() as tx:
        heads = tx.run_heads([e.run_id for e in running])
        faults = tx.code_faults(activity.CODE_FAULTS_WITHIN_S, who.namespace)
        builds = [b.build for b in tx.builds(activity.BUILD_QUEUES_WITHIN_S)]
    mine = [e for e in running if (head := heads.get(e.run_id)) and head.namespace == who.namespace]
    if not who.may(Permission.PAYLOADS):  # the handler's words may quote what it works on
        mine = [replace(e, beat={**e.beat, "message": None}) for e in mine]
    queues = known_queues(settings.queues, settings.queue)
    depth = runtime.orchestrator.publisher.backlog
    return Activity(
        heartbeat_interval_s=interval,
        workers=[view.to_dict() for view in activity.workers(running, interval)],
        queues=[
            {"queue": queue, "depth": count}
            for queue, count in activity.backlogs(queues, depth, builds).items()
        ],
        running=[e.to_dict(interval) for e in mine],
        stalled=[e.to_dict(interval) for e in activity.stalled(mine, interval)],
        code_faults=[fault.to_dict() for fault in faults],
    )
