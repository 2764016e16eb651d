"""The names things go by: an execution's key in PostgreSQL's idempotency table, and
the Redis keys of its lease, heartbeat record and fencing counter."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

LEASE_PREFIX = "cairn:lease:"
BEAT_PREFIX = "cairn:beat:"
FENCE_PREFIX = "cairn:fence:"


@dataclass(frozen=True)
class ExecutionKey:
    """One execution of one node: (run, node, visit, phase). Its attempts share it."""

    run_id: str
    node: str
    iteration: int
    phase: str

    def params(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "node": self.node,
            "iteration": self.iteration,
            "phase": self.phase,
        }

    def __str__(self) -> str:
        return f"{self.run_id}/{self.node}#{self.iteration}/{self.phase}"


@dataclass(frozen=True)
class Claim:
    """A worker's claim of an execution — its key, attempt and fencing token — as
    PostgreSQL checks it: a write made under the claim goes in only while that execution
    is unfinished at that attempt and no newer claim of it is on record."""

    key: ExecutionKey
    attempt: int
    fence: int


def lease_key(run_id: str, node: str, iteration: int, phase: str) -> str:
    return f"{LEASE_PREFIX}{run_id}:{node}:{iteration}:{phase}"


def parse_lease_key(key: str) -> tuple[str, str, int, str]:
    """(run id, node, iteration, phase) of a lease key: node names hold no colon."""
    run_id, node, iteration, phase = key.removeprefix(LEASE_PREFIX).rsplit(":", 3)
    return run_id, node, int(iteration), phase


def beat_key(key: str) -> str:
    return key.replace(LEASE_PREFIX, BEAT_PREFIX, 1)


def fence_key(key: str) -> str:
    return key.replace(LEASE_PREFIX, FENCE_PREFIX, 1)
