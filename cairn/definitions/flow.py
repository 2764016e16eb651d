"""Flow control in a definition: ``concurrency`` — one limit or a list of them — on a
task or on the whole workflow (for each of its tasks)."""

from __future__ import annotations

import re
from collections.abc import Mapping

from cairn.definitions import format as fmt
from cairn.definitions.reader import Reader
from cairn.model.definition import ConcurrencyLimit

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
