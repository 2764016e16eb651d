"""A node of a workflow version whose handlers this worker cannot import.

Registering a definition imports its handlers, so this happens after a deploy: a worker
image without the package, a renamed module, a missing ``PYTHONPATH``. Failing the run
would punish it for the deployment; raising would print a traceback for every message.
Instead the worker logs one line per version (then at most one a minute, through
:class:`~cairn.repeats.Repeats`) naming the handler and what to install or set, records
the fault for ``cairn status --fleet`` and the API, and leaves the node as it was: the
run waits and the node is dispatched again by recovery, on this worker once fixed or on
another that has the code. The row goes once this worker loads the version.
"""

from __future__ import annotations

import logging
import threading

from cairn.engine.code_faults import CodeMissing
from cairn.model.messages import NodeMessage
from cairn.repeats import Repeats
from cairn.workers.ports import CodeFaultRecords

log = logging.getLogger(__name__)

WHAT_TO_DO = (
    "install the package that provides it where this worker runs, or add its folder to "
    "PYTHONPATH; the run waits, and the node is dispatched again"
)


class CodeFaults:
    """One worker's faults by workflow version: logged, recorded, cleared."""

    def __init__(self, book: CodeFaultRecords, worker: str) -> None:
        self.book, self.worker = book, worker
        self._repeats = Repeats(log)
        self._unsaid: dict[tuple[str, int], int] = {}  # occurrences not yet recorded
        self._loaded: list[tuple[str, int]] = []  # failed before, loaded since: to clear
        self._lock = threading.Lock()

    def loaded(self, message: NodeMessage) -> None:
        """The message's definition loaded: a version that failed here before is to clear."""
        if self._unsaid:  # only once a version failed here: no lock on the common path
            with self._lock:
                if self._unsaid.pop((message.workflow, message.version), None) is not None:
                    self._loaded.append((message.workflow, message.version))

    def missing(self, error: CodeMissing) -> None:
        message = error.message
        key = (message.workflow, message.version)
        with self._lock:
            seen = self._unsaid[key] = self._unsaid.get(key, 0) + 1
        faults = "; ".join(str(fault) for fault in error.fault.faults)
        said = self._repeats.failed(
            key,
            f"workflow {message.workflow}@{message.version} cannot run on worker {self.worker}",
            RuntimeError(f"{faults}: {WHAT_TO_DO}"),
            traceback=False,
        )
        if not said:
            return
        with self._lock:
            self._unsaid[key] = 0
        self.book.record(message.workflow, message.version, self.worker, fault=faults, seen=seen)

    def settle(self) -> None:
        """Clear the faults of the versions loaded since they failed: outside the read
        that loaded them (a database with one writer would wait for that read)."""
        if not self._loaded:
            return
        with self._lock:
            loaded, self._loaded = self._loaded, []
        for workflow, version in loaded:
            self._repeats.recovered(
                (workflow, version), f"workflow {workflow}@{version} runs on this worker again"
            )
            self.book.clear(workflow, version, self.worker)
