"""A worker's side of circuit breaking (see :mod:`cairn.limits.circuits`): before an
execution of a task with dependencies runs, the pools of their circuits that are not
closed join its concurrency pools; after it, its outcome is reported to each circuit — a
transient failure counts towards opening it, a success empties the count and closes an
open one. A circuit opening or closing is logged, counted, alerted (Sentry) and written to
the history of the run whose attempt did it (``audit.circuit_opened``,
``audit.circuit_reopened``, ``audit.circuit_closed``)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from cairn.limits.circuits import Change, Circuits, circuit_pools
from cairn.limits.concurrency import Pool
from cairn.model.definition import Dependency, ErrorClass
from cairn.model.events import Phase
from cairn.model.messages import NodeMessage
from cairn.model.outcomes import NodeOutcome
from cairn.model.statuses import NodeStatus
from cairn.observe.metrics.leases import circuit_counter
from cairn.observe.sentry import report_circuit
from cairn.workers.ports import AuditRecord

log = logging.getLogger("cairn.circuits")


@dataclass(frozen=True)
class Guarded:
    """An execution's circuits, as it found them before it ran."""

    dependencies: tuple[Dependency, ...]
    pools: list[Pool]  # of those not closed: it takes a slot of each (parks on an open one)
    counting: frozenset[str]  # those its success changes (the others it need not tell)


@dataclass
class CircuitWatch:
    circuits: Circuits
    record: AuditRecord  # the circuit's changes, in the run's history
    count: Callable[[str], None] | None = None  # the fleet-wide counters (Leases.count)

    def look(self, message: NodeMessage, dependencies: tuple[Dependency, ...]) -> Guarded | None:
        """One read of every circuit of the execution (None: it has none to tell — no
        dependency, or a compensation, which undoes work and tells nothing of it)."""
        if message.phase is not Phase.RUN or not dependencies:
            return None
        looks = self.circuits.look([d.name for d in dependencies])
        counting = frozenset(name for name, look in looks.items() if look.counting)
        return Guarded(dependencies, circuit_pools(dependencies, looks), counting)

    def report(self, message: NodeMessage, guarded: Guarded, outcome: NodeOutcome) -> None:
        failed = (
            outcome.status is NodeStatus.FAILED
            and outcome.error_class == ErrorClass.TRANSIENT.value
        )
        if not (failed or outcome.status is NodeStatus.SUCCEEDED):
            return  # a permanent failure is the handler's, a cancel nobody's
        for dependency in guarded.dependencies:
            if not failed and dependency.name not in guarded.counting:
                continue  # closed with nothing counted: a success changes nothing
            try:
                change = (
                    self.circuits.failed(dependency, message.run_id)
                    if failed
                    else self.circuits.succeeded(dependency.name)
                )
            except Exception:  # the outcome stands; the next one is counted
                log.warning("could not report to the circuit of %s", dependency.name, exc_info=True)
                continue
            if change is not None:
                self._changed(message, dependency, change)

    def _changed(self, message: NodeMessage, dependency: Dependency, change: Change) -> None:
        name = dependency.name
        if change is Change.CLOSED:
            log.warning("circuit of %s closed: %s/%s succeeded", name, message.run_id, message.node)
        elif change is Change.REOPENED:
            log.warning(
                "circuit of %s reopened: its probe %s/%s failed; the next in %.0f s",
                name,
                message.run_id,
                message.node,
                dependency.open_for.total_seconds(),
            )
        else:
            log.warning(
                "circuit of %s opened: %d runs failed in a row; attempts wait %.0f s for a probe",
                name,
                dependency.failures,
                dependency.open_for.total_seconds(),
            )
        data = {
            "dependency": name,
            "node": message.node,
            "attempt": message.attempt,
            "failures": dependency.failures,
            "window_s": dependency.window.total_seconds(),
            "open_for_s": dependency.open_for.total_seconds(),
        }
        try:
            self.record(message.run_id, f"circuit_{change.value}", data)
            if self.count is not None:
                self.count(circuit_counter(name, change.value))
        except Exception:  # the circuit changed all the same; only its telling is lost
            log.warning("could not record the circuit of %s %s", name, change.value, exc_info=True)
        report_circuit(name, change.value, run_id=message.run_id, node=message.node)
