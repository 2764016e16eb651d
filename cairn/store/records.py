"""The store's values and helpers shared by every backend: typed records (a snapshot, the
fleet's gauges, what recording an intent came to), timestamps in and out of the
database, snapshot encoding, and the WHERE clauses of an execution's row."""

from __future__ import annotations

import hashlib
import json
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import and_

from cairn import clock
from cairn.errors import StoreError
from cairn.model.keys import ExecutionKey
from cairn.model.statuses import EXECUTION_ACTIVE
from cairn.store.schema import executions

ACTIVE_EXECUTION = tuple(status.value for status in EXECUTION_ACTIVE)


class Intent(StrEnum):
    """What recording an effect's intent came to (:meth:`Tx.record_intent`)."""

    RECORDED = "recorded"  # a new intent: the call may be made
    KNOWN = "known"  # the key is in the ledger already
    FENCED = "fenced"  # refused: a newer claim of the execution is on record


def utcnow() -> datetime:
    return clock.utcnow()


def from_epoch(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


def to_epoch(stamp: datetime) -> float:
    """Seconds since the epoch; SQLite hands back stored UTC times without a zone."""
    return (stamp if stamp.tzinfo is not None else stamp.replace(tzinfo=UTC)).timestamp()


def spec_digest(spec: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(spec, sort_keys=True, default=str).encode()).hexdigest()


@dataclass(frozen=True)
class Snapshot:
    seq: int
    format: int
    state: dict[str, Any]


@dataclass(frozen=True)
class FleetGauges:
    """Counts by status, and each backlog as (rows, the oldest one's time or None)."""

    runs: Mapping[str, int]
    effects: Mapping[str, int]
    held_executions: int
    unsent: tuple[int, float | None]  # outbox messages not yet published
    due_timers: tuple[int, float | None]  # timers due and not fired (oldest: its due time)
    inbox: tuple[int, float | None]
    notifications: tuple[int, float | None]  # webhooks not delivered nor given up


def encode_snapshot(state_json: str, compress_over_bytes: int) -> tuple[str, bytes]:
    body = state_json.encode()
    if len(body) > compress_over_bytes:
        return "json+zlib", zlib.compress(body, 6)
    return "json", body


def decode_snapshot(codec: str, body: bytes) -> dict[str, Any]:
    if codec == "json+zlib":
        body = zlib.decompress(body)
    elif codec != "json":
        raise StoreError(f"unknown snapshot codec {codec!r}")
    data: dict[str, Any] = json.loads(body)
    return data


def where(key: ExecutionKey) -> Any:
    """The row of execution ``key``."""
    return and_(
        executions.c.run_id == key.run_id,
        executions.c.node == key.node,
        executions.c.iteration == key.iteration,
        executions.c.phase == key.phase,
    )


def unfinished(key: ExecutionKey, attempt: int) -> Any:
    """Execution ``key`` at ``attempt``, while it has no result."""
    return and_(
        where(key),
        executions.c.attempt == attempt,
        executions.c.status.in_(ACTIVE_EXECUTION),
    )
