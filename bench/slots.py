"""What a concurrency limit costs a step when nobody waits for its pool.

    python -m bench.slots                 # 2,000 take + give-back cycles, real PG and Redis

Each cycle is what a worker does around an uncontended limited node: acquire its lease,
take a slot (``SlotGate.enter``), give it back (``SlotGate.leave``), release the lease.
``leave`` looks for waiters only when a taker has found the pool full since it was last
settled. The baseline, in the same run: the same cycles with a look for waiters (one
PostgreSQL transaction) after every give-back, as every ``leave`` did before. Prints
each's cycles per second and time per cycle, and the ratio.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence

import redis

from bench.chain import REDIS, admin, fresh_database
from cairn.engine.slots import SlotGate
from cairn.lease.redis import RedisLeases
from cairn.lease.redis_slots import RedisSlots
from cairn.limits.concurrency import holder_of
from cairn.model.events import Phase
from cairn.model.messages import NodeMessage
from cairn.store.backends import store_for
from cairn.store.database import make_engine


class _NoBroker:
    def publish(self, messages: Sequence[NodeMessage]) -> bool:
        return True

    def backlog(self, queue: str | None = None) -> int | None:
        return 0


def _cycles(gate: SlotGate, leases: RedisLeases, n: int, *, wake_always: bool) -> float:
    pools = [("bench/uncontended", 10)]
    message = NodeMessage("run", "wf", 1, "call", 1, 1, Phase.RUN)
    started = time.perf_counter()
    for i in range(n):
        lease = leases.acquire(f"cairn:lease:bench:{i}", 30)
        assert lease is not None
        holder = holder_of(lease.key, lease.token)
        assert gate.enter(message, pools, holder, "bench")
        gate.leave(pools, holder)
        if wake_always:
            gate.wake(pools)
        leases.release(lease)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=2000)
    args = parser.parse_args()
    database, url = fresh_database("cairn_slots")
    client = redis.Redis.from_url(f"{REDIS}/14")
    client.flushdb()
    engine = make_engine(url)
    try:
        gate = SlotGate(RedisSlots(client), store_for(engine), _NoBroker())
        leases = RedisLeases(client)
        _cycles(gate, leases, 100, wake_always=False)  # warm the connections and scripts
        rounds = {
            "baseline (a wake after every give-back)": _cycles(
                gate, leases, args.cycles, wake_always=True
            ),
            "uncontended pool (no wake)": _cycles(gate, leases, args.cycles, wake_always=False),
        }
    finally:
        engine.dispose()
        client.flushdb()
        with admin() as conn:
            conn.execute(f'DROP DATABASE "{database}" WITH (FORCE)')
    for name, seconds in rounds.items():
        print(
            f"{name:42} {args.cycles / seconds:8.0f} cycles/s "
            f"{seconds / args.cycles * 1e6:8.0f} µs/cycle"
        )
    base, new = rounds.values()
    print(f"ratio (baseline time / uncontended time): {base / new:.2f}x")


if __name__ == "__main__":
    main()
