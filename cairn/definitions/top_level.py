"""The definition's top level: its name, version and start, its nodes (read by
:mod:`cairn.definitions.nodes`), and the workflow-wide settings — the declared format,
``node_timeout``, the input and state schemas, ``on_resume``, the budget, the anomaly block, the
schedules, the state keys that accumulate (``reducers``) and ``versioning``."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from cairn.definitions import format as fmt
from cairn.definitions.anomaly_block import read_anomaly
from cairn.definitions.limits import read_concurrency, read_rate
from cairn.definitions.nodes import read_node
from cairn.definitions.reader import Reader, label
from cairn.definitions.reducers_block import read_reducers
from cairn.definitions.schedules_block import read_schedules
from cairn.model.builds import Versioning
from cairn.model.definition import (
    DEFAULT_CANCEL_TIMEOUT,
    DEFAULT_NODE_TIMEOUT,
    AnyNode,
    OnResume,
    WorkflowDefinition,
    ref_path_of,
)

NAME_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]*$")


def read_workflow(reader: Reader, spec: object) -> WorkflowDefinition | None:
    """The whole definition, its faults recorded on ``reader``; ``None`` if ``spec`` is not
    even a mapping. The graph checks run on the result afterwards (see the loader)."""
    if not isinstance(spec, Mapping):
        reader.fault("not_a_mapping", f"a definition is a mapping, got {type(spec).__name__}")
        return None
    reader.format_version = _declared_format(reader, spec.get("format"))
    reader.closed(spec, fmt.TOP, "workflow", None)
    name, version, start = _identity(reader, spec)
    reader.node_timeout = _default_timeout(reader, spec.get("node_timeout"))
    reader.record_http = reader.record(spec.get("record"), None)
    reader.default_queue = reader.queue(spec["queue"], None) if "queue" in spec else None
    nodes = _nodes(reader, spec.get("nodes"))
    max_visits = reader.positive_int(spec.get("max_visits"), "max_visits", None)
    compensate_on_cancel = spec.get("compensate_on_cancel", False)
    if not isinstance(compensate_on_cancel, bool):
        reader.fault("bad_value", "'compensate_on_cancel' must be true or false")
        compensate_on_cancel = False
    description = spec.get("description", "")
    cancel_timeout = reader.duration(spec.get("cancel_timeout"), None, "cancel_timeout")
    input_schema = _input_schema(reader, spec.get("input"))
    state_schema = _state_schema(reader, spec.get("state"))
    on_resume = _on_resume(reader, spec.get("on_resume"))
    budget = reader.amounts(spec.get("budget"), None, "budget") or {}
    anomaly = read_anomaly(reader, spec.get("anomaly"))
    concurrency = read_concurrency(reader, spec.get("concurrency"), None)
    rate = read_rate(reader, spec.get("rate"), None)
    schedules = read_schedules(reader, spec.get("schedules"))
    reducers = read_reducers(reader, spec.get("reducers"), nodes)
    return WorkflowDefinition(
        name=name,
        version=version,
        start=start,
        nodes=nodes,
        description=str(description or ""),
        max_visits=max_visits,
        compensate_on_cancel=compensate_on_cancel,
        cancel_timeout=cancel_timeout or DEFAULT_CANCEL_TIMEOUT,
        node_timeout=reader.node_timeout,
        format=reader.format_version,
        input_schema=input_schema,
        state_schema=state_schema,
        on_resume=on_resume,
        budget=budget,
        anomaly=anomaly,
        concurrency=concurrency,
        rate=rate,
        schedules=schedules,
        queue=reader.default_queue,
        reducers=reducers,
        versioning=_versioning(reader, spec.get("versioning", Versioning.ANY.value)),
        extra=reader.metadata(spec, None),
        # Schedules say when runs start, not how they run: they may change without a
        # new version, so they are no part of what a version pins.
        spec=plain_spec({key: value for key, value in spec.items() if key != "schedules"}),
    )


def _versioning(reader: Reader, raw: object) -> Versioning:
    """Which build runs the workflow's nodes (docs/versions.md); ``any`` where faulty."""
    if isinstance(raw, str) and raw in {v.value for v in Versioning}:
        return Versioning(raw)
    choices = ", ".join(repr(v.value) for v in Versioning)
    reader.fault("bad_versioning", f"'versioning' must be one of {choices}, got {raw!r}")
    return Versioning.ANY


def _identity(reader: Reader, spec: Mapping[str, Any]) -> tuple[str, int, str]:
    """The definition's name, version and first node (placeholders where faulty)."""
    name = spec.get("name")
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        reader.fault("bad_name", f"'name' must be an identifier-like string, got {name!r}")
        name = "<unnamed>"
    version = spec.get("version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        reader.fault("bad_version", f"'version' must be a positive integer, got {version!r}")
        version = 0
    start = spec.get("start")
    if not isinstance(start, str) or not start:
        reader.fault("missing_start", f"'start' must name the first node, got {start!r}")
        start = ""
    return name, version, start


def _nodes(reader: Reader, raw_nodes: object) -> dict[str, AnyNode]:
    """Every node that reads; each fault recorded."""
    if not isinstance(raw_nodes, Mapping) or not raw_nodes:
        reader.fault("no_nodes", "'nodes' must be a non-empty mapping of node id to node")
        return {}
    nodes: dict[str, AnyNode] = {}
    for raw_id, raw in raw_nodes.items():
        node_id = str(raw_id)
        if not NAME_PATTERN.match(node_id):
            reader.fault("bad_name", f"node id {node_id!r} is not identifier-like", node_id)
        node = read_node(reader, node_id, raw)
        if node is not None:
            nodes[node_id] = node
    return nodes


def _declared_format(reader: Reader, raw: object) -> int:
    if raw is None:
        return reader.implied_format
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < 1:
        reader.fault("bad_value", f"'format' must be a positive integer, got {raw!r}")
        return fmt.FORMAT_VERSION
    if raw > fmt.FORMAT_VERSION:
        reader.fault(
            "unsupported_format",
            f"written for definition format {raw}; this cairn reads formats up to "
            f"{fmt.FORMAT_VERSION} (upgrade cairn, or write it for an older format)",
        )
        return fmt.FORMAT_VERSION
    return raw


def _default_timeout(reader: Reader, raw: object) -> timedelta | None:
    """``node_timeout``: the timeout of every task running a handler that gives none
    of its own (1 h if it is not said; ``none``: no default). Format 1 has none."""
    if not reader.has_defaults:
        return None  # a node_timeout key is a newer_key fault already
    if raw is None:
        return DEFAULT_NODE_TIMEOUT
    if reader.opted_out(raw, None, "node_timeout"):
        return None
    return reader.duration(raw, None, "node_timeout") or DEFAULT_NODE_TIMEOUT


def _input_schema(reader: Reader, raw: object) -> Mapping[str, Any] | None:
    schema, problem = _json_schema(raw, "input")
    if problem is not None:
        reader.fault("bad_input_schema", problem)
    return schema


def _state_schema(reader: Reader, raw: object) -> Mapping[str, Any] | None:
    schema, problem = _json_schema(raw, "state")
    if problem is not None:
        reader.fault("bad_state_schema", problem)
    return schema


def _json_schema(raw: object, key: str) -> tuple[Mapping[str, Any] | None, str | None]:
    """``input`` or ``state`` as a JSON Schema (draft 2020-12), or what is wrong with it."""
    if raw is None:
        return None, None
    if not isinstance(raw, Mapping):
        return None, f"'{key}' must be a JSON Schema (a mapping)"
    # Imported for a definition that declares a schema, not for every one loaded.
    from jsonschema import Draft202012Validator  # noqa: PLC0415
    from jsonschema.exceptions import SchemaError  # noqa: PLC0415

    try:
        Draft202012Validator.check_schema(raw)
    except SchemaError as exc:
        return None, f"'{key}' is not a valid JSON Schema: {exc.message}"
    return dict(raw), None


def _on_resume(reader: Reader, raw: object) -> OnResume | None:
    if raw is None:
        return None
    if isinstance(raw, Mapping):
        reader.closed(raw, fmt.ON_RESUME, "on_resume", None, where="on_resume")
    if not isinstance(raw, Mapping) or not {"check", "replan"} <= set(raw):
        reader.fault(
            "bad_value",
            "'on_resume' is a mapping with 'check' (module:function) and 'replan' (a node)",
        )
        return None
    check = reader.ref(raw["check"], None, "on_resume.check")
    replan = reader.target(raw["replan"], None, "on_resume.replan")
    after = reader.duration(raw.get("after"), None, "on_resume.after")
    return OnResume(check, replan, after) if check is not None and replan else None


def plain_spec(value: Any) -> Any:
    """The spec as plain JSON data: callables become their import paths, labels strings."""
    if callable(value):
        return ref_path_of(value)
    if isinstance(value, Mapping):
        return {label(k): plain_spec(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain_spec(item) for item in value]
    if isinstance(value, timedelta):
        return value.total_seconds()
    return value
