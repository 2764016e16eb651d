"""A workflow version whose handlers a worker cannot import, as the engine keeps it: the
read that found it raises :class:`CodeMissing`, and the worker's fault is recorded (for
``cairn status --fleet`` and the API) and cleared here, each in a transaction of its own
— the worker's side (:mod:`cairn.workers.code_faults`) logs and decides when."""

from __future__ import annotations

from cairn.errors import WorkflowDefinitionError
from cairn.model.messages import NodeMessage
from cairn.model.workflow_names import unqualified
from cairn.store.sql import Store


class CodeMissing(Exception):
    """A message's definition could not be loaded: its handlers do not import here."""

    def __init__(self, message: NodeMessage, fault: WorkflowDefinitionError) -> None:
        super().__init__(str(fault))
        self.message, self.fault = message, fault


class CodeFaultBook:
    """The recorded code faults, by workflow version and worker."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def record(self, workflow: str, version: int, worker: str, *, fault: str, seen: int) -> None:
        namespace, name = unqualified(workflow)
        with self.store.transaction() as tx:
            tx.record_code_fault(namespace, name, version, worker, fault=fault, seen=seen)

    def clear(self, workflow: str, version: int, worker: str) -> None:
        namespace, name = unqualified(workflow)
        with self.store.transaction() as tx:
            tx.clear_code_fault(namespace, name, version, worker)
