"""What a migration of runs between two versions of a workflow is made of: the run as
the mapping sees it, what the mapping answers, which runs a migration selects, and what
it reports per run (docs/versions.md). Plain data: the checks are
:mod:`cairn.engine.migration_checks`, the writes :mod:`cairn.engine.migrations`.

The mapping is the user's function, named ``package.module:function``::

    def migrate(run: MigratingRun) -> Migration | None: ...

``None`` keeps the run where it is: the node of the same name in the new version, the
same state. A :class:`Migration` places it (``node``), gives it another state
(``vars``), or leaves it on its version with a reason (``stay``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from cairn.errors import InvalidInput


@dataclass(frozen=True)
class MigratingRun:
    """A run as the mapping sees it: where it stands on the old graph, and its state."""

    run_id: str
    workflow: str
    from_version: int
    to_version: int
    node: str  # its open wait, or the node it waits to run again
    status: str  # waiting | running
    vars: Mapping[str, Any]  # read-only: return a changed copy in Migration.vars
    visits: Mapping[str, int]  # node -> how often the run entered it


@dataclass(frozen=True)
class Migration:
    """The mapping's answer for one run. Every field left None keeps what the run has:
    ``node`` (where it enters the new graph; its own node's name otherwise), ``vars``
    (its state in the new version). ``stay``: leave the run on its version, for this
    reason (nothing else is looked at)."""

    node: str | None = None
    vars: Mapping[str, Any] | None = None
    stay: str | None = None


@dataclass(frozen=True)
class Where:
    """Which of the old version's runs to migrate: ``--where KEY=VALUE``, every one given
    must hold. Keys: ``node`` (where it stands), ``status`` (waiting, running), ``id``
    (repeatable: any of them), and ``vars.PATH`` (a state field, dotted; the value is
    JSON, or else the text itself)."""

    node: str | None = None
    status: str | None = None
    ids: tuple[str, ...] = ()
    fields: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    @classmethod
    def parse(cls, conditions: Sequence[str]) -> Where:
        """``KEY=VALUE`` conditions; :class:`InvalidInput` naming any it cannot read."""
        node = status = None
        ids: list[str] = []
        fields: dict[str, Any] = {}
        for condition in conditions:
            key, sep, value = condition.partition("=")
            key = key.strip()
            if not sep or not key:
                raise InvalidInput(f"--where {condition!r}: write KEY=VALUE")
            if key == "node":
                node = value
            elif key == "status":
                status = value
            elif key == "id":
                ids.append(value)
            elif key.startswith("vars.") and len(key) > len("vars."):
                fields[key[len("vars.") :]] = _json_or_text(value)
            else:
                raise InvalidInput(f"--where {condition!r}: KEY is node, status, id or vars.FIELD")
        return cls(node, status, tuple(ids), MappingProxyType(fields))

    def to_list(self) -> list[str]:
        """The conditions again, as ``--where`` takes them (for the API's body)."""
        listed = [f"node={self.node}"] if self.node is not None else []
        listed += [f"status={self.status}"] if self.status is not None else []
        listed += [f"id={run_id}" for run_id in self.ids]
        listed += [f"vars.{path}={json.dumps(value)}" for path, value in self.fields.items()]
        return listed

    def holds(self, run_id: str, node: str | None, status: str, values: Mapping[str, Any]) -> bool:
        """Whether a run standing at ``node`` with state ``values`` is selected."""
        if self.ids and run_id not in self.ids:
            return False
        if self.node is not None and node != self.node:
            return False
        if self.status is not None and status != self.status:
            return False
        return all(_at(values, path) == wanted for path, wanted in self.fields.items())


_MISSING = object()


def _at(values: Mapping[str, Any], path: str) -> Any:
    found: Any = values
    for part in path.split("."):
        if not isinstance(found, Mapping) or part not in found:
            return _MISSING
        found = found[part]
    return found


def _json_or_text(value: str) -> Any:
    try:
        return json.loads(value)
    except ValueError:
        return value


@dataclass(frozen=True)
class Reason:
    """Why a run does not move: a stable ``code`` and the words for a person."""

    code: str
    message: str

    def to_dict(self) -> dict[str, str]:
        return {"code": self.code, "message": self.message}


@dataclass(frozen=True)
class RunVerdict:
    """One run in a migration's report: where it stands, and either where it goes
    (``to_node``) or why it does not (``reasons``). ``moved``: a real migration wrote
    its ``run_migrated`` event (at ``seq``)."""

    run_id: str
    node: str | None
    to_node: str | None = None
    reasons: tuple[Reason, ...] = ()
    moved: bool = False
    seq: int | None = None

    @property
    def movable(self) -> bool:
        return not self.reasons

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "node": self.node,
            "to_node": self.to_node,
            "movable": self.movable,
            "moved": self.moved,
            "seq": self.seq,
            "reasons": [reason.to_dict() for reason in self.reasons],
        }


@dataclass(frozen=True)
class MigrationReport:
    """What a migration found (a dry run) or did, run by run."""

    workflow: str
    from_version: int
    to_version: int
    mapping: str
    dry_run: bool
    runs: tuple[RunVerdict, ...]

    @property
    def movable(self) -> list[RunVerdict]:
        return [verdict for verdict in self.runs if verdict.movable]

    @property
    def unmovable(self) -> list[RunVerdict]:
        return [verdict for verdict in self.runs if not verdict.movable]

    def to_dict(self) -> dict[str, Any]:
        return {
            "workflow": self.workflow,
            "from_version": self.from_version,
            "to_version": self.to_version,
            "mapping": self.mapping,
            "dry_run": self.dry_run,
            "selected": len(self.runs),
            "movable": len(self.movable),
            "moved": sum(1 for verdict in self.runs if verdict.moved),
            "runs": [verdict.to_dict() for verdict in self.runs],
        }
