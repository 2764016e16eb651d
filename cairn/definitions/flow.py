"""Flow control in a definition: ``concurrency`` — one limit or a list of them — on a
task or on the whole workflow (for each of its tasks); ``dependency`` — the outside
systems a task calls, each behind a circuit breaker."""

from __future__ import annotations

import re
from collections.abc import Mapping

from cairn.definitions import format as fmt
from cairn.definitions.reader import Reader
from cairn.model.definition import ConcurrencyLimit, Dependency

PATH = re.compile(r"^(state|input)(\.[A-Za-z_][A-Za-z0-9_\-]*)+$")
CONSTANT = re.compile(r"^[A-Za-z0-9_.:@/\-]{1,100}$")


def read_concurrency(
    reader: Reader, raw: object, node_id: str | None
) -> tuple[ConcurrencyLimit, ...]:
    """``{key: "state.tenant", limit: 10}``, or a list of such (each applies)."""
    if raw is None:
        return ()
    given = raw if isinstance(raw, list) else [raw]
    limits: list[ConcurrencyLimit] = []
    for item in given:
        limit = _limit(reader, item, node_id)
        if limit is None:
            continue
        if any(other.key == limit.key for other in limits):
            reader.fault("bad_value", f"'concurrency' names the key {limit.key!r} twice", node_id)
            continue
        limits.append(limit)
    return tuple(limits)


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
    if not isinstance(key, str) or not key:
        reader.fault(
            "bad_value",
            "'concurrency.key' is a path (state.FIELD, input.FIELD) or a constant name, "
            f"got {key!r}",
            node_id,
        )
        return None
    if key.split(".")[0] in {"state", "input"} and "." in key:
        if not PATH.match(key):
            reader.fault(
                "bad_value", f"'concurrency.key' {key!r} is not a path of field names", node_id
            )
            return None
    elif not CONSTANT.match(key):
        reader.fault(
            "bad_value",
            f"'concurrency.key' {key!r}: a constant is up to 100 letters, digits and _.:@/-",
            node_id,
        )
        return None
    return ConcurrencyLimit(key, count) if count is not None else None


def read_dependencies(reader: Reader, raw: object, node_id: str) -> tuple[Dependency, ...]:
    """``payments``, ``{name: payments, failures: 5, window: 60s, open_for: 30s}``, or a
    list of such."""
    if raw is None:
        return ()
    given = raw if isinstance(raw, list) else [raw]
    found: list[Dependency] = []
    for item in given:
        dependency = _dependency(reader, item, node_id)
        if dependency is None:
            continue
        if any(other.name == dependency.name for other in found):
            reader.fault("bad_value", f"'dependency' names {dependency.name!r} twice", node_id)
            continue
        found.append(dependency)
    return tuple(found)


def _dependency(reader: Reader, raw: object, node_id: str) -> Dependency | None:
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
