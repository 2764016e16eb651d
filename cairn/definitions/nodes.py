"""Nodes: which kind a node mapping is, the keys every kind shares (retry, timeout,
on_error, ...), and the wait, parallel (with its join) and end nodes; task nodes are in
:mod:`cairn.definitions.tasks`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cairn.definitions import format as fmt
from cairn.definitions.approvals import approval_keys
from cairn.definitions.reader import Reader
from cairn.definitions.tasks import task_node
from cairn.model.definition import (
    DEFAULT_RETRY,
    END_STATUSES,
    NO_RETRY,
    AnyNode,
    EndNode,
    ErrorClass,
    Jitter,
    Join,
    JoinPolicyKind,
    JoinRest,
    ParallelNode,
    RetryPolicy,
    WaitNode,
)
from cairn.model.statuses import RunStatus

KIND_KEYS = ("end", "wait", "parallel")
# What makes a node a task: it runs something (a handler, a child run) or decides
# something (a branch, a route). A bare ``next`` says neither, so it is not a kind.
TASK_KIND_KEYS = ("handler", "child", "branch", "route")
ALL_NODE_KEYS = frozenset().union(*fmt.NODE_KINDS.values())


def read_node(reader: Reader, node_id: str, raw: object) -> AnyNode | None:
    """One entry of ``nodes``: which kind it is (by its keys), then that kind's fields;
    ``None`` if the kind cannot be told."""
    if not isinstance(raw, Mapping):
        reader.fault("not_a_mapping", f"a node is a mapping, got {type(raw).__name__}", node_id)
        return None
    kinds = [key for key in KIND_KEYS if key in raw]
    # A registered definition may hold a bare ``next`` (accepted before kinds were
    # checked): it still runs as a step that only moves on.
    passes_through = not reader.strict and "next" in raw and not kinds
    if passes_through or any(key in raw for key in TASK_KIND_KEYS):
        kinds.append("task")
    if len(kinds) > 1:
        reader.fault(
            "ambiguous_node",
            f"a node is exactly one of handler/edges, wait, parallel or end; this one has "
            f"{' and '.join(kinds)}",
            node_id,
        )
        return None
    if not kinds:
        reader.closed(raw, ALL_NODE_KEYS, "node", node_id)
        reader.fault(
            "empty_node",
            "cannot tell what kind of node this is: it needs 'handler' or 'child' (a "
            "task), 'branch' or 'route' (a decision), 'wait', 'parallel' or 'end'",
            node_id,
        )
        return None
    kind = kinds[0]
    reader.closed(raw, fmt.NODE_KINDS[kind], kind, node_id, node_kind=kind)
    if kind == "end":
        return _end_node(reader, node_id, raw)
    runs_handler = kind == "task" and raw.get("handler") is not None
    common = _common(reader, node_id, raw, runs_handler=runs_handler)
    if kind == "wait":
        return _wait_node(reader, node_id, raw, common)
    if kind == "parallel":
        return _parallel_node(reader, node_id, raw, common)
    return task_node(reader, node_id, raw, common)


def _common(
    reader: Reader, node_id: str, raw: Mapping[str, Any], *, runs_handler: bool
) -> dict[str, Any]:
    """The keys every kind of node shares. ``runs_handler``: a task with a handler,
    which gets the format's defaults for ``retry`` (unless irreversible) and
    ``timeout`` when it does not give its own."""
    on_error: dict[ErrorClass, str] = {}
    raw_on_error = raw.get("on_error", {})
    if not isinstance(raw_on_error, Mapping):
        reader.fault("bad_value", "'on_error' maps error classes to nodes", node_id)
        raw_on_error = {}
    for error_class, target in raw_on_error.items():
        try:
            on_error[ErrorClass(error_class)] = reader.target(target, node_id, "on_error")
        except ValueError:
            known = ", ".join(c.value for c in ErrorClass)
            reader.fault(
                "bad_value", f"on_error class {error_class!r} is not one of {known}", node_id
            )
    default = raw.get("default")
    if default is not None and not isinstance(default, Mapping):
        reader.fault("bad_value", "'default' must be a mapping merged into the state", node_id)
        default = None
    defaults = runs_handler and reader.has_defaults
    # Not a default that may run an irreversible effect twice: it retries only if
    # it says so.
    default_retry = DEFAULT_RETRY if defaults and raw.get("irreversible") is not True else NO_RETRY
    timeout = raw.get("timeout")
    if timeout is None:
        effective_timeout = reader.node_timeout if defaults else None
    elif reader.opted_out(timeout, node_id, "timeout"):
        effective_timeout = None
    else:
        effective_timeout = reader.duration(timeout, node_id, "timeout")
    return {
        "max_visits": reader.positive_int(raw.get("max_visits"), "max_visits", node_id),
        "retry": _retry(reader, node_id, raw.get("retry"), default_retry),
        "on_error": on_error,
        "compensate": reader.ref(raw.get("compensate"), node_id, "compensate"),
        "timeout": effective_timeout,
        "default": default,
        "budget": reader.amounts(raw.get("budget"), node_id, "budget"),
    }


def _retry(reader: Reader, node_id: str, raw: object, default: RetryPolicy) -> RetryPolicy:
    """``retry``: ``default`` if not given, ``none`` for no retry, or a policy."""
    if raw is None:
        return default
    if reader.opted_out(raw, node_id, "retry"):
        return NO_RETRY
    if not isinstance(raw, Mapping):
        none = f" or {fmt.NONE!r}" if reader.has_defaults else ""
        reader.fault(
            "bad_value",
            f"'retry' is a mapping (attempts, backoff, max_delay, ...){none}",
            node_id,
        )
        return NO_RETRY
    reader.closed(raw, fmt.RETRY, "retry", node_id, where="retry")
    attempts = reader.positive_int(raw.get("attempts", 1), "retry.attempts", node_id) or 1
    backoff = reader.duration(raw.get("backoff", 1), node_id, "retry.backoff")
    max_delay = reader.duration(raw.get("max_delay", 300), node_id, "retry.max_delay")
    deadline = reader.duration(raw.get("deadline"), node_id, "retry.deadline")
    try:
        jitter = Jitter(raw.get("jitter", "full"))
    except ValueError:
        reader.fault("bad_value", "'retry.jitter' is 'full' or 'none'", node_id)
        jitter = Jitter.FULL
    return RetryPolicy(
        attempts=attempts,
        backoff=backoff or NO_RETRY.backoff,
        max_delay=max_delay or NO_RETRY.max_delay,
        deadline=deadline,
        jitter=jitter,
    )


def _wait_node(
    reader: Reader, node_id: str, raw: Mapping[str, Any], common: dict[str, Any]
) -> WaitNode:
    spec = raw["wait"]
    if not isinstance(spec, Mapping):
        reader.fault(
            "bad_value", "'wait' is a mapping with 'signals', 'timeout', 'on_timeout'", node_id
        )
        spec = {}
    reader.closed(spec, fmt.WAIT, "wait", node_id, where="wait")
    signals = reader.label_map(node_id, spec.get("signals"), "signals") or {}
    timeout = reader.duration(spec.get("timeout"), node_id, "wait.timeout") or common["timeout"]
    on_timeout = spec.get("on_timeout")
    if timeout is None or on_timeout is None:
        missing = " and ".join(
            key
            for key, value in (("timeout", timeout), ("on_timeout", on_timeout))
            if value is None
        )
        reader.fault(
            "wait_without_timeout",
            f"a wait must say how long it waits and where it goes then (missing {missing})",
            node_id,
        )
    common["timeout"] = timeout
    extra = reader.metadata(raw, node_id)
    extra.update({f"wait.{k}": v for k, v in reader.metadata(spec, node_id).items()})
    return WaitNode(
        id=node_id,
        signals=signals,
        on_timeout=reader.target(on_timeout, node_id, "on_timeout") if on_timeout else "",
        extra=extra,
        **approval_keys(reader, node_id, spec, signals),
        **common,
    )


def _parallel_node(
    reader: Reader, node_id: str, raw: Mapping[str, Any], common: dict[str, Any]
) -> ParallelNode:
    branches_raw = raw["parallel"]
    branches: list[str] = []
    if not isinstance(branches_raw, list) or not branches_raw:
        reader.fault("bad_value", "'parallel' is a non-empty list of branch nodes", node_id)
    else:
        for branch in branches_raw:
            name = str(branch)
            if name in branches:
                reader.fault("duplicate_name", f"branch {name!r} is listed twice", node_id)
                continue
            branches.append(name)
    join = _join(reader, node_id, raw.get("join", {}), branches)
    next_node = raw.get("next")
    if next_node is None:
        reader.fault(
            "missing_next",
            "a parallel node needs 'next': where the run goes after the join",
            node_id,
        )
    shares = reader.amounts(raw.get("shares"), node_id, "shares") or {}
    for branch in shares:
        if branch not in branches:
            reader.fault(
                "join_unknown_branch",
                f"shares names {branch!r}, which is not one of this node's branches",
                node_id,
            )
    if shares and not any(shares.values()):
        reader.fault("bad_value", "'shares' gives every branch a weight of 0", node_id)
    return ParallelNode(
        id=node_id,
        branches=tuple(branches),
        join=join,
        shares=shares,
        next=reader.target(next_node, node_id, "next") if next_node is not None else "",
        extra=reader.metadata(raw, node_id),
        **common,
    )


def _join(reader: Reader, node_id: str, raw: object, branches: list[str]) -> Join:
    if not isinstance(raw, Mapping):
        reader.fault(
            "bad_value", "'join' is a mapping with 'policy' (all, quorum, critical)", node_id
        )
        return Join()
    reader.closed(raw, fmt.JOIN, "join", node_id, where="join")
    try:
        policy = JoinPolicyKind(raw.get("policy", "all"))
    except ValueError:
        known = ", ".join(p.value for p in JoinPolicyKind)
        reader.fault(
            "bad_value", f"join policy {raw.get('policy')!r} is not one of {known}", node_id
        )
        policy = JoinPolicyKind.ALL
    k = raw.get("k")
    if policy is JoinPolicyKind.QUORUM:
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= len(branches):
            reader.fault(
                "quorum_out_of_range",
                f"quorum k must be an integer from 1 to {len(branches)} (the number of "
                f"branches), got {k!r}",
                node_id,
            )
            k = None
    elif k is not None:
        reader.fault("bad_value", "'k' only applies to the quorum policy", node_id)
        k = None
    critical_raw = raw.get("critical", [])
    critical: tuple[str, ...] = ()
    if not isinstance(critical_raw, list):
        reader.fault("bad_value", "'critical' is a list of branch names", node_id)
    else:
        critical = tuple(str(name) for name in critical_raw)
    if policy is JoinPolicyKind.CRITICAL and not critical:
        reader.fault("bad_value", "the critical policy needs a non-empty 'critical' list", node_id)
    for name in critical:
        if name not in branches:
            reader.fault(
                "join_unknown_branch",
                f"critical branch {name!r} is not one of this node's branches",
                node_id,
            )
    try:
        rest = JoinRest(raw.get("rest", "cancel"))
    except ValueError:
        reader.fault("bad_value", "'rest' is 'cancel' or 'finish'", node_id)
        rest = JoinRest.CANCEL
    return Join(
        policy=policy,
        k=k,
        critical=critical,
        timeout=reader.duration(raw.get("timeout"), node_id, "join.timeout"),
        rest=rest,
    )


def _end_node(reader: Reader, node_id: str, raw: Mapping[str, Any]) -> EndNode:
    value = raw["end"]
    try:
        status = RunStatus(value)
        if status not in END_STATUSES:
            raise ValueError(value)
    except ValueError:
        known = ", ".join(s.value for s in END_STATUSES)
        reader.fault("bad_value", f"'end' must be one of {known}, got {value!r}", node_id)
        status = RunStatus.FAILED
    return EndNode(id=node_id, status=status, extra=reader.metadata(raw, node_id))
