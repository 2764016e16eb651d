"""The definition format's vocabulary: which keys each mapping accepts, since which format
version, and the limits a definition file must stay within.

Every mapping of the format is closed: a key it does not know is a fault, never ignored,
because a misspelt ``retry`` or ``timeout`` would otherwise switch a safety feature off
without a word. Room to grow is explicit: keys starting with ``x-`` and a ``metadata``
mapping are kept (in ``extra``) and mean nothing to cairn.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import yaml

# The newest definition format this cairn reads. A definition may declare the format it
# was written for (``format: 1``); keys introduced later are then faults, so a file meant
# for an older fleet cannot quietly depend on what that fleet would not understand, and
# it keeps that format's meaning. Format 2 gave every task that runs a handler a default
# retry policy and a default timeout (``node_timeout``); format 1 has neither.
FORMAT_VERSION = 2
# The first format with the defaults above (and with ``none`` to opt out of them).
DEFAULTS_SINCE = 2
# The value that opts out of a default: ``retry: none``, ``timeout: none``,
# ``node_timeout: none``.
NONE = "none"
EXTENSION_PREFIX = "x-"
METADATA = "metadata"

# What every node kind accepts besides its own keys.
COMMON = frozenset(
    {"max_visits", "retry", "on_error", "compensate", "timeout", "default", "budget"}
)
EDGES = ("next", "branch", "route")
TOP = frozenset(
    {
        "format",
        "name",
        "version",
        "start",
        "nodes",
        "description",
        "max_visits",
        "compensate_on_cancel",
        "cancel_timeout",
        "input",
        "state",
        "on_resume",
        "budget",
        "anomaly",
        "node_timeout",
        "record",
        "concurrency",
        "rate",
        "schedules",
        "queue",
        "reducers",
        "versioning",
    }
)
TASK = COMMON | {
    "handler",
    "child",
    "irreversible",
    "persist",
    "invalidates",
    "stall_after",
    "checkpoint",
    "record",
    "context",
    "concurrency",
    "dependency",
    "rate",
    "queue",
    *EDGES,
}
WAIT_NODE = COMMON | {"wait"}
PARALLEL_NODE = COMMON | {"parallel", "join", "next", "shares"}
END_NODE = frozenset({"end"})
NODE_KINDS: Mapping[str, frozenset[str]] = {
    "task": TASK,
    "wait": WAIT_NODE,
    "parallel": PARALLEL_NODE,
    "end": END_NODE,
}

RETRY = frozenset({"attempts", "backoff", "max_delay", "deadline", "jitter"})
JOIN = frozenset({"policy", "k", "critical", "timeout", "rest"})
WAIT = frozenset(
    {
        "signals",
        "timeout",
        "on_timeout",
        "approvers",
        "quorum",
        "response",
        "context",
        "accept_early",
    }
)
WAIT_CONTEXT = frozenset({"fields", "messages", "budget"})
ROUTE = frozenset({"key", "table", "default"})
BRANCH = frozenset({"guard", "cases"})
CHILD = frozenset({"workflow", "version", "input", "output"})
PERSIST = frozenset({"cached", "key"})
CHECKPOINT = frozenset({"every", "turns"})
CONTEXT = frozenset({"max_tokens", "summarize", "keep", "pin"})
CONCURRENCY = frozenset({"key", "limit"})
DEPENDENCY = frozenset({"name", "failures", "window", "open_for"})
RATE = frozenset({"key", "requests", "tokens"})
ON_RESUME = frozenset({"check", "replan", "after"})
ANOMALY = frozenset({"fingerprint", "no_progress", "ping_pong", "oscillation", "on_detect"})
FINGERPRINT = frozenset({"fields", "ignore"})
ON_DETECT = frozenset({"hint", "reset", "interventions", "then"})
NO_PROGRESS = frozenset({"steps"})
PING_PONG = frozenset({"max_period", "repeats"})
OSCILLATION = frozenset({"fields", "window", "returns"})
SCHEDULE = frozenset({"name", "cron", "input", "overlap", "catch_up", "jitter", "timezone"})

# The format version that introduced a key, by its path ("task.stall_after",
# "retry.foo"); a key not listed has been in the format since version 1.
SINCE: dict[str, int] = {
    "wait.approvers": 2,
    "wait.quorum": 2,
    "wait.response": 2,
    "wait.context": 2,
    "wait.accept_early": 2,
    "task.stall_after": 2,
    "task.checkpoint": 2,
    "on_resume.after": 2,
    "task.record": 2,
    "task.context": 2,
    "task.concurrency": 2,
    "task.dependency": 2,
    "workflow.concurrency": 2,
    "task.rate": 2,
    "workflow.rate": 2,
    "workflow.record": 2,
    "task.queue": 2,
    "workflow.queue": 2,
    "workflow.node_timeout": 2,
    "workflow.schedules": 2,
    "workflow.reducers": 2,
    "workflow.state": 2,
    "workflow.versioning": 2,
}

# Hostile-file limits: far beyond any real definition, far below what would exhaust the
# parser's stack or the memory of a process that expands YAML aliases.
MAX_DEPTH = 64
MAX_EXPANDED_NODES = 200_000
MAX_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class UnknownKey:
    """A key a mapping does not accept, with the nearest known key if one is close."""

    key: str
    suggestion: str | None
    # The node kinds that do accept it (a ``join`` on a task): a better hint than spelling.
    belongs_to: tuple[str, ...] = ()

    def describe(self, where: str | None) -> str:
        place = f" in {where!r}" if where else ""
        if self.belongs_to:
            kinds = " and ".join(f"{kind} nodes" for kind in self.belongs_to)
            return f"key {self.key!r} does not apply here{place} (it is for {kinds})"
        hint = f" (did you mean {self.suggestion!r}?)" if self.suggestion else ""
        return f"unknown key {self.key!r}{place}{hint}"


def unknown_keys(
    raw: Mapping[object, object], known: Collection[str], *, node_kind: str | None = None
) -> Iterator[UnknownKey]:
    """The keys of ``raw`` that ``known`` does not list (``x-`` keys and ``metadata``
    are always accepted). ``node_kind`` names the kind of node ``raw`` is, for the hint
    that a key belongs to another kind."""
    for raw_key in raw:
        key = str(raw_key)
        if key in known or key == METADATA or key.startswith(EXTENSION_PREFIX):
            continue
        belongs_to = (
            tuple(kind for kind, keys in NODE_KINDS.items() if kind != node_kind and key in keys)
            if node_kind is not None
            else ()
        )
        close = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.6)
        yield UnknownKey(key, close[0] if close else None, belongs_to)


def extensions(raw: Mapping[object, object]) -> dict[str, object]:
    """What a mapping carries for others: its ``x-`` keys and its ``metadata``."""
    return {
        str(key): value
        for key, value in raw.items()
        if str(key) == METADATA or str(key).startswith(EXTENSION_PREFIX)
    }


def newer_than(path: str, declared: int) -> int | None:
    """The format version that introduced ``path`` if it is newer than ``declared``."""
    since = SINCE.get(path, 1)
    return since if since > declared else None


class TooComplex(ValueError):
    """A definition text beyond the limits above (nesting, alias expansion, size)."""


def check_yaml_shape(text: str) -> None:
    """Refuse text nested deeper than :data:`MAX_DEPTH` or expanding (through aliases) to
    more than :data:`MAX_EXPANDED_NODES` nodes, before anything recursive reads it.

    PyYAML's event parser keeps an explicit stack, so it walks any depth safely; its
    composer and constructor recurse, and a "billion laughs" file expands exponentially
    once anything copies the parsed data. Counts each anchored node's expanded size so an
    alias costs what it would expand to.
    """
    if len(text.encode("utf-8", errors="replace")) > MAX_BYTES:
        raise TooComplex(f"the file is larger than {MAX_BYTES // (1024 * 1024)} MiB")
    open_sizes: list[int] = []  # expanded node count of each open collection
    open_anchors: list[str | None] = []
    anchored: dict[str, int] = {}
    total = 0

    def finish(size: int, anchor: str | None) -> None:
        nonlocal total
        if anchor is not None:
            anchored[anchor] = size
        if open_sizes:
            open_sizes[-1] += size
        else:
            total += size
        if total + sum(open_sizes) > MAX_EXPANDED_NODES:
            raise TooComplex(
                f"the definition expands to more than {MAX_EXPANDED_NODES:,} values "
                "(YAML aliases inside aliases?)"
            )

    import yaml  # noqa: PLC0415  (only a definition read from text needs the parser)

    for event in yaml.parse(text, Loader=safe_loader()):
        if isinstance(event, yaml.MappingStartEvent | yaml.SequenceStartEvent):
            open_sizes.append(1)
            open_anchors.append(event.anchor)
            if len(open_sizes) > MAX_DEPTH:
                raise TooComplex(f"the definition is nested more than {MAX_DEPTH} levels deep")
        elif isinstance(event, yaml.MappingEndEvent | yaml.SequenceEndEvent):
            finish(open_sizes.pop(), open_anchors.pop())
        elif isinstance(event, yaml.ScalarEvent):
            finish(1, event.anchor)
        elif isinstance(event, yaml.AliasEvent):
            finish(anchored.get(str(event.anchor), 1), None)


def safe_loader() -> type[yaml.SafeLoader]:
    """PyYAML's safe loader on libyaml when PyYAML was built with it (its wheels are):
    the same documents, several times faster — every worker reads every definition at
    its start."""
    import yaml  # noqa: PLC0415  (only a definition read from text needs the parser)

    loader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return loader


def check_data_shape(data: object) -> None:
    """The same depth limit over data already parsed (a mapping handed to the loader or
    the builder), without recursion, so a self-referencing mapping is refused too."""
    stack: list[tuple[object, int]] = [(data, 1)]
    seen = 0
    while stack:
        value, depth = stack.pop()
        if isinstance(value, Mapping | list | tuple):
            if depth > MAX_DEPTH:
                raise TooComplex(f"the definition is nested more than {MAX_DEPTH} levels deep")
            children = value.values() if isinstance(value, Mapping) else value
            for child in children:
                seen += 1
                if seen > MAX_EXPANDED_NODES:
                    raise TooComplex(
                        f"the definition holds more than {MAX_EXPANDED_NODES:,} values"
                    )
                stack.append((child, depth + 1))
