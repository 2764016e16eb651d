"""Concurrency limits' port and pools: the pools an execution takes a slot of
(:func:`pools_for`, named by :func:`pool_name`), and :class:`Slots`, the slots of pools
held by live node leases — its backends :mod:`cairn.lease.slots` and
:mod:`cairn.lease.redis_slots`, which keep them beside the leases. Taking, parking and
waking is the engine's (:class:`cairn.engine.slots.SlotGate`)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from cairn.model.definition import ConcurrencyLimit, RateLimit, TaskNode, WorkflowDefinition

Pool = tuple[str, int]  # (pool, limit)


class Slots(Protocol):
    """Slots of pools, fleet-wide, each held by a live node lease (``holder``:
    ``<lease key>|<token>``, see :func:`holder_of`)."""

    def take(self, pools: Sequence[Pool], holder: str) -> str | None:
        """A slot of each ``(pool, limit)`` for ``holder`` (one it holds already counts);
        None when all are taken — else the first pool that is full, its contention
        counter bumped (the first pool, if the holder's lease is no longer live), and
        none is taken."""
        ...

    def give_back(self, pools: Sequence[str], holder: str) -> Mapping[str, int]:
        """``holder``'s slots of these pools are free again; those of them a taker has
        found full since they were last settled, each with its contention counter
        (only there may anyone wait)."""
        ...

    def settle(self, pool: str, contention: int) -> None:
        """Nobody waits for ``pool``: forget that it was found full — unless a taker
        found it full again since ``contention`` was read, who may be parking now."""
        ...

    def holders(self, pools: Sequence[str]) -> Mapping[str, int]:
        """How many live leases hold a slot of each pool."""
        ...

    def pools(self, limit: int = 1000) -> list[str]:
        """Pools some lease holds (or held: a dead holder's is dropped when counted)."""
        ...


def holder_of(lease_key: str, token: str) -> str:
    return f"{lease_key}|{token}"


# How long a pool name may be (its column's size): a longer value is named by its digest.
MAX_POOL = 400
NAMESPACE_POOL = "*"  # the namespace's own pool: every execution in it (a default limit)


def pools_for(
    definition: WorkflowDefinition,
    node: TaskNode,
    *,
    namespace: str,
    state: Mapping[str, Any],
    run_input: Mapping[str, Any],
    namespace_limit: int = 0,
    owner: str | None = None,
) -> list[Pool]:
    """The pools an execution of ``node`` takes a slot of, each with its limit: the
    node's limits, its workflow's, and the namespace's default (0: none).

    A limit the definition declares is the definition's: its pool is in ``owner``'s
    namespace (the one that registered it; None: the run's own), so the runs of a shared
    workflow in every namespace hold its author's one limit on what its handlers call,
    and never share a pool with another namespace's key of the same name. The
    namespace's default is the run's own namespace's."""
    pools: dict[str, int] = {}
    for limit in (*node.concurrency, *definition.concurrency):
        name = pool_name(owner or namespace, limit, state, run_input)
        pools[name] = min(limit.limit, pools.get(name, limit.limit))
    if namespace_limit > 0:
        pools[f"{namespace}/{NAMESPACE_POOL}"] = namespace_limit
    return sorted(pools.items())


def pool_name(
    namespace: str,
    limit: ConcurrencyLimit | RateLimit,
    state: Mapping[str, Any],
    run_input: Mapping[str, Any],
) -> str:
    """``<namespace>/<constant>``, or ``<namespace>/<path>=<value>`` (a value missing
    from the state or input is ``null``: those executions share one pool)."""
    path = limit.path
    if path is None:
        return f"{namespace}/{limit.key}"
    value: Any = state if path[0] == "state" else run_input
    for part in path[1:]:
        value = value.get(part) if isinstance(value, Mapping) else None
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    name = f"{namespace}/{limit.key}={text}"
    if len(name) > MAX_POOL:
        name = f"{namespace}/{limit.key}#{hashlib.sha256(text.encode()).hexdigest()}"
    return name
