"""The Python form of a definition: a builder whose keywords mirror the file form.

    wf = Workflow("weekly_report", version=1)
    wf.task("collect", collect, next="fan_out")
    wf.parallel("fan_out", ["sales", "traffic"], join={"policy": "all"}, next="compose")
    ...
    definition = wf.build()

Every method takes the same keys as the YAML/JSON node (``next``, ``branch``, ``route``,
``retry``, ``on_error``, ...), with callables allowed wherever the file names a
``module:function``. :meth:`Workflow.build` goes through the same loader as a file, so
both forms compile to equal models and are validated by the same rules.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from cairn.definitions.loader import load_definition
from cairn.definitions.reader import ParsedSpec
from cairn.definitions.top_level import plain_spec
from cairn.errors import DefinitionFault
from cairn.model.definition import WorkflowDefinition

Handler = Callable[..., Any] | str


class Workflow:
    """A workflow definition built in Python: add nodes with :meth:`task`, :meth:`wait`,
    :meth:`parallel` and :meth:`end` (each returns the builder, so calls chain), then
    :meth:`build`. The first node added is the start unless ``start`` says otherwise;
    ``options`` are the file form's top-level keys (``description``, ``max_visits``,
    ``budget``, ``input``, ``state``, ...: docs/definitions.md)."""

    def __init__(
        self,
        name: str,
        version: int = 1,
        *,
        start: str | None = None,
        input: Mapping[str, Any] | None = None,  # the file form's key (shadows a builtin)
        state: Mapping[str, Any] | None = None,
        **options: Any,
    ) -> None:
        """``input``: the JSON Schema a run's input must match (refused at submit
        otherwise); ``state``: the JSON Schema of the run's state (a run migrated onto
        this version must match it: docs/versions.md); ``options``: the workflow's other
        keys (``description``, ``budget``, ``max_visits``, ``node_timeout``, ``queue``,
        ...), as in the file form."""
        self.name = name
        self.version = version
        self.start = start
        # description, max_visits, compensate_on_cancel, ...
        schemas = {"input": input, "state": state}
        self.options = {
            **{key: dict(schema) for key, schema in schemas.items() if schema is not None},
            **options,
        }
        self.nodes: dict[str, dict[str, Any]] = {}
        self._faults: list[DefinitionFault] = []

    def _add(self, node_id: str, spec: dict[str, Any]) -> Workflow:
        if node_id in self.nodes:
            self.fault("duplicate_name", f"node {node_id!r} is added more than once", node_id)
        else:
            self.nodes[node_id] = {k: v for k, v in spec.items() if v is not None}
        if self.start is None:
            self.start = node_id
        return self

    def task(
        self,
        node_id: str,
        handler: Handler | None = None,
        *,
        next: str | None = None,
        branch: Mapping[str, Any] | None = None,
        route: Mapping[str, Any] | None = None,
        **common: Any,
    ) -> Workflow:
        """A step that runs ``handler`` then follows ``next``, ``branch`` or ``route``."""
        return self._add(
            node_id, {"handler": handler, "next": next, "branch": branch, "route": route, **common}
        )

    def wait(
        self,
        node_id: str,
        *,
        signals: Mapping[str, str],
        timeout: str | float,
        on_timeout: str,
        approval: Mapping[str, Any] | None = None,
        **common: Any,
    ) -> Workflow:
        """Hold the run until one of ``signals`` arrives or ``timeout`` passes.
        ``approval``: the wait's approvers, quorum, response, context, accept_early (as
        in YAML: docs/definitions.md)."""
        wait = {"signals": dict(signals), "timeout": timeout, "on_timeout": on_timeout}
        return self._add(node_id, {"wait": {**wait, **(approval or {})}, **common})

    def parallel(
        self,
        node_id: str,
        branches: Sequence[str],
        *,
        next: str,
        join: Mapping[str, Any] | None = None,
        **common: Any,
    ) -> Workflow:
        """Fan out to ``branches`` (tasks added with :meth:`task`, no edges) and join."""
        return self._add(
            node_id, {"parallel": list(branches), "join": dict(join or {}), "next": next, **common}
        )

    def end(self, node_id: str, status: str = "succeeded") -> Workflow:
        """A node that ends the run with ``status``: ``succeeded``, ``failed`` or
        ``cancelled``."""
        return self._add(node_id, {"end": status})

    def fault(self, code: str, message: str, node_id: str | None = None) -> None:
        """Record a fault to report at :meth:`build`, with every other (what a form
        built on this one finds wrong before the loader sees it)."""
        self._faults.append(DefinitionFault(code, message, node_id))

    def to_spec(self) -> dict[str, Any]:
        """The definition in file form, callables written as ``module:function``."""
        spec: dict[str, Any] = plain_spec(self._spec())
        return spec

    def _spec(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "version": self.version,
            "start": self.start,
            **self.options,
            "nodes": self.nodes,
        }

    def build(self, *, resolve: bool = True) -> WorkflowDefinition:
        """Validate and compile; raises :class:`~cairn.errors.WorkflowDefinitionError`."""
        return load_definition(
            ParsedSpec(self._spec(), list(self._faults)),
            source=f"workflow {self.name!r}",
            resolve=resolve,
        )
