"""Limits in a definition: ``concurrency`` and ``rate`` — one limit or a list of
them — on a task or on the whole workflow (for each of its tasks); ``dependency`` — the
outside systems a task calls, each behind a circuit breaker."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import TypeVar

from cairn.definitions import format as fmt
from cairn.definitions.reader import Reader
from cairn.model.definition import ConcurrencyLimit, Dependency, Rate, RateLimit

T = TypeVar("T")
PATH = re.compile(r"^(state|input)(\.[A-Za-z_][A-Za-z0-9_\-]*)+$")
CONSTANT = re.compile(r"^[A-Za-z0-9_.:@/\-]{1,100}$")
RATE = re.compile(r"^\s*([0-9]+)\s*/\s*([a-z]+)\s*$")
PERIODS = {"s": 1.0, "sec": 1.0, "second": 1.0, "min": 60.0, "minute": 60.0, "h": 3600.0,
           "hour": 3600.0}  # fmt: skip


def _each(
    reader: Reader,
    raw: object,
    node_id: str | None,
    what: str,
    *,
    read_one: Callable[[Reader, object, str | None], T | None],
    name_of: Callable[[T], str],
) -> tuple[T, ...]:
    """One item or a list of them (each applies), no two of one name."""
    if raw is None:
        return ()
    found: list[T] = []
    for given in raw if isinstance(raw, list) else [raw]:
        item = read_one(reader, given, node_id)
        if item is None:
            continue
        if any(name_of(other) == name_of(item) for other in found):
            reader.fault("bad_value", f"'{what}' names {name_of(item)!r} twice", node_id)
            continue
        found.append(item)
    return tuple(found)


def read_concurrency(
    reader: Reader, raw: object, node_id: str | None
) -> tuple[ConcurrencyLimit, ...]:
    """``{key: "state.tenant", limit: 10}``, or a list of such (each applies)."""
    return _each(reader, raw, node_id, "concurrency", read_one=_limit, name_of=lambda c: c.key)


def _limit(reader: Reader, raw: object, node_id: str | None) -> ConcurrencyLimit | None:
    if not isinstance(raw, Mapping):
        reader.fault(
            "bad_value",
            f"'concurrency' is {{key: EXPRESSION, limit: N}} (or a list of them), got {raw!r}",
            node_id,
        )
        return None
    reader.closed(raw, fmt.CONCURRENCY, "concurrency", node_id, where="concurrency")
    key, limit = raw.get("key"), raw.get("limit")
    count = reader.positive_int(limit, "concurrency.limit", node_id)
    if limit is None:
        reader.fault("bad_value", "'concurrency' needs a limit", node_id)
    if not _key(reader, key, "concurrency", node_id) or not isinstance(key, str):
        return None
    return ConcurrencyLimit(key, count) if count is not None else None


def _key(reader: Reader, key: object, what: str, node_id: str | None) -> bool:
    """Whether ``key`` is a path into the state or input, or a constant (else a fault)."""
    if not isinstance(key, str) or not key:
        reader.fault(
            "bad_value",
            f"'{what}.key' is a path (state.FIELD, input.FIELD) or a constant name, got {key!r}",
            node_id,
        )
        return False
    if key.split(".")[0] in {"state", "input"} and "." in key:
        if not PATH.match(key):
            reader.fault("bad_value", f"'{what}.key' {key!r} is not a path of field names", node_id)
            return False
    elif not CONSTANT.match(key):
        reader.fault(
            "bad_value",
            f"'{what}.key' {key!r}: a constant is up to 100 letters, digits and _.:@/-",
            node_id,
        )
        return False
    return True


def read_rate(reader: Reader, raw: object, node_id: str | None) -> tuple[RateLimit, ...]:
    """``{key: openai-prod, requests: 600/min, tokens: 200000/min}``, or a list of such
    (each applies)."""
    return _each(reader, raw, node_id, "rate", read_one=_rate_limit, name_of=lambda r: r.key)


def _rate_limit(reader: Reader, raw: object, node_id: str | None) -> RateLimit | None:
    if not isinstance(raw, Mapping):
        reader.fault(
            "bad_value",
            "'rate' is {key: EXPRESSION, requests: N/PERIOD, tokens: N/PERIOD} (or a list of "
            f"them), got {raw!r}",
            node_id,
        )
        return None
    reader.closed(raw, fmt.RATE, "rate", node_id, where="rate")
    requests = _rate(reader, raw.get("requests"), "rate.requests", node_id)
    tokens = _rate(reader, raw.get("tokens"), "rate.tokens", node_id)
    if raw.get("requests") is None and raw.get("tokens") is None:
        reader.fault(
            "bad_value", "'rate' needs requests: N/PERIOD, tokens: N/PERIOD or both", node_id
        )
        return None
    key = raw.get("key")
    if not _key(reader, key, "rate", node_id) or not isinstance(key, str):
        return None
    if (requests is None and raw.get("requests") is not None) or (
        tokens is None and raw.get("tokens") is not None
    ):
        return None  # faulted already
    return RateLimit(key, requests, tokens)


def _rate(reader: Reader, raw: object, what: str, node_id: str | None) -> Rate | None:
    """``600/min``, ``10/s``, ``5000/h``."""
    if raw is None:
        return None
    found = RATE.match(raw) if isinstance(raw, str) else None
    period = PERIODS.get(found.group(2)) if found else None
    if found is None or period is None or int(found.group(1)) < 1:
        reader.fault(
            "bad_value",
            f"'{what}' is a positive count per s, min or h (600/min, 10/s), got {raw!r}",
            node_id,
        )
        return None
    return Rate(int(found.group(1)), period)


def read_dependencies(reader: Reader, raw: object, node_id: str) -> tuple[Dependency, ...]:
    """``payments``, ``{name: payments, failures: 5, window: 60s, open_for: 30s}``, or a
    list of such."""
    return _each(reader, raw, node_id, "dependency", read_one=_dependency, name_of=lambda d: d.name)


def _dependency(reader: Reader, raw: object, node_id: str | None) -> Dependency | None:
    spec: Mapping[str, object] = {"name": raw} if isinstance(raw, str) else {}
    if isinstance(raw, Mapping):
        reader.closed(raw, fmt.DEPENDENCY, "dependency", node_id, where="dependency")
        spec = raw
    name = spec.get("name")
    if not isinstance(name, str) or not CONSTANT.match(name):
        reader.fault(
            "bad_value",
            "'dependency' is a name (up to 100 letters, digits and _.:@/-) or "
            f"{{name: NAME, failures: N, window: DURATION, open_for: DURATION}}, got {raw!r}",
            node_id,
        )
        return None
    failures = reader.positive_int(spec.get("failures"), "dependency.failures", node_id)
    window = reader.duration(spec.get("window"), node_id, "'dependency.window'")
    open_for = reader.duration(spec.get("open_for"), node_id, "'dependency.open_for'")
    defaults = Dependency(name)
    return Dependency(
        name,
        failures=failures or defaults.failures,
        window=window or defaults.window,
        open_for=open_for or defaults.open_for,
    )
