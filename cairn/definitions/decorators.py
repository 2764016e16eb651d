"""The decorator form of a definition: nodes declared on the handlers that run them.

    book_flight = cairn.workflow("book_flight", version=1, input={...})

    @book_flight.task(next="price_check")
    def search(ctx: cairn.StepContext, state: cairn.State) -> cairn.State: ...

    @book_flight.task("price_check", branch={"guard": is_cheap, "cases": {...}})
    def quote(ctx: cairn.StepContext, state: cairn.State) -> cairn.State: ...

    book_flight.wait("approval", signals={...}, timeout="24h", on_timeout="escalate")

A node's id is its handler's name unless given; the first node declared is the start
unless ``start=`` says otherwise. Every decorator takes the builder's keywords
(``next``, ``branch``, ``route``, ``retry``, ``on_error``, ``timeout``, ...), and every
call goes to a :class:`~cairn.definitions.builder.Workflow` underneath: the three forms —
file, builder, decorators — are one compiler, and compile to equal definitions.

A decorator returns its function unchanged: it stays a plain function, callable in a
test, and the definition names it by its import path (``module:function``), as a file
would — so a handler is a module-level function, not one nested in another.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from cairn.definitions.builder import Workflow
from cairn.model.definition import WorkflowDefinition

if TYPE_CHECKING:
    from cairn.workers.context import Handler

_Handler = TypeVar("_Handler", bound="Handler")


class DecoratedWorkflow:
    """A workflow whose tasks are declared with decorators on their handlers; made by
    :func:`workflow`. Discovered like a builder (a module-level one is found by
    ``CAIRN_WORKFLOWS`` and ``cairn validate``) and built the same way."""

    def __init__(self, builder: Workflow) -> None:
        self.builder = builder
        self._compensations: dict[str, Callable[..., Any]] = {}

    @property
    def name(self) -> str:
        return self.builder.name

    def task(
        self,
        node_id: str | None = None,
        *,
        next: str | None = None,
        branch: Mapping[str, Any] | None = None,
        route: Mapping[str, Any] | None = None,
        **common: Any,
    ) -> Callable[[_Handler], _Handler]:
        """Declare the decorated handler a task node (its id: ``node_id``, or the
        function's name) that then follows ``next``, ``branch`` or ``route`` — none of
        them for a branch of a :meth:`parallel` node."""

        def declare(handler: _Handler) -> _Handler:
            self.builder.task(
                node_id or handler.__name__,
                handler,
                next=next,
                branch=branch,
                route=route,
                **common,
            )
            return handler

        return declare

    def compensation(self, node_id: str) -> Callable[[_Handler], _Handler]:
        """Declare the decorated function the compensation of task ``node_id`` (its
        ``compensate``): run, in reverse completion order, if the run fails after that
        task succeeded. The task may be declared before or after it."""

        def declare(compensate: _Handler) -> _Handler:
            if node_id in self._compensations:
                self.builder.fault(
                    "duplicate_name", f"{node_id!r} has more than one compensation", node_id
                )
            else:
                self._compensations[node_id] = compensate
            return compensate

        return declare

    def node(
        self,
        node_id: str,
        *,
        next: str | None = None,
        branch: Mapping[str, Any] | None = None,
        route: Mapping[str, Any] | None = None,
        **common: Any,
    ) -> DecoratedWorkflow:
        """A task with no handler of its own: a pure decision (``branch`` or ``route``)
        or a child run (``child={...}``)."""
        self.builder.task(node_id, next=next, branch=branch, route=route, **common)
        return self

    def wait(
        self,
        node_id: str,
        *,
        signals: Mapping[str, str],
        timeout: str | float,
        on_timeout: str,
        approval: Mapping[str, Any] | None = None,
        **common: Any,
    ) -> DecoratedWorkflow:
        """A wait state, as :meth:`Workflow.wait <cairn.Workflow.wait>`."""
        self.builder.wait(
            node_id,
            signals=signals,
            timeout=timeout,
            on_timeout=on_timeout,
            approval=approval,
            **common,
        )
        return self

    def parallel(
        self,
        node_id: str,
        branches: Sequence[str],
        *,
        next: str,
        join: Mapping[str, Any] | None = None,
        **common: Any,
    ) -> DecoratedWorkflow:
        """Fan out to ``branches`` (tasks declared with no edges) and join."""
        self.builder.parallel(node_id, branches, next=next, join=join, **common)
        return self

    def end(self, node_id: str, status: str = "succeeded") -> DecoratedWorkflow:
        self.builder.end(node_id, status)
        return self

    def to_spec(self) -> dict[str, Any]:
        """The definition in file form, handlers written as ``module:function``."""
        self._attach_compensations()
        return self.builder.to_spec()

    def build(self, *, resolve: bool = True) -> WorkflowDefinition:
        """Validate and compile; raises :class:`~cairn.errors.WorkflowDefinitionError`."""
        self._attach_compensations()
        return self.builder.build(resolve=resolve)

    def _attach_compensations(self) -> None:
        for node_id, compensate in list(self._compensations.items()):
            node = self.builder.nodes.get(node_id)
            if node is None:
                self.builder.fault(
                    "unknown_target",
                    f"a compensation ({compensate.__qualname__}) names {node_id!r}, "
                    "which is no node of this workflow",
                    node_id,
                )
            elif node.get("compensate") not in (None, compensate):
                self.builder.fault(
                    "duplicate_name",
                    f"{node_id!r} has a compensate= and a @compensation both",
                    node_id,
                )
            else:
                node["compensate"] = compensate
            del self._compensations[node_id]


def workflow(
    name: str,
    version: int = 1,
    *,
    start: str | None = None,
    input: Mapping[str, Any] | None = None,  # the file form's key (shadows a builtin)
    state: Mapping[str, Any] | None = None,
    **options: Any,
) -> DecoratedWorkflow:
    """A workflow to declare with decorators: ``input`` is the JSON Schema a run's input
    must match, ``state`` the JSON Schema of its state; ``options`` the workflow's other
    keys (``description``, ``budget``, ``node_timeout``, ``max_visits``, ``queue``, ...),
    as in the builder and the file form."""
    return DecoratedWorkflow(
        Workflow(name, version, start=start, input=input, state=state, **options)
    )
