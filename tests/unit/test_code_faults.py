"""A worker's code faults go through the engine's book (the worker opens no transaction):
recorded when the worker says so, and cleared once this worker has loaded the version."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from cairn.engine.code_faults import CodeMissing
from cairn.errors import DefinitionFault, WorkflowDefinitionError
from cairn.model.events import Phase
from cairn.model.messages import NodeMessage
from cairn.workers.code_faults import CodeFaults


@dataclass
class Book:
    recorded: list[tuple[Any, ...]] = field(default_factory=list)
    cleared: list[tuple[str, int, str]] = field(default_factory=list)

    def record(self, workflow: str, version: int, worker: str, *, fault: str, seen: int) -> None:
        self.recorded.append((workflow, version, worker, seen))

    def clear(self, workflow: str, version: int, worker: str) -> None:
        self.cleared.append((workflow, version, worker))


MESSAGE = NodeMessage("run-1", "acme/codeless", 1, "fetch", 1, 1, Phase.RUN)
FAULT = WorkflowDefinitionError([DefinitionFault("handler_import", "no module named shop")])


def test_a_fault_is_recorded_then_cleared_once_the_version_loads() -> None:
    book = Book()
    faults = CodeFaults(book, "worker-1")
    faults.missing(CodeMissing(MESSAGE, FAULT))
    assert book.recorded == [("acme/codeless", 1, "worker-1", 1)]
    faults.settle()
    assert book.cleared == []  # nothing loaded yet
    faults.loaded(MESSAGE)
    faults.settle()
    assert book.cleared == [("acme/codeless", 1, "worker-1")]
    faults.loaded(MESSAGE)  # loaded again: nothing more to clear
    faults.settle()
    assert book.cleared == [("acme/codeless", 1, "worker-1")]


def test_a_version_that_never_failed_here_is_never_cleared() -> None:
    book = Book()
    faults = CodeFaults(book, "worker-1")
    faults.loaded(MESSAGE)
    faults.settle()
    assert book == Book()
