"""Definitions by namespace, name and version: registering writes the store; lookups are
cached.

Two kinds of lookup, as :mod:`cairn.model.workflow_names` has two forms of name:

- :meth:`Registry.get` takes the stored form (``checkout`` of the default namespace,
  ``acme/checkout``): what a run, a node message or a debounce window pinned. It asks
  nobody's permission — the run was started by someone who could see it.
- :meth:`Registry.visible` takes what a caller wrote (``checkout``, ``acme/checkout@3``)
  and the caller's namespace: its own workflow, or one shared with it, or
  :class:`~cairn.errors.UnknownWorkflow` — exactly as for a workflow that does not
  exist, so a namespace cannot learn what another one has not shared with it.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Iterable, Sequence
from dataclasses import replace

from cairn.definitions.loader import load_definition
from cairn.definitions.queues import check_queues
from cairn.errors import AmbiguousWorkflow, UnknownWorkflow
from cairn.model.definition import WorkflowDefinition
from cairn.model.workflow_names import (
    DEFAULT_NAMESPACE,
    WorkflowName,
    check_namespace,
    qualified,
    unqualified,
)
from cairn.store.sql import Store, Tx


class Registry:
    """Definitions by (namespace, name, version). Registering writes the store; lookups
    are cached.

    ``queues``: the queues the deployment declares (CAIRN_QUEUES) besides
    ``default_queue``; when there are any, a definition sending a node elsewhere is
    refused (:class:`~cairn.errors.UndeclaredQueue`). ``resolve=False``: a registered
    definition's handlers and guards are imported when first called, not when it is
    loaded (for a process that only reads runs or answers them, not the user's code)."""

    def __init__(
        self,
        store: Store,
        *,
        queues: Collection[str] = (),
        default_queue: str = "cairn",
        resolve: bool = True,
    ) -> None:
        self.store = store
        self.queues = tuple(queues)
        self.default_queue = default_queue
        self.resolve = resolve
        self._cache: dict[tuple[str, str, int], WorkflowDefinition] = {}
        self._lock = threading.Lock()

    def check(self, definitions: Iterable[WorkflowDefinition]) -> None:
        """Refuse what this deployment cannot run, before anything is written."""
        check_queues(definitions, self.queues, self.default_queue)

    def register_all(
        self, definitions: Sequence[WorkflowDefinition], namespace: str = DEFAULT_NAMESPACE
    ) -> list[WorkflowDefinition]:
        """Register every definition into ``namespace``, or none if any is refused; the
        definitions as registered (each knowing its namespace)."""
        self.check(definitions)
        check_namespace(namespace)
        return [self._register(definition, namespace)[0] for definition in definitions]

    def register(self, definition: WorkflowDefinition, namespace: str = DEFAULT_NAMESPACE) -> bool:
        """Register ``definition`` into ``namespace``; True if it is new there. A changed
        definition under a registered version is a :class:`~cairn.errors.VersionConflict`;
        the same one again changes nothing."""
        self.check([definition])
        check_namespace(namespace)
        return self._register(definition, namespace)[1]

    def _register(
        self, definition: WorkflowDefinition, namespace: str
    ) -> tuple[WorkflowDefinition, bool]:
        owned = replace(definition, namespace=namespace)
        with self.store.transaction() as tx:
            created = tx.register_workflow(
                namespace, owned.name, owned.version, owned.spec, owned.format
            )
        if created:  # else the stored version (and the format it holds) is the truth
            with self._lock:
                self._cache[(namespace, owned.name, owned.version)] = owned
        return owned, created

    def get(
        self, workflow: str, version: int | None = None, tx: Tx | None = None
    ) -> WorkflowDefinition:
        """The definition of ``workflow`` in its stored form (``acme/checkout``; a bare
        name is the default namespace's): pinned by a run or a message, so no caller's
        permission is asked. Pass ``tx`` when inside a transaction, so the lookup uses
        it (SQLite has one writer: a second connection would wait for this one)."""
        namespace, name = unqualified(workflow)
        if version is not None:
            cached = self._cache.get((namespace, name, version))
            if cached is not None:
                return cached
        if tx is None:
            with self.store.reading() as reader:
                found_version, spec, registered_format = reader.workflow_spec(
                    namespace, name, version
                )
        else:
            found_version, spec, registered_format = tx.workflow_spec(namespace, name, version)
        if not spec:
            which = f"{workflow} version {version}" if version is not None else workflow
            raise UnknownWorkflow(f"workflow {which} is not registered")
        return self._loaded(namespace, name, found_version, spec, registered_format)

    def _loaded(
        self, namespace: str, name: str, version: int, spec: dict[str, object], fmt: int
    ) -> WorkflowDefinition:
        cached = self._cache.get((namespace, name, version))
        if cached is not None:
            return cached
        definition = load_definition(
            spec,
            source=f"registered workflow {qualified(namespace, name)}@{version}",
            resolve=self.resolve,
            registered=True,
            implied_format=fmt,
        )
        definition = replace(definition, namespace=namespace)
        with self._lock:
            self._cache[(namespace, name, version)] = definition
        return definition

    def visible(
        self, caller: str, written: str, version: int | None = None, tx: Tx | None = None
    ) -> tuple[WorkflowDefinition, float]:
        """The definition ``written`` (``[namespace/]workflow[@version]``, and
        ``version`` if given apart) means to namespace ``caller`` — its own, else one
        shared with it — and the database's clock; :class:`UnknownWorkflow` if it may
        see none (see the module)."""
        wanted = WorkflowName.parse(written).pinned(version)
        if tx is None:
            with self.store.statements() as reader:
                seen = reader.visible_workflow(
                    caller, wanted.name, wanted.namespace, wanted.version
                )
        else:
            seen = tx.visible_workflow(caller, wanted.name, wanted.namespace, wanted.version)
        if seen.owner is None and len(seen.owners) > 1:
            choices = ", ".join(qualified(owner, wanted.name) for owner in seen.owners)
            raise AmbiguousWorkflow(
                f"namespace {caller!r} has no workflow {wanted.name} of its own, and "
                f"several are shared with it ({choices}): say which"
            )
        if seen.owner is None or seen.version is None:
            raise UnknownWorkflow(
                f"workflow {wanted} is not registered in namespace {caller!r} nor shared with it"
            )
        return self.get(qualified(seen.owner, wanted.name), seen.version, tx), seen.now

    def resolve_for(
        self, caller: str, written: str, version: int | None = None, tx: Tx | None = None
    ) -> WorkflowDefinition:
        """:meth:`visible`, without the clock."""
        return self.visible(caller, written, version, tx)[0]
