"""Runs' chunk logs (what streaming model calls say) read from an event loop, without a
thread: the API's open streams wait on them by the thousand.

With Redis, one blocking ``XREAD`` over every followed run's log (redis.asyncio, a
small connection pool) tells which logs grew; each stream then reads its own log from
where it is. The in-process leases answer at once, so their log is simply looked at
once per wait.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import Any, Protocol

import redis
import redis.asyncio

from cairn.lease.memory import MemoryLeases
from cairn.lease.port import CHUNKS_PER_READ, Leases
from cairn.lease.redis import CHUNKS_PREFIX, RedisLeases

# The reads of streams woken together share these (each read is one quick XREAD).
POOL_CONNECTIONS = 16

Chunks = list[tuple[str, dict[str, Any]]]


class ChunkLog(Protocol):
    async def read(self, run_id: str, after: str) -> Chunks:
        """The run's chunks after the entry ``after`` ("0": from the start), in order,
        at most ``CHUNKS_PER_READ``; no waiting."""
        ...

    async def grown(self, after: Mapping[str, str], wait_s: float) -> dict[str, str]:
        """Which of these runs' logs have entries after the id given for each, with
        the newest id seen: waiting up to ``wait_s`` for one."""
        ...

    async def close(self) -> None: ...


def chunk_log(leases: Leases) -> ChunkLog:
    """The chunk log of these leases, for an event loop."""
    if isinstance(leases, RedisLeases):
        return RedisChunkLog(leases.client)
    if isinstance(leases, MemoryLeases):
        return LocalChunkLog(leases)
    raise TypeError(f"no chunk log reader for {type(leases).__name__}")


class RedisChunkLog:
    def __init__(self, client: redis.Redis) -> None:
        pool = client.connection_pool
        # The same server, database and credentials as the leases' own client.
        kind = getattr(redis.asyncio, pool.connection_class.__name__, redis.asyncio.Connection)
        self.client = redis.asyncio.Redis(
            connection_pool=redis.asyncio.BlockingConnectionPool(
                connection_class=kind, max_connections=POOL_CONNECTIONS, **pool.connection_kwargs
            )
        )

    async def read(self, run_id: str, after: str) -> Chunks:
        key = f"{CHUNKS_PREFIX}{run_id}"
        found: Any = await self.client.xread({key: after}, count=CHUNKS_PER_READ)
        return [
            (entry_id.decode(), json.loads(fields[b"chunk"]))
            for _stream, entries in found or []
            for entry_id, fields in entries
        ]

    async def grown(self, after: Mapping[str, str], wait_s: float) -> dict[str, str]:
        if not after:
            await asyncio.sleep(wait_s)
            return {}
        streams: Any = {f"{CHUNKS_PREFIX}{run_id}": last for run_id, last in after.items()}
        found: Any = await self.client.xread(
            streams, count=CHUNKS_PER_READ, block=max(1, int(wait_s * 1000))
        )
        return {
            stream.decode().removeprefix(CHUNKS_PREFIX): entries[-1][0].decode()
            for stream, entries in found or []
            if entries
        }

    async def close(self) -> None:
        await self.client.aclose()


class LocalChunkLog:
    """The in-process leases' log: reading it takes a lock, never a wait."""

    def __init__(self, leases: MemoryLeases) -> None:
        self.leases = leases

    async def read(self, run_id: str, after: str) -> Chunks:
        return self.leases.read_chunks(run_id, after, 0.0)

    async def grown(self, after: Mapping[str, str], wait_s: float) -> dict[str, str]:
        await asyncio.sleep(wait_s)
        newest = {
            run_id: self.leases.read_chunks(run_id, last, 0.0) for run_id, last in after.items()
        }
        return {run_id: chunks[-1][0] for run_id, chunks in newest.items() if chunks}

    async def close(self) -> None:
        return None
