"""Task nodes: what a task runs (a handler or a child workflow), how its result is kept
(``persist``), and where it goes next (``next``, a ``branch`` on a guard, or a ``route``
on a state field)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, TypeVar

from cairn.definitions import format as fmt
from cairn.definitions.limits import read_concurrency, read_dependencies, read_rate
from cairn.definitions.reader import Reader
from cairn.model.definition import (
    DURABLE,
    Branch,
    CheckpointPolicy,
    ChildRun,
    ContextPolicy,
    Persist,
    PersistKind,
    Route,
    TaskNode,
)
from cairn.model.workflow_names import BadWorkflowName, WorkflowName

CACHED_FORM = re.compile(r"^cached\((?P<ttl>[^)]+)\)$")


T = TypeVar("T")


def task_node(
    reader: Reader, node_id: str, raw: Mapping[str, Any], common: dict[str, Any]
) -> TaskNode:
    """A task node; ``common`` holds the keys every kind of node shares (see
    :mod:`cairn.definitions.nodes`)."""
    edges = [key for key in fmt.EDGES if key in raw]
    if len(edges) > 1:
        reader.fault("conflicting_edges", f"use one of next, branch or route, not {edges}", node_id)
    next_node = reader.target(raw["next"], node_id, "next") if "next" in raw else None
    irreversible = raw.get("irreversible", False)
    if not isinstance(irreversible, bool):
        reader.fault("bad_value", "'irreversible' must be true or false", node_id)
        irreversible = False
    if irreversible and raw.get("handler") is None:
        reader.fault("bad_value", "'irreversible' marks a node with a handler", node_id)
    child = _child(reader, node_id, raw["child"]) if "child" in raw else None
    if child is not None and "handler" in raw:
        reader.fault(
            "ambiguous_node", "a task runs a handler or a child workflow, not both", node_id
        )
    invalidates = raw.get("invalidates", [])
    if not isinstance(invalidates, list) or not all(isinstance(n, str) for n in invalidates):
        reader.fault("bad_value", "'invalidates' is a list of nodes", node_id)
        invalidates = []
    queue = reader.queue(raw["queue"], node_id) if "queue" in raw else reader.default_queue
    if child is not None:
        if "queue" in raw:
            reader.fault(
                "bad_value",
                "'queue' sends a node to the workers of a queue: a child run runs on none "
                "(its own nodes say where they run)",
                node_id,
            )
        queue = None
    return TaskNode(
        id=node_id,
        handler=reader.ref(raw.get("handler"), node_id, "handler"),
        child=child,
        persist=_persist(reader, node_id, raw.get("persist")),
        invalidates=tuple(invalidates),
        next=next_node,
        branch=_branch(reader, node_id, raw["branch"]) if "branch" in raw else None,
        route=_route(reader, node_id, raw["route"]) if "route" in raw else None,
        irreversible=irreversible,
        queue=queue,
        **_handler_parts(reader, node_id, raw),
        extra=reader.metadata(raw, node_id),
        **common,
    )


def _handler_parts(reader: Reader, node_id: str, raw: Mapping[str, Any]) -> dict[str, Any]:
    """What a task's handler runs under: its stall watch, checkpoints, context budget,
    concurrency, dependencies, rate and HTTP recording — each a fault on a task without
    a handler."""
    needs = _HandlerOnly(reader, node_id, raw)
    record = reader.record_http and needs.handled
    if "record" in raw:
        record = needs("record", reader.record(raw["record"], node_id), "records a handler's HTTP")
    return {
        "stall_after": needs(
            "stall_after",
            reader.duration(raw.get("stall_after"), node_id, "stall_after"),
            "watches a handler's progress",
        ),
        "checkpoint": needs(
            "checkpoint",
            _checkpoint(reader, node_id, raw["checkpoint"]) if "checkpoint" in raw else None,
            "saves a handler's working context",
        ),
        "context": needs(
            "context",
            _context(reader, node_id, raw["context"]) if "context" in raw else None,
            "budgets a handler's model calls",
        ),
        "concurrency": needs(
            "concurrency",
            read_concurrency(reader, raw.get("concurrency"), node_id),
            "limits a handler's executions",
        ),
        "dependencies": needs(
            "dependency",
            read_dependencies(reader, raw.get("dependency"), node_id),
            "guards a handler's calls",
        ),
        "rate": needs(
            "rate", read_rate(reader, raw.get("rate"), node_id), "limits a handler's model calls"
        ),
        "record_http": bool(record) and needs.handled,
    }


class _HandlerOnly:
    """Checks keys that only a node with a handler may set: a fault names the key and
    what it is for."""

    def __init__(self, reader: Reader, node_id: str, raw: Mapping[str, Any]) -> None:
        self.reader, self.node_id = reader, node_id
        self.handled = raw.get("handler") is not None

    def __call__(self, key: str, value: T, what: str) -> T:
        given = value is not None and value is not False and value not in ((), [], {})
        if given and not self.handled:
            self.reader.fault("bad_value", f"'{key}' {what}: it needs a handler", self.node_id)
        return value


def _checkpoint(reader: Reader, node_id: str, raw: object) -> CheckpointPolicy | None:
    """``{every: 30s, turns: 5}``: either or both."""
    if not isinstance(raw, Mapping) or not raw:
        reader.fault(
            "bad_value", f"'checkpoint' is {{every: DURATION, turns: N}}, got {raw!r}", node_id
        )
        return None
    reader.closed(raw, fmt.CHECKPOINT, "checkpoint", node_id, where="checkpoint")
    every = reader.duration(raw.get("every"), node_id, "checkpoint.every")
    turns = reader.positive_int(raw.get("turns"), "checkpoint.turns", node_id)
    if every is None and turns is None:
        return None
    return CheckpointPolicy(every=every, turns=turns)


def _context(reader: Reader, node_id: str, raw: object) -> ContextPolicy | None:
    """``{max_tokens: 8000, summarize: "pkg.mod:fn", keep: 4, pin: "pkg.mod:fn"}``."""
    if not isinstance(raw, Mapping):
        reader.fault(
            "bad_value",
            "'context' is {max_tokens: N, summarize: 'module:function', keep: N, "
            f"pin: 'module:function'}}, got {raw!r}",
            node_id,
        )
        return None
    reader.closed(raw, fmt.CONTEXT, "context", node_id, where="context")
    max_tokens = reader.positive_int(raw.get("max_tokens"), "context.max_tokens", node_id)
    summarize = reader.ref(raw.get("summarize"), node_id, "context.summarize")
    if max_tokens is None or summarize is None:
        if "max_tokens" not in raw or "summarize" not in raw:
            reader.fault("bad_value", "'context' needs max_tokens and a summarize handler", node_id)
        return None
    keep = raw.get("keep", ContextPolicy.keep)
    if isinstance(keep, bool) or not isinstance(keep, int) or keep < 0:
        reader.fault("bad_value", f"'context.keep' is a count of messages, got {keep!r}", node_id)
        keep = ContextPolicy.keep
    pin = reader.ref(raw.get("pin"), node_id, "context.pin")
    return ContextPolicy(max_tokens, summarize, keep, pin)


def _persist(reader: Reader, node_id: str, raw: object) -> Persist:
    """``durable`` (default), ``ephemeral``, ``cached(10m)`` or ``{cached: 10m, key:
    [field, ...]}``."""
    if raw is None or raw == PersistKind.DURABLE.value:
        return DURABLE
    if raw == PersistKind.EPHEMERAL.value:
        return Persist(PersistKind.EPHEMERAL)
    if isinstance(raw, str) and (match := CACHED_FORM.match(raw.strip())):
        raw = {"cached": match["ttl"]}
    if isinstance(raw, Mapping):
        reader.closed(raw, fmt.PERSIST, "persist", node_id, where="persist")
    if not isinstance(raw, Mapping) or "cached" not in raw:
        reader.fault(
            "bad_value",
            "'persist' is 'durable', 'ephemeral', 'cached(TTL)' or "
            f"{{cached: TTL, key: [field, ...]}}, got {raw!r}",
            node_id,
        )
        return DURABLE
    ttl = reader.duration(raw["cached"], node_id, "persist.cached")
    key = raw.get("key", [])
    if not isinstance(key, list) or not all(isinstance(field, str) for field in key):
        reader.fault("bad_value", "'persist.key' is a list of state fields", node_id)
        key = []
    return Persist(PersistKind.CACHED, ttl, tuple(key)) if ttl is not None else DURABLE


def _child(reader: Reader, node_id: str, raw: object) -> ChildRun | None:
    if isinstance(raw, str):
        raw = {"workflow": raw}
    if not isinstance(raw, Mapping) or not isinstance(raw.get("workflow"), str):
        reader.fault(
            "bad_value",
            "'child' names a workflow, or is a mapping with 'workflow' and optionally "
            "'version', 'input' and 'output' (lists of state fields)",
            node_id,
        )
        return None
    reader.closed(raw, fmt.CHILD, "child", node_id, where="child")
    try:  # [namespace/]workflow[@version]: refused now, not when a run gets there
        WorkflowName.parse(raw["workflow"])
    except BadWorkflowName as bad:
        reader.fault("bad_value", f"'child.workflow': {bad}", node_id)
    fields: dict[str, tuple[str, ...] | None] = {}
    for what in ("input", "output"):
        names = raw.get(what)
        if names is not None and (
            not isinstance(names, list) or not all(isinstance(n, str) for n in names)
        ):
            reader.fault("bad_value", f"'child.{what}' is a list of state fields", node_id)
            names = None
        fields[what] = tuple(names) if names is not None else None
    return ChildRun(
        workflow=raw["workflow"],
        version=reader.positive_int(raw.get("version"), "child.version", node_id),
        input=fields["input"],
        output=fields["output"],
    )


def _branch(reader: Reader, node_id: str, raw: object) -> Branch | None:
    if not isinstance(raw, Mapping):
        reader.fault("bad_value", "'branch' is a mapping with 'guard' and 'cases'", node_id)
        return None
    reader.closed(raw, fmt.BRANCH, "branch", node_id, where="branch")
    guard = reader.ref(raw.get("guard"), node_id, "guard")
    if guard is None:
        reader.fault("missing_guard", "'branch' needs a 'guard' (module:function)", node_id)
    cases = reader.label_map(node_id, raw.get("cases"), "cases")
    if guard is None or cases is None:
        return None
    return Branch(guard=guard, cases=cases)


def _route(reader: Reader, node_id: str, raw: object) -> Route | None:
    if not isinstance(raw, Mapping):
        reader.fault("bad_value", "'route' is a mapping with 'key', 'table' and 'default'", node_id)
        return None
    reader.closed(raw, fmt.ROUTE, "route", node_id, where="route")
    key = raw.get("key")
    if not isinstance(key, str) or not key:
        reader.fault("bad_value", "'route.key' must name a state field", node_id)
    table = reader.label_map(node_id, raw.get("table"), "table")
    default = raw.get("default")
    if default is None:
        reader.fault(
            "route_without_default",
            "a routing table needs a 'default' target for values not in the table",
            node_id,
        )
    if not isinstance(key, str) or table is None or default is None:
        return None
    return Route(key=key, table=table, default=reader.target(default, node_id, "default"))
