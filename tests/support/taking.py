"""Two runtimes on one database, each with its own pool, leases and run locks — two
processes as far as the engine can tell — whose messages the test takes and runs by hand."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from cairn.config import Settings
from cairn.model.messages import NodeMessage
from cairn.runtime import Runtime


class Taking:
    """A publisher that keeps the messages for the test to run."""

    def __init__(self) -> None:
        self.messages: list[NodeMessage] = []
        self._lock = threading.Lock()

    def publish(self, messages: Sequence[NodeMessage]) -> bool:
        with self._lock:
            self.messages.extend(messages)
        return True

    def backlog(self, queue: str | None = None) -> int | None:
        return None

    def take(self, node: str) -> list[NodeMessage]:
        with self._lock:
            taken = [m for m in self.messages if m.node.startswith(node)]
            self.messages = [m for m in self.messages if m not in taken]
        return taken


@contextmanager
def two_processes(home: Path, workflows: str, database_url: str | None) -> Iterator[list[Runtime]]:
    """Two runtimes registering ``workflows`` (a module) on PostgreSQL at
    ``database_url``, or on one SQLite file under ``home``."""
    # Every step published, for the test to take (a test of continuing turns it on).
    values: dict[str, Any] = {
        "home": home,
        "workflows": [workflows],
        "log_level": "WARNING",
        "continue_steps": False,
    }
    if database_url is not None:
        values["database_url"] = database_url
    runtimes = [Runtime.build(Settings(**values)) for _ in range(2)]
    try:
        for runtime in runtimes:
            runtime.orchestrator.publisher = Taking()
            runtime.orchestrator.steps.starts_leave_heads = True  # each runs nodes
        yield runtimes
    finally:
        for runtime in runtimes:
            runtime.close()


def taken(runtime: Runtime, node: str) -> list[NodeMessage]:
    """The messages ``runtime`` published for nodes named ``node...``, taken."""
    publisher = runtime.orchestrator.publisher
    assert isinstance(publisher, Taking)
    return publisher.take(node)


def run_together(pairs: Sequence[tuple[Runtime, NodeMessage]]) -> list[str]:
    """Each message run by its runtime's runner, all at once on threads of their own:
    what each run returned, as text."""
    results = [""] * len(pairs)

    def run(index: int, runtime: Runtime, message: NodeMessage) -> None:
        results[index] = str(runtime.runner.run(message.to_dict()))

    threads = [
        threading.Thread(target=run, args=(index, runtime, message))
        for index, (runtime, message) in enumerate(pairs)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return results
