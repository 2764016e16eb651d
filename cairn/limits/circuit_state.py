"""Circuits' state (the breaker: :mod:`cairn.limits.circuits`), fleet-wide in Redis —
:class:`RedisCircuits`, by ``limits/scripts/circuit_*.lua`` on the Redis server's clock —
or in this process's memory for the embedded runtime (:class:`MemoryCircuits`). One
contract suite holds them together (:class:`cairn.testing.circuits_contract.CircuitsContract`).

Per dependency: the runs that failed in a row within the window (a sorted set that
expires with the window, emptied by any success), and, once open, a hash of when it
opened, until when it stays open, and how often it opened since it last closed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources

import redis

from cairn.limits.circuits import Change, CircuitLook, CircuitReport
from cairn.model.definition import Dependency

CIRCUIT_PREFIX = "cairn:circuit:"
FAILURES_PREFIX = "cairn:circuit-failures:"
_CHANGES = {1: Change.OPENED, 2: Change.REOPENED}
# A success: nothing failed in a row any more, and an open circuit closes (1 if it was).
SUCCEEDED = """
local was_open = redis.call('exists', KEYS[1])
redis.call('del', KEYS[1], KEYS[2])
return was_open
"""


def _script(name: str) -> str:
    return resources.files("cairn.limits").joinpath("scripts", name).read_text()


def _limit(open_until: float | None, now: float) -> int | None:
    if open_until is None:
        return None
    return 0 if now < open_until else 1


def _state(open_until: float | None, now: float) -> str:
    return {None: "closed", 0: "open", 1: "half_open"}[_limit(open_until, now)]


class RedisCircuits:
    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self._failed = client.register_script(_script("circuit_failed.lua"))
        self._limits = client.register_script(_script("circuit_limits.lua"))
        self._succeeded = client.register_script(SUCCEEDED)

    def look(self, names: Sequence[str]) -> Mapping[str, CircuitLook]:
        if not names:
            return {}
        keys = [*(CIRCUIT_PREFIX + name for name in names), *(FAILURES_PREFIX + n for n in names)]
        found = [int(v) for v in self._limits(keys=keys)]
        return {
            name: CircuitLook(None if v < 0 else v, counting=v != -1)
            for name, v in zip(names, found, strict=True)
        }

    def limits(self, names: Sequence[str]) -> Mapping[str, int | None]:
        return {name: look.limit for name, look in self.look(names).items()}

    def failed(self, dependency: Dependency, run_id: str) -> Change | None:
        answer = self._failed(
            keys=[CIRCUIT_PREFIX + dependency.name, FAILURES_PREFIX + dependency.name],
            args=[
                run_id,
                dependency.failures,
                int(dependency.window.total_seconds() * 1000),
                int(dependency.open_for.total_seconds() * 1000),
            ],
        )
        return _CHANGES.get(int(answer))

    def succeeded(self, name: str) -> Change | None:
        was_open = self._succeeded(keys=[CIRCUIT_PREFIX + name, FAILURES_PREFIX + name])
        return Change.CLOSED if int(was_open) else None

    def reports(self, limit: int = 1000) -> list[CircuitReport]:
        names: set[str] = set()
        for prefix in (CIRCUIT_PREFIX, FAILURES_PREFIX):
            for key in self.client.scan_iter(match=prefix + "*", count=500):
                names.add(key.decode().removeprefix(prefix))
                if len(names) >= limit:
                    break
        ordered = sorted(names)[:limit]
        with self.client.pipeline(transaction=False) as pipe:
            pipe.time()
            for name in ordered:
                pipe.hgetall(CIRCUIT_PREFIX + name)
                pipe.zcard(FAILURES_PREFIX + name)
            seconds, micros = (answers := pipe.execute())[0]
        now = seconds + micros / 1e6
        reports = []
        for name, state, failed in zip(ordered, answers[1::2], answers[2::2], strict=True):
            fields = {k.decode(): float(v) for k, v in state.items()}
            open_until = fields["open_until"] / 1000 if "open_until" in fields else None
            reports.append(
                CircuitReport(
                    name,
                    _state(open_until, now),
                    int(fields.get("failures", failed)),
                    fields["opened_at"] / 1000 if "opened_at" in fields else None,
                    open_until,
                    int(fields.get("opens", 0)),
                )
            )
        return reports


@dataclass
class _Circuit:
    failures: dict[str, float] = field(default_factory=dict)  # run id -> when
    opened_at: float | None = None
    open_until: float | None = None
    opens: int = 0
    failed_since: int = 0


class MemoryCircuits:
    """Circuits in this process's memory, on its clock (the embedded runtime)."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._circuits: dict[str, _Circuit] = {}

    def look(self, names: Sequence[str]) -> Mapping[str, CircuitLook]:
        now = self._clock()
        with self._lock:
            found = {name: self._circuits.get(name) for name in names}
            return {
                name: CircuitLook(
                    _limit(c.open_until if c else None, now),
                    counting=c is not None and (c.open_until is not None or bool(c.failures)),
                )
                for name, c in found.items()
            }

    def limits(self, names: Sequence[str]) -> Mapping[str, int | None]:
        return {name: look.limit for name, look in self.look(names).items()}

    def failed(self, dependency: Dependency, run_id: str) -> Change | None:
        now = self._clock()
        with self._lock:
            circuit = self._circuits.setdefault(dependency.name, _Circuit())
            if circuit.open_until is not None:
                circuit.failed_since += 1
                if now < circuit.open_until:
                    return None
                circuit.open_until = now + dependency.open_for.total_seconds()
                circuit.opens += 1
                return Change.REOPENED
            since = now - dependency.window.total_seconds()
            circuit.failures = {r: at for r, at in circuit.failures.items() if at > since}
            circuit.failures[run_id] = now
            if len(circuit.failures) < dependency.failures:
                return None
            circuit.failed_since, circuit.failures = len(circuit.failures), {}
            circuit.opened_at, circuit.opens = now, 1
            circuit.open_until = now + dependency.open_for.total_seconds()
            return Change.OPENED

    def succeeded(self, name: str) -> Change | None:
        with self._lock:
            circuit = self._circuits.pop(name, None)
        return Change.CLOSED if circuit is not None and circuit.open_until is not None else None

    def reports(self, limit: int = 1000) -> list[CircuitReport]:
        now = self._clock()
        with self._lock:
            return [
                CircuitReport(
                    name,
                    _state(c.open_until, now),
                    c.failed_since if c.open_until is not None else len(c.failures),
                    c.opened_at,
                    c.open_until,
                    c.opens,
                )
                for name, c in sorted(self._circuits.items())
                if c.open_until is not None or c.failures
            ][:limit]
