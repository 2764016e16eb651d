"""``/v1/fleet``: what the workers share — the namespace's concurrency pools and rate
buckets, the dependencies' circuits. Read by the API and by the console's fleet page."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends

from cairn.api.access import Reader
from cairn.api.deps import runtime_of
from cairn.api.models import CircuitList, PoolList, RateList
from cairn.api.scope import ERRORS
from cairn.observe.flow import circuit_views, pool_reports
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
