"""What every part of the loader reads with: a :class:`Reader` is one definition being
read — the format it declares, the faults found so far, whether an unknown key is a fault
or only ignored — and reads the fields every block has (closed mappings, references,
durations, amounts, node targets), recording a fault for each bad one.

Each field reader returns ``None`` (or a safe placeholder) for what it cannot read, so one
bad field never hides the faults in the rest of the definition.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from cairn.definitions import format as fmt
from cairn.errors import DefinitionFault
from cairn.model.definition import Ref, import_ref, ref_path_of
from cairn.model.durations import parse_duration
from cairn.model.queues import queue_name_problem


class ParsedSpec:
    """Parsed data plus the faults found while parsing it (duplicate keys), for the
    reader to report with the others."""

    def __init__(self, data: Any, faults: list[DefinitionFault]) -> None:
        self.data = data
        self.faults = faults


class Reader:
    """One definition being read: its faults, what it declares, and the field readers."""

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
        # Whether tasks record their own outbound HTTP unless they say (``record``).
        self.record_http = False
        # The queue of tasks that name none (the workflow's ``queue``).
        self.default_queue: str | None = None

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

    def record(self, raw: object, node_id: str | None) -> bool:
        """``record: http`` (or ``none``): whether a handler's own outbound HTTP is recorded
        with its step and answered from the record in replays."""
        if raw is None or raw == "none":
            return False
        if raw != "http":
            self.fault("bad_value", f"'record' is 'http' or 'none', got {raw!r}", node_id)
            return False
        return True

    def queue(self, raw: object, node_id: str | None) -> str | None:
        """``queue: gpu``: the broker queue a node's messages go to (None if it is not
        a queue name, with a fault)."""
        problem = queue_name_problem(raw)
        if problem is not None:
            self.fault("bad_queue", f"'queue': {problem}", node_id)
            return None
        assert isinstance(raw, str)
        return raw

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
            label(key): self.target(value, node_id, f"{what}.{key}") for key, value in raw.items()
        }


def label(key: object) -> str:
    """YAML reads an unquoted ``true:`` as a bool; a guard's ``True`` means the same label."""
    if isinstance(key, bool):
        return "true" if key else "false"
    return str(key)
