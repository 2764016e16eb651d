"""What a namespace's runs in flight stand on: per workflow, version and the build a run
started on, how many are in flight, how many of those wait, and since when the oldest —
what draining a version or a build watches. Reads the listing's status index (namespace,
status, ...): the cost is the runs in flight, never the finished ones."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import case, func, select

from cairn.model.statuses import RunStatus
from cairn.store.base import TxBase
from cairn.store.records import to_epoch
from cairn.store.schema import runs, workflows

IN_FLIGHT = tuple(status.value for status in RunStatus if not status.terminal)


@dataclass(frozen=True)
class InFlight:
    """The runs in flight of one workflow version (and build) in a namespace."""

    workflow_namespace: str
    workflow: str
    version: int
    build: str | None  # the build they started on (None: not routed by build)
    runs: int
    waiting: int  # of them, waiting for a signal, a timer or a person
    oldest_at: float  # when the oldest of them was created (epoch seconds)


@dataclass(frozen=True)
class Registered:
    """A workflow version registered in a namespace, and when."""

    workflow: str
    version: int
    registered_at: float


class VersionsTx(TxBase):
    def in_flight_by_version(self, namespace: str, workflow: str | None = None) -> list[InFlight]:
        """The namespace's runs in flight, counted per workflow, version and build."""
        waiting = func.sum(case((runs.c.status == RunStatus.WAITING.value, 1), else_=0))
        group = (runs.c.workflow_namespace, runs.c.workflow, runs.c.version, runs.c.build)
        query = select(*group, func.count(), waiting, func.min(runs.c.created_at)).where(
            runs.c.namespace == namespace, runs.c.status.in_(IN_FLIGHT)
        )
        if workflow is not None:
            query = query.where(runs.c.workflow == workflow)
        rows = self.connection.execute(query.group_by(*group).order_by(*group))
        return [
            InFlight(
                row.workflow_namespace, row.workflow, int(row.version), row.build,
                int(row[4]), int(row[5] or 0), to_epoch(row[6]),
            )
            for row in rows
        ]  # fmt: skip

    def registered_versions(self, namespace: str, workflow: str | None = None) -> list[Registered]:
        """The workflow versions registered in ``namespace``, by name and version."""
        query = select(workflows.c.name, workflows.c.version, workflows.c.registered_at).where(
            workflows.c.namespace == namespace
        )
        if workflow is not None:
            query = query.where(workflows.c.name == workflow)
        rows = self.connection.execute(query.order_by(workflows.c.name, workflows.c.version))
        return [Registered(row[0], int(row[1]), to_epoch(row[2])) for row in rows]
