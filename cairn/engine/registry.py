"""Definitions by (name, version): registering writes the store; lookups are cached."""

from __future__ import annotations

import threading

from cairn.definitions.loader import load_definition
from cairn.errors import UnknownWorkflow
from cairn.model.definition import WorkflowDefinition
from cairn.store.sql import Store, Tx


class Registry:
    """Definitions by (name, version). Registering writes the store; lookups are cached."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._cache: dict[tuple[str, int], WorkflowDefinition] = {}
        self._lock = threading.Lock()

    def register(self, definition: WorkflowDefinition) -> bool:
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
            registered=True,
            implied_format=registered_format,
        )
        with self._lock:
            self._cache[(name, found_version)] = definition
        return definition
