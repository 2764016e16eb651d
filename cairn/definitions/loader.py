"""Compile the declarative form (a mapping, YAML or JSON) into a :class:`WorkflowDefinition`.

Parsing never stops at the first problem: every fault in the shape is collected, then
the graph checks of :mod:`cairn.definitions.validation` run on whatever parsed, and one
:class:`~cairn.errors.WorkflowDefinitionError` reports all of them. Every mapping is
closed (:mod:`cairn.definitions.format`): an unknown key is a fault with a suggestion;
``x-`` keys and ``metadata`` are kept in ``extra``.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator, Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

import yaml
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from cairn.definitions import format as fmt
from cairn.definitions.validation import validate_graph
from cairn.errors import DefinitionFault, WorkflowDefinitionError
from cairn.model.definition import (
    DEFAULT_CANCEL_TIMEOUT,
    DEFAULT_NODE_TIMEOUT,
    DEFAULT_RETRY,
    DURABLE,
    END_STATUSES,
    NO_RETRY,
    AnomalyPolicy,
    AnyNode,
    Branch,
    ChildRun,
    EndNode,
    ErrorClass,
    Jitter,
    Join,
    JoinPolicyKind,
    JoinRest,
    NoProgressRule,
    OnResume,
    OscillationRule,
    ParallelNode,
    Persist,
    PersistKind,
    PingPongRule,
    Ref,
    RetryPolicy,
    Route,
    TaskNode,
    WaitNode,
    WorkflowDefinition,
    import_ref,
    ref_path_of,
)
from cairn.model.durations import parse_duration
from cairn.model.statuses import RunStatus

log = logging.getLogger(__name__)
NAME_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]*$")
KIND_KEYS = ("end", "wait", "parallel")
# What makes a node a task: it runs something (a handler, a child run) or decides
# something (a branch, a route). A bare ``next`` says neither, so it is not a kind.
TASK_KIND_KEYS = ("handler", "child", "branch", "route")
ALL_NODE_KEYS = frozenset().union(*fmt.NODE_KINDS.values())
CACHED_FORM = re.compile(r"^cached\((?P<ttl>[^)]+)\)$")
# The anomaly block's bounds: every history it asks for lives in the run state, written
# with every step, so no window may grow without limit.
ANOMALY_BOUNDS: dict[str, tuple[int, int]] = {
    "no_progress.steps": (1, 1000),
    "ping_pong.max_period": (2, 8),
    "ping_pong.repeats": (2, 16),
    "oscillation.window": (2, 200),
    "oscillation.returns": (1, 200),
    "on_detect.interventions": (0, 10),
}
HANDOFF_PREFIX = "wait:"


def load_definition(
    spec: object,
    *,
    source: str | None = None,
    resolve: bool = True,
    registered: bool = False,
    implied_format: int = fmt.FORMAT_VERSION,
) -> WorkflowDefinition:
    """Compile a definition mapping; raise :class:`WorkflowDefinitionError` with every fault.

    ``resolve`` imports every handler, guard and compensation now, so a definition that
    loads is one a worker can run. Turn it off only to inspect a definition whose code is
    not installed here (``cairn describe``).

    ``registered`` reads a definition the store already holds: runs are pinned to it and
    it cannot change, so a key this cairn does not know (registered before keys were
    checked, or by a newer cairn) is logged and ignored rather than refused.

    ``implied_format`` is the format of a definition that declares none: the newest for a
    new definition; for a registered one, the format it was registered under (a version
    keeps the semantics its runs were pinned to).
    """
    faults: list[DefinitionFault] = []
    if isinstance(spec, ParsedSpec):
        faults, spec = list(spec.faults), spec.data
    try:
        fmt.check_data_shape(spec)
    except fmt.TooComplex as exc:
        fault = DefinitionFault("too_complex", str(exc))
        raise WorkflowDefinitionError([fault], source=source) from None
    parser = _Parser(
        resolve=resolve, faults=faults, strict=not registered, implied_format=implied_format
    )
    definition = parser.workflow(spec)
    if definition is not None:
        parser.faults.extend(validate_graph(definition))
    if parser.ignored:
        log.warning("%s: ignoring what this cairn does not know: %s", source, parser.ignored)
    if parser.faults:
        raise WorkflowDefinitionError(parser.faults, source=source)
    assert definition is not None
    return definition


def load_file(path: str | Path, *, resolve: bool = True) -> WorkflowDefinition:
    """Load a ``.yaml``/``.yml``/``.json`` definition file. Duplicate keys are faults."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise WorkflowDefinitionError(
            [DefinitionFault("syntax", f"not UTF-8 text: {exc.reason} at byte {exc.start}")],
            source=str(path),
        ) from None
    return load_definition(
        parse_text(text, path.suffix, source=str(path)), source=str(path), resolve=resolve
    )


def parse_text(text: str, suffix: str = ".yaml", *, source: str | None = None) -> Any:
    """Parse definition text, reporting duplicate keys (YAML and JSON both drop them silently).

    Duplicates come back inside a :class:`ParsedSpec` so that they join the other faults
    instead of hiding them.
    """
    is_json = suffix.lower() == ".json"
    kind = "JSON" if is_json else "YAML"
    try:
        if is_json:
            try:
                data = json.loads(text)
            except RecursionError:
                raise fmt.TooComplex(
                    f"the definition is nested more than {fmt.MAX_DEPTH} levels deep"
                ) from None
            fmt.check_data_shape(data)
        else:
            fmt.check_yaml_shape(text)
            data = yaml.safe_load(text)
    except fmt.TooComplex as exc:
        raise WorkflowDefinitionError(
            [DefinitionFault("too_complex", str(exc))], source=source
        ) from None
    except (yaml.YAMLError, json.JSONDecodeError) as exc:
        raise WorkflowDefinitionError(
            [DefinitionFault("syntax", f"not valid {kind}: {_syntax_reason(exc)}")], source=source
        ) from None
    # JSON is (near enough) YAML, so one composer finds duplicates in both. YAML refuses
    # tab indentation; in valid JSON a tab can only be whitespace, so it may become a space.
    composable = text.replace("\t", " ") if is_json else text
    try:
        duplicates = list(_duplicate_keys(yaml.compose(composable, Loader=yaml.SafeLoader), ()))
    except yaml.YAMLError:
        duplicates = []
    return ParsedSpec(data, duplicates) if duplicates else data


def _syntax_reason(exc: Exception) -> str:
    """One line: what is wrong and where (not a page of parser context)."""
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem:
        mark = exc.problem_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        return f"{exc.problem}{where}"
    return " ".join(str(exc).split())


class ParsedSpec:
    """Parsed data plus the faults found while parsing it (duplicate keys)."""

    def __init__(self, data: Any, faults: list[DefinitionFault]) -> None:
        self.data = data
        self.faults = faults


def _duplicate_keys(node: yaml.Node | None, path: tuple[str, ...]) -> Iterator[DefinitionFault]:
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key_node, value_node in node.value:
            key = str(key_node.value)
            if key in seen:
                owner = key if path == ("nodes",) else (path[1] if path[:1] == ("nodes",) else None)
                where = ".".join(path) or "the top level"
                yield DefinitionFault(
                    "duplicate_name", f"{key!r} is defined more than once in {where}", owner
                )
            seen.add(key)
            yield from _duplicate_keys(value_node, (*path, key))
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            yield from _duplicate_keys(item, path)


class _Parser:
    """Turns a raw mapping into model objects, recording a fault for each bad field.

    Each method returns ``None`` (or a safe placeholder) for what it cannot parse, so one
    bad field never hides the faults in the rest of the definition.
    """

    def __init__(
        self,
        *,
        resolve: bool,
        faults: list[DefinitionFault],
        strict: bool,
        implied_format: int = fmt.FORMAT_VERSION,
    ) -> None:
        self.resolve = resolve
        self.faults = faults
        self.strict = strict
        self.implied_format = implied_format
        self.ignored: list[str] = []  # unknown keys a registered definition may keep
        # The format the definition declares it was written for (the newest if it does
        # not say): keys introduced later are faults.
        self.format_version = fmt.FORMAT_VERSION
        # The timeout of a task running a handler that gives none (``node_timeout``).
        self.node_timeout: timedelta | None = None

    def fault(self, code: str, message: str, node: str | None = None) -> None:
        self.faults.append(DefinitionFault(code, message, node))

    def closed(
        self,
        raw: Mapping[Any, Any],
        known: frozenset[str],
        scope: str,
        node_id: str | None,
        *,
        where: str | None = None,
        node_kind: str | None = None,
    ) -> None:
        """Fault every key of ``raw`` that ``known`` does not list, and every key newer
        than the declared format. ``scope`` names the mapping in the format's key table
        (``task``, ``retry``, ``anomaly.ping_pong``); ``where`` names it for people when it
        is not the node or workflow itself."""
        for unknown in fmt.unknown_keys(raw, known, node_kind=node_kind):
            if self.strict:
                self.fault("unknown_key", unknown.describe(where), node_id)
            else:
                fault = DefinitionFault("unknown_key", unknown.describe(where), node_id)
                self.ignored.append(str(fault))
        for key in raw:
            since = fmt.newer_than(f"{scope}.{key}", self.format_version)
            if since is not None:
                place = f" in {where!r}" if where else ""
                self.fault(
                    "newer_key",
                    f"key {str(key)!r}{place} came in definition format {since}; this "
                    f"definition declares format {self.format_version}",
                    node_id,
                )

    def metadata(self, raw: Mapping[Any, Any], node_id: str | None) -> dict[str, Any]:
        """The ``x-`` keys and ``metadata`` a mapping carries, kept as they are."""
        kept = fmt.extensions(raw)
        if fmt.METADATA in kept and not isinstance(kept[fmt.METADATA], Mapping):
            self.fault("bad_value", "'metadata' must be a mapping", node_id)
            del kept[fmt.METADATA]
        return kept

    def declared_format(self, raw: object) -> int:
        if raw is None:
            return self.implied_format
        if isinstance(raw, bool) or not isinstance(raw, int) or raw < 1:
            self.fault("bad_value", f"'format' must be a positive integer, got {raw!r}")
            return fmt.FORMAT_VERSION
        if raw > fmt.FORMAT_VERSION:
            self.fault(
                "unsupported_format",
                f"written for definition format {raw}; this cairn reads formats up to "
                f"{fmt.FORMAT_VERSION} (upgrade cairn, or write it for an older format)",
            )
            return fmt.FORMAT_VERSION
        return raw

    @property
    def has_defaults(self) -> bool:
        """Whether the declared format gives tasks a default retry policy and timeout."""
        return self.format_version >= fmt.DEFAULTS_SINCE

    def opted_out(self, raw: object, node_id: str | None, what: str) -> bool:
        """Whether ``raw`` is ``none`` (a default switched off): a value that came with
        the defaults, so a fault in a definition declaring an older format."""
        if not isinstance(raw, str) or raw != fmt.NONE:
            return False
        if not self.has_defaults:
            self.fault(
                "newer_key",
                f"'{what}: {fmt.NONE}' came in definition format {fmt.DEFAULTS_SINCE}; this "
                f"definition declares format {self.format_version}, which has no default to "
                "opt out of",
                node_id,
            )
        return True

    # -- the workflow -------------------------------------------------------------------

    def workflow(self, spec: object) -> WorkflowDefinition | None:
        if not isinstance(spec, Mapping):
            self.fault("not_a_mapping", f"a definition is a mapping, got {type(spec).__name__}")
            return None
        self.format_version = self.declared_format(spec.get("format"))
        self.closed(spec, fmt.TOP, "workflow", None)
        name = spec.get("name")
        if not isinstance(name, str) or not NAME_PATTERN.match(name):
            self.fault("bad_name", f"'name' must be an identifier-like string, got {name!r}")
            name = "<unnamed>"
        version = spec.get("version")
        if isinstance(version, bool) or not isinstance(version, int) or version < 1:
            self.fault("bad_version", f"'version' must be a positive integer, got {version!r}")
            version = 0
        start = spec.get("start")
        if not isinstance(start, str) or not start:
            self.fault("missing_start", f"'start' must name the first node, got {start!r}")
            start = ""
        self.node_timeout = self.default_timeout(spec.get("node_timeout"))
        raw_nodes = spec.get("nodes")
        if not isinstance(raw_nodes, Mapping) or not raw_nodes:
            self.fault("no_nodes", "'nodes' must be a non-empty mapping of node id to node")
            raw_nodes = {}
        nodes: dict[str, AnyNode] = {}
        for raw_id, raw in raw_nodes.items():
            node_id = str(raw_id)
            if not NAME_PATTERN.match(node_id):
                self.fault("bad_name", f"node id {node_id!r} is not identifier-like", node_id)
            node = self.node(node_id, raw)
            if node is not None:
                nodes[node_id] = node
        max_visits = self.positive_int(spec.get("max_visits"), "max_visits", None)
        compensate_on_cancel = spec.get("compensate_on_cancel", False)
        if not isinstance(compensate_on_cancel, bool):
            self.fault("bad_value", "'compensate_on_cancel' must be true or false")
            compensate_on_cancel = False
        description = spec.get("description", "")
        cancel_timeout = self.duration(spec.get("cancel_timeout"), None, "cancel_timeout")
        input_schema = self.input_schema(spec.get("input"))
        on_resume = self.on_resume(spec.get("on_resume"))
        budget = self.amounts(spec.get("budget"), None, "budget") or {}
        anomaly = self.anomaly(spec.get("anomaly"))
        return WorkflowDefinition(
            name=name,
            version=version,
            start=start,
            nodes=nodes,
            description=str(description or ""),
            max_visits=max_visits,
            compensate_on_cancel=compensate_on_cancel,
            cancel_timeout=cancel_timeout or DEFAULT_CANCEL_TIMEOUT,
            node_timeout=self.node_timeout,
            format=self.format_version,
            input_schema=input_schema,
            on_resume=on_resume,
            budget=budget,
            anomaly=anomaly,
            extra=self.metadata(spec, None),
            spec=plain_spec(spec),
        )

    def default_timeout(self, raw: object) -> timedelta | None:
        """``node_timeout``: the timeout of every task running a handler that gives none
        of its own (1 h if it is not said; ``none``: no default). Format 1 has none."""
        if not self.has_defaults:
            return None  # a node_timeout key is a newer_key fault already
        if raw is None:
            return DEFAULT_NODE_TIMEOUT
        if self.opted_out(raw, None, "node_timeout"):
            return None
        return self.duration(raw, None, "node_timeout") or DEFAULT_NODE_TIMEOUT

    def input_schema(self, raw: object) -> Mapping[str, Any] | None:
        if raw is None:
            return None
        if not isinstance(raw, Mapping):
            self.fault("bad_input_schema", "'input' must be a JSON Schema (a mapping)")
            return None
        try:
            Draft202012Validator.check_schema(raw)
        except SchemaError as exc:
            self.fault("bad_input_schema", f"'input' is not a valid JSON Schema: {exc.message}")
            return None
        return dict(raw)

    def on_resume(self, raw: object) -> OnResume | None:
        if raw is None:
            return None
        if isinstance(raw, Mapping):
            self.closed(raw, fmt.ON_RESUME, "on_resume", None, where="on_resume")
        if not isinstance(raw, Mapping) or not {"check", "replan"} <= set(raw):
            self.fault(
                "bad_value",
                "'on_resume' is a mapping with 'check' (module:function) and 'replan' (a node)",
            )
            return None
        check = self.ref(raw["check"], None, "on_resume.check")
        replan = self.target(raw["replan"], None, "on_resume.replan")
        return OnResume(check, replan) if check is not None and replan else None

    def anomaly(self, raw: object) -> AnomalyPolicy | None:
        """The ``anomaly:`` block."""
        if raw is None:
            return None
        if not self.known_keys(raw, fmt.ANOMALY, "anomaly"):
            return None
        assert isinstance(raw, Mapping)
        fingerprint = raw.get("fingerprint", {})
        if not self.known_keys(fingerprint, fmt.FINGERPRINT, "anomaly.fingerprint"):
            fingerprint = {}
        on_detect = raw.get("on_detect", {})
        if not self.known_keys(on_detect, fmt.ON_DETECT, "anomaly.on_detect"):
            on_detect = {}
        no_progress = ping_pong = oscillation = None
        rule = self.anomaly_rule(raw, "no_progress", fmt.NO_PROGRESS)
        if rule is not None:
            no_progress = NoProgressRule(steps=self.bounded(rule, "no_progress.steps", 6))
        rule = self.anomaly_rule(raw, "ping_pong", fmt.PING_PONG)
        if rule is not None:
            ping_pong = PingPongRule(
                max_period=self.bounded(rule, "ping_pong.max_period", 3),
                repeats=self.bounded(rule, "ping_pong.repeats", 3),
            )
        rule = self.anomaly_rule(raw, "oscillation", fmt.OSCILLATION)
        if rule is not None:
            watched = self.field_names(rule.get("fields"), "anomaly.oscillation.fields")
            if not rule.get("fields"):
                self.fault(
                    "bad_anomaly",
                    "anomaly.oscillation.fields must list the state fields to watch",
                )
            elif watched:
                oscillation = OscillationRule(
                    fields=watched,
                    window=self.bounded(rule, "oscillation.window", 12),
                    returns=self.bounded(rule, "oscillation.returns", 3),
                )
        if not any(raw.get(name) for name in ("no_progress", "ping_pong", "oscillation")):
            self.fault(
                "bad_anomaly",
                "anomaly turns on no detector: give no_progress, ping_pong or oscillation",
            )
            return None
        hint = on_detect.get("hint")
        if hint is not None and (not isinstance(hint, str) or not hint.strip()):
            self.fault("bad_anomaly", f"anomaly.on_detect.hint must be text, got {hint!r}")
            hint = None
        drop: tuple[str, ...] = ()
        assign: dict[str, Any] = {}
        reset = on_detect.get("reset")
        if isinstance(reset, Mapping):
            assign = {str(name): value for name, value in reset.items()}
        elif reset is not None:
            drop = self.field_names(reset, "anomaly.on_detect.reset")
        then = on_detect.get("then", "fail")
        handoff = None
        if isinstance(then, str) and then.startswith(HANDOFF_PREFIX):
            handoff = then[len(HANDOFF_PREFIX) :].strip() or None
        if handoff is None and then != "fail":
            self.fault(
                "bad_anomaly",
                f"anomaly.on_detect.then is 'fail' or 'wait:<wait node>', got {then!r}",
            )
        return AnomalyPolicy(
            no_progress=no_progress,
            ping_pong=ping_pong,
            oscillation=oscillation,
            fields=self.field_names(fingerprint.get("fields"), "anomaly.fingerprint.fields"),
            ignore=self.field_names(fingerprint.get("ignore"), "anomaly.fingerprint.ignore"),
            hint=hint,
            drop=drop,
            assign=assign,
            interventions=self.bounded(on_detect, "on_detect.interventions", 1),
            handoff=handoff,
        )

    def anomaly_rule(
        self, raw: Mapping[str, Any], name: str, keys: frozenset[str]
    ) -> Mapping[str, Any] | None:
        """A detector's settings: a mapping, or ``true`` for its defaults; None if off."""
        rule = raw.get(name)
        if rule is None or rule is False:
            return None
        if rule is True:
            return {}
        return rule if self.known_keys(rule, keys, f"anomaly.{name}") else None

    def known_keys(self, raw: object, keys: frozenset[str], what: str) -> bool:
        """Whether an anomaly (sub)block is a mapping; its unknown keys are faulted."""
        if not isinstance(raw, Mapping):
            self.fault("bad_anomaly", f"{what} must be a mapping of {sorted(keys)}, got {raw!r}")
            return False
        self.closed(raw, keys, what, None, where=what)
        return True

    def bounded(self, raw: Mapping[str, Any], what: str, default: int) -> int:
        low, high = ANOMALY_BOUNDS[what]
        value = raw.get(what.rpartition(".")[2], default)
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            self.fault(
                "bad_anomaly",
                f"anomaly.{what} must be an integer from {low} to {high}, got {value!r}",
            )
            return default
        return value

    def field_names(self, raw: object, what: str) -> tuple[str, ...]:
        if raw is None:
            return ()
        if not isinstance(raw, list) or not all(isinstance(n, str) and n for n in raw):
            self.fault("bad_anomaly", f"{what} must be a list of state field names, got {raw!r}")
            return ()
        return tuple(dict.fromkeys(raw))

    # -- nodes --------------------------------------------------------------------------

    def node(self, node_id: str, raw: object) -> AnyNode | None:
        if not isinstance(raw, Mapping):
            self.fault("not_a_mapping", f"a node is a mapping, got {type(raw).__name__}", node_id)
            return None
        kinds = [key for key in KIND_KEYS if key in raw]
        # A registered definition may hold a bare ``next`` (accepted before kinds were
        # checked): it still runs as a step that only moves on.
        passes_through = not self.strict and "next" in raw and not kinds
        if passes_through or any(key in raw for key in TASK_KIND_KEYS):
            kinds.append("task")
        if len(kinds) > 1:
            self.fault(
                "ambiguous_node",
                f"a node is exactly one of handler/edges, wait, parallel or end; this one has "
                f"{' and '.join(kinds)}",
                node_id,
            )
            return None
        if not kinds:
            self.closed(raw, ALL_NODE_KEYS, "node", node_id)
            self.fault(
                "empty_node",
                "cannot tell what kind of node this is: it needs 'handler' or 'child' (a "
                "task), 'branch' or 'route' (a decision), 'wait', 'parallel' or 'end'",
                node_id,
            )
            return None
        kind = kinds[0]
        self.closed(raw, fmt.NODE_KINDS[kind], kind, node_id, node_kind=kind)
        if kind == "end":
            return self.end_node(node_id, raw)
        runs_handler = kind == "task" and raw.get("handler") is not None
        common = self.common(node_id, raw, runs_handler=runs_handler)
        if kind == "wait":
            return self.wait_node(node_id, raw, common)
        if kind == "parallel":
            return self.parallel_node(node_id, raw, common)
        return self.task_node(node_id, raw, common)

    def common(self, node_id: str, raw: Mapping[str, Any], *, runs_handler: bool) -> dict[str, Any]:
        """The keys every kind of node shares. ``runs_handler``: a task with a handler,
        which gets the format's defaults for ``retry`` (unless irreversible) and
        ``timeout`` when it does not give its own."""
        on_error: dict[ErrorClass, str] = {}
        raw_on_error = raw.get("on_error", {})
        if not isinstance(raw_on_error, Mapping):
            self.fault("bad_value", "'on_error' maps error classes to nodes", node_id)
            raw_on_error = {}
        for error_class, target in raw_on_error.items():
            try:
                on_error[ErrorClass(error_class)] = self.target(target, node_id, "on_error")
            except ValueError:
                known = ", ".join(c.value for c in ErrorClass)
                self.fault(
                    "bad_value", f"on_error class {error_class!r} is not one of {known}", node_id
                )
        default = raw.get("default")
        if default is not None and not isinstance(default, Mapping):
            self.fault("bad_value", "'default' must be a mapping merged into the state", node_id)
            default = None
        defaults = runs_handler and self.has_defaults
        # Not a default that may run an irreversible effect twice: it retries only if
        # it says so.
        default_retry = (
            DEFAULT_RETRY if defaults and raw.get("irreversible") is not True else NO_RETRY
        )
        timeout = raw.get("timeout")
        if timeout is None:
            effective_timeout = self.node_timeout if defaults else None
        elif self.opted_out(timeout, node_id, "timeout"):
            effective_timeout = None
        else:
            effective_timeout = self.duration(timeout, node_id, "timeout")
        return {
            "max_visits": self.positive_int(raw.get("max_visits"), "max_visits", node_id),
            "retry": self.retry(node_id, raw.get("retry"), default_retry),
            "on_error": on_error,
            "compensate": self.ref(raw.get("compensate"), node_id, "compensate"),
            "timeout": effective_timeout,
            "default": default,
            "budget": self.amounts(raw.get("budget"), node_id, "budget"),
        }

    def task_node(self, node_id: str, raw: Mapping[str, Any], common: dict[str, Any]) -> TaskNode:
        edges = [key for key in fmt.EDGES if key in raw]
        if len(edges) > 1:
            self.fault(
                "conflicting_edges", f"use one of next, branch or route, not {edges}", node_id
            )
        next_node = self.target(raw["next"], node_id, "next") if "next" in raw else None
        irreversible = raw.get("irreversible", False)
        if not isinstance(irreversible, bool):
            self.fault("bad_value", "'irreversible' must be true or false", node_id)
            irreversible = False
        if irreversible and raw.get("handler") is None:
            self.fault("bad_value", "'irreversible' marks a node with a handler", node_id)
        child = self.child(node_id, raw["child"]) if "child" in raw else None
        if child is not None and "handler" in raw:
            self.fault(
                "ambiguous_node", "a task runs a handler or a child workflow, not both", node_id
            )
        invalidates = raw.get("invalidates", [])
        if not isinstance(invalidates, list) or not all(isinstance(n, str) for n in invalidates):
            self.fault("bad_value", "'invalidates' is a list of nodes", node_id)
            invalidates = []
        stall_after = self.duration(raw.get("stall_after"), node_id, "stall_after")
        if stall_after is not None and raw.get("handler") is None:
            self.fault(
                "bad_value",
                "'stall_after' watches a handler's progress: it needs a handler",
                node_id,
            )
        return TaskNode(
            id=node_id,
            handler=self.ref(raw.get("handler"), node_id, "handler"),
            child=child,
            persist=self.persist(node_id, raw.get("persist")),
            invalidates=tuple(invalidates),
            next=next_node,
            branch=self.branch(node_id, raw["branch"]) if "branch" in raw else None,
            route=self.route(node_id, raw["route"]) if "route" in raw else None,
            irreversible=irreversible,
            stall_after=stall_after,
            extra=self.metadata(raw, node_id),
            **common,
        )

    def persist(self, node_id: str, raw: object) -> Persist:
        """``durable`` (default), ``ephemeral``, ``cached(10m)`` or ``{cached: 10m, key:
        [field, ...]}``."""
        if raw is None or raw == PersistKind.DURABLE.value:
            return DURABLE
        if raw == PersistKind.EPHEMERAL.value:
            return Persist(PersistKind.EPHEMERAL)
        if isinstance(raw, str) and (match := CACHED_FORM.match(raw.strip())):
            raw = {"cached": match["ttl"]}
        if isinstance(raw, Mapping):
            self.closed(raw, fmt.PERSIST, "persist", node_id, where="persist")
        if not isinstance(raw, Mapping) or "cached" not in raw:
            self.fault(
                "bad_value",
                "'persist' is 'durable', 'ephemeral', 'cached(TTL)' or "
                f"{{cached: TTL, key: [field, ...]}}, got {raw!r}",
                node_id,
            )
            return DURABLE
        ttl = self.duration(raw["cached"], node_id, "persist.cached")
        key = raw.get("key", [])
        if not isinstance(key, list) or not all(isinstance(field, str) for field in key):
            self.fault("bad_value", "'persist.key' is a list of state fields", node_id)
            key = []
        return Persist(PersistKind.CACHED, ttl, tuple(key)) if ttl is not None else DURABLE

    def child(self, node_id: str, raw: object) -> ChildRun | None:
        if isinstance(raw, str):
            raw = {"workflow": raw}
        if not isinstance(raw, Mapping) or not isinstance(raw.get("workflow"), str):
            self.fault(
                "bad_value",
                "'child' names a workflow, or is a mapping with 'workflow' and optionally "
                "'version', 'input' and 'output' (lists of state fields)",
                node_id,
            )
            return None
        self.closed(raw, fmt.CHILD, "child", node_id, where="child")
        fields: dict[str, tuple[str, ...] | None] = {}
        for what in ("input", "output"):
            names = raw.get(what)
            if names is not None and (
                not isinstance(names, list) or not all(isinstance(n, str) for n in names)
            ):
                self.fault("bad_value", f"'child.{what}' is a list of state fields", node_id)
                names = None
            fields[what] = tuple(names) if names is not None else None
        return ChildRun(
            workflow=raw["workflow"],
            version=self.positive_int(raw.get("version"), "child.version", node_id),
            input=fields["input"],
            output=fields["output"],
        )

    def branch(self, node_id: str, raw: object) -> Branch | None:
        if not isinstance(raw, Mapping):
            self.fault("bad_value", "'branch' is a mapping with 'guard' and 'cases'", node_id)
            return None
        self.closed(raw, fmt.BRANCH, "branch", node_id, where="branch")
        guard = self.ref(raw.get("guard"), node_id, "guard")
        if guard is None:
            self.fault("missing_guard", "'branch' needs a 'guard' (module:function)", node_id)
        cases = self.label_map(node_id, raw.get("cases"), "cases")
        if guard is None or cases is None:
            return None
        return Branch(guard=guard, cases=cases)

    def route(self, node_id: str, raw: object) -> Route | None:
        if not isinstance(raw, Mapping):
            self.fault(
                "bad_value", "'route' is a mapping with 'key', 'table' and 'default'", node_id
            )
            return None
        self.closed(raw, fmt.ROUTE, "route", node_id, where="route")
        key = raw.get("key")
        if not isinstance(key, str) or not key:
            self.fault("bad_value", "'route.key' must name a state field", node_id)
        table = self.label_map(node_id, raw.get("table"), "table")
        default = raw.get("default")
        if default is None:
            self.fault(
                "route_without_default",
                "a routing table needs a 'default' target for values not in the table",
                node_id,
            )
        if not isinstance(key, str) or table is None or default is None:
            return None
        return Route(key=key, table=table, default=self.target(default, node_id, "default"))

    def wait_node(self, node_id: str, raw: Mapping[str, Any], common: dict[str, Any]) -> WaitNode:
        spec = raw["wait"]
        if not isinstance(spec, Mapping):
            self.fault(
                "bad_value", "'wait' is a mapping with 'signals', 'timeout', 'on_timeout'", node_id
            )
            spec = {}
        self.closed(spec, fmt.WAIT, "wait", node_id, where="wait")
        signals = self.label_map(node_id, spec.get("signals"), "signals") or {}
        timeout = self.duration(spec.get("timeout"), node_id, "wait.timeout") or common["timeout"]
        on_timeout = spec.get("on_timeout")
        if timeout is None or on_timeout is None:
            missing = " and ".join(
                key
                for key, value in (("timeout", timeout), ("on_timeout", on_timeout))
                if value is None
            )
            self.fault(
                "wait_without_timeout",
                f"a wait must say how long it waits and where it goes then (missing {missing})",
                node_id,
            )
        common["timeout"] = timeout
        extra = self.metadata(raw, node_id)
        extra.update({f"wait.{k}": v for k, v in self.metadata(spec, node_id).items()})
        return WaitNode(
            id=node_id,
            signals=signals,
            on_timeout=self.target(on_timeout, node_id, "on_timeout") if on_timeout else "",
            extra=extra,
            **common,
        )

    def parallel_node(
        self, node_id: str, raw: Mapping[str, Any], common: dict[str, Any]
    ) -> ParallelNode:
        branches_raw = raw["parallel"]
        branches: list[str] = []
        if not isinstance(branches_raw, list) or not branches_raw:
            self.fault("bad_value", "'parallel' is a non-empty list of branch nodes", node_id)
        else:
            for branch in branches_raw:
                name = str(branch)
                if name in branches:
                    self.fault("duplicate_name", f"branch {name!r} is listed twice", node_id)
                    continue
                branches.append(name)
        join = self.join(node_id, raw.get("join", {}), branches)
        next_node = raw.get("next")
        if next_node is None:
            self.fault(
                "missing_next",
                "a parallel node needs 'next': where the run goes after the join",
                node_id,
            )
        shares = self.amounts(raw.get("shares"), node_id, "shares") or {}
        for branch in shares:
            if branch not in branches:
                self.fault(
                    "join_unknown_branch",
                    f"shares names {branch!r}, which is not one of this node's branches",
                    node_id,
                )
        if shares and not any(shares.values()):
            self.fault("bad_value", "'shares' gives every branch a weight of 0", node_id)
        return ParallelNode(
            id=node_id,
            branches=tuple(branches),
            join=join,
            shares=shares,
            next=self.target(next_node, node_id, "next") if next_node is not None else "",
            extra=self.metadata(raw, node_id),
            **common,
        )

    def join(self, node_id: str, raw: object, branches: list[str]) -> Join:
        if not isinstance(raw, Mapping):
            self.fault(
                "bad_value", "'join' is a mapping with 'policy' (all, quorum, critical)", node_id
            )
            return Join()
        self.closed(raw, fmt.JOIN, "join", node_id, where="join")
        try:
            policy = JoinPolicyKind(raw.get("policy", "all"))
        except ValueError:
            known = ", ".join(p.value for p in JoinPolicyKind)
            self.fault(
                "bad_value", f"join policy {raw.get('policy')!r} is not one of {known}", node_id
            )
            policy = JoinPolicyKind.ALL
        k = raw.get("k")
        if policy is JoinPolicyKind.QUORUM:
            if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= len(branches):
                self.fault(
                    "quorum_out_of_range",
                    f"quorum k must be an integer from 1 to {len(branches)} (the number of "
                    f"branches), got {k!r}",
                    node_id,
                )
                k = None
        elif k is not None:
            self.fault("bad_value", "'k' only applies to the quorum policy", node_id)
            k = None
        critical_raw = raw.get("critical", [])
        critical: tuple[str, ...] = ()
        if not isinstance(critical_raw, list):
            self.fault("bad_value", "'critical' is a list of branch names", node_id)
        else:
            critical = tuple(str(name) for name in critical_raw)
        if policy is JoinPolicyKind.CRITICAL and not critical:
            self.fault(
                "bad_value", "the critical policy needs a non-empty 'critical' list", node_id
            )
        for name in critical:
            if name not in branches:
                self.fault(
                    "join_unknown_branch",
                    f"critical branch {name!r} is not one of this node's branches",
                    node_id,
                )
        try:
            rest = JoinRest(raw.get("rest", "cancel"))
        except ValueError:
            self.fault("bad_value", "'rest' is 'cancel' or 'finish'", node_id)
            rest = JoinRest.CANCEL
        return Join(
            policy=policy,
            k=k,
            critical=critical,
            timeout=self.duration(raw.get("timeout"), node_id, "join.timeout"),
            rest=rest,
        )

    def end_node(self, node_id: str, raw: Mapping[str, Any]) -> EndNode:
        value = raw["end"]
        try:
            status = RunStatus(value)
            if status not in END_STATUSES:
                raise ValueError(value)
        except ValueError:
            known = ", ".join(s.value for s in END_STATUSES)
            self.fault("bad_value", f"'end' must be one of {known}, got {value!r}", node_id)
            status = RunStatus.FAILED
        return EndNode(id=node_id, status=status, extra=self.metadata(raw, node_id))

    # -- fields -------------------------------------------------------------------------

    def retry(self, node_id: str, raw: object, default: RetryPolicy) -> RetryPolicy:
        """``retry``: ``default`` if not given, ``none`` for no retry, or a policy."""
        if raw is None:
            return default
        if self.opted_out(raw, node_id, "retry"):
            return NO_RETRY
        if not isinstance(raw, Mapping):
            none = f" or {fmt.NONE!r}" if self.has_defaults else ""
            self.fault(
                "bad_value",
                f"'retry' is a mapping (attempts, backoff, max_delay, ...){none}",
                node_id,
            )
            return NO_RETRY
        self.closed(raw, fmt.RETRY, "retry", node_id, where="retry")
        attempts = self.positive_int(raw.get("attempts", 1), "retry.attempts", node_id) or 1
        backoff = self.duration(raw.get("backoff", 1), node_id, "retry.backoff")
        max_delay = self.duration(raw.get("max_delay", 300), node_id, "retry.max_delay")
        deadline = self.duration(raw.get("deadline"), node_id, "retry.deadline")
        try:
            jitter = Jitter(raw.get("jitter", "full"))
        except ValueError:
            self.fault("bad_value", "'retry.jitter' is 'full' or 'none'", node_id)
            jitter = Jitter.FULL
        return RetryPolicy(
            attempts=attempts,
            backoff=backoff or NO_RETRY.backoff,
            max_delay=max_delay or NO_RETRY.max_delay,
            deadline=deadline,
            jitter=jitter,
        )

    def ref(self, raw: object, node_id: str | None, what: str) -> Ref | None:
        if raw is None:
            return None
        if callable(raw):
            path = ref_path_of(raw)
            try:
                found = import_ref(path)
            except (ImportError, AttributeError, TypeError):
                found = None
            if found is not raw:
                self.fault(
                    "unresolved_import",
                    f"{what} {path!r} cannot be imported by name (a lambda or nested "
                    "function?); workers in other processes find code by import path",
                    node_id,
                )
            return Ref(path, raw)
        if not isinstance(raw, str):
            self.fault(
                "bad_value", f"{what} must be 'package.module:function', got {raw!r}", node_id
            )
            return None
        if not self.resolve:
            return Ref(raw)
        try:
            return Ref(raw, import_ref(raw))
        except Exception as exc:  # any import-time failure is the definition's fault
            self.fault("unresolved_import", f"{what} {raw!r} cannot be imported: {exc}", node_id)
            return Ref(raw)

    def duration(self, raw: object, node_id: str | None, what: str) -> timedelta | None:
        if raw is None:
            return None
        try:
            return parse_duration(raw)
        except ValueError as exc:
            self.fault("bad_duration", f"{what}: {exc}", node_id)
            return None

    def amounts(self, raw: object, node_id: str | None, what: str) -> dict[str, float] | None:
        """A mapping of names (budget units, branches) to non-negative numbers."""
        if raw is None:
            return None
        if not isinstance(raw, Mapping) or not raw:
            self.fault("bad_value", f"'{what}' maps names to amounts, got {raw!r}", node_id)
            return None
        amounts: dict[str, float] = {}
        for name, amount in raw.items():
            if (
                isinstance(amount, bool)
                or not isinstance(amount, int | float)
                or not 0 <= amount < float("inf")
            ):
                self.fault(
                    "bad_value",
                    f"{what}.{name} must be a non-negative number, got {amount!r}",
                    node_id,
                )
                continue
            amounts[str(name)] = float(amount)
        return amounts

    def positive_int(self, raw: object, what: str, node_id: str | None) -> int | None:
        if raw is None:
            return None
        if isinstance(raw, bool) or not isinstance(raw, int) or raw < 1:
            self.fault("bad_value", f"'{what}' must be a positive integer, got {raw!r}", node_id)
            return None
        return raw

    def target(self, raw: object, node_id: str | None, what: str) -> str:
        if not isinstance(raw, str) or not raw:
            self.fault("bad_value", f"{what} must name a node, got {raw!r}", node_id)
            return ""
        return raw

    def label_map(self, node_id: str, raw: object, what: str) -> dict[str, str] | None:
        """A mapping of labels to target nodes (branch cases, route table, wait signals)."""
        if not isinstance(raw, Mapping) or not raw:
            self.fault(
                "bad_value", f"'{what}' must be a non-empty mapping of label to node", node_id
            )
            return None
        return {
            _label(key): self.target(value, node_id, f"{what}.{key}") for key, value in raw.items()
        }


def plain_spec(value: Any) -> Any:
    """The spec as plain JSON data: callables become their import paths, labels strings."""
    if callable(value):
        return ref_path_of(value)
    if isinstance(value, Mapping):
        return {_label(k): plain_spec(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain_spec(item) for item in value]
    if isinstance(value, timedelta):
        return value.total_seconds()
    return value


def _label(key: object) -> str:
    """YAML reads an unquoted ``true:`` as a bool; a guard's ``True`` means the same label."""
    if isinstance(key, bool):
        return "true" if key else "false"
    return str(key)
