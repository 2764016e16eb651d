"""Definitions by (name, version): registering writes the store; lookups are cached."""

from __future__ import annotations

import threading
from collections.abc import Collection, Iterable, Sequence

from cairn.definitions.loader import load_definition
from cairn.definitions.queues import check_queues
from cairn.errors import UnknownWorkflow
from cairn.model.definition import WorkflowDefinition
from cairn.store.sql import Store, Tx


class Registry:
    """Definitions by (name, version). Registering writes the store; lookups are cached.

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
        self._cache: dict[tuple[str, int], WorkflowDefinition] = {}
        self._lock = threading.Lock()

    def check(self, definitions: Iterable[WorkflowDefinition]) -> None:
        """Refuse what this deployment cannot run, before anything is written."""
        check_queues(definitions, self.queues, self.default_queue)

    def register_all(self, definitions: Sequence[WorkflowDefinition]) -> None:
        """Register every definition, or none if any is refused."""
        self.check(definitions)
        for definition in definitions:
            self.register(definition)

    def register(self, definition: WorkflowDefinition) -> bool:
        self.check([definition])
        with self.store.transaction() as tx:
            created = tx.register_workflow(
                definition.name, definition.version, definition.spec, definition.format
            )
        if created:  # else the stored version (and the format it holds) is the truth
            with self._lock:
                self._cache[(definition.name, definition.version)] = definition
        return created

    def get(
        self, name: str, version: int | None = None, tx: Tx | None = None
    ) -> WorkflowDefinition:
        """The definition; pass ``tx`` when inside a transaction, so the lookup uses it
        (SQLite has one writer: a second connection would wait for this one)."""
        if version is not None:
            cached = self._cache.get((name, version))
            if cached is not None:
                return cached
        if tx is None:
            with self.store.reading() as reader:
                found_version, spec, registered_format = reader.workflow_spec(name, version)
        else:
            found_version, spec, registered_format = tx.workflow_spec(name, version)
        if not spec:
            which = f"{name} version {version}" if version is not None else name
            raise UnknownWorkflow(f"workflow {which} is not registered")
        cached = self._cache.get((name, found_version))
        if cached is not None:
            return cached
        definition = load_definition(
            spec,
            source=f"registered workflow {name}@{found_version}",
            resolve=self.resolve,
            registered=True,
            implied_format=registered_format,
        )
        with self._lock:
            self._cache[(name, found_version)] = definition
        return definition
