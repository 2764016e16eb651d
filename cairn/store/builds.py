"""The builds workers announce and the build each run started on (migration 0029), for
routing a run's nodes to a worker that can run them (docs/versions.md). Times are the
database's."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select, update

from cairn.model.workflow_names import qualified
from cairn.store.base import TxBase
from cairn.store.records import from_epoch, to_epoch
from cairn.store.schema import runs
from cairn.store.schema_fleet import builds


@dataclass(frozen=True)
class BuildRecord:
    build: str
    workflows: list[str]
    compatible: list[str]
    first_at: float
    last_at: float

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


class BuildsTx(TxBase):
    """The builds table, and runs.build."""

    def announce_build(
        self, build: str, workflows: Sequence[str], compatible: Sequence[str]
    ) -> None:
        """``build`` is live: what it runs and can take over, as of now. The workflow
        versions of every process announcing one build are kept together (a build's
        processes may register different files)."""
        now = from_epoch(self.now())
        row = self.connection.execute(
            select(builds.c.workflows).where(builds.c.build == build)
        ).first()
        known = set(row.workflows) if row is not None else set()
        values = {
            "build": build,
            "workflows": sorted(known | set(workflows)),
            "compatible": sorted(set(compatible)),
            "first_at": now,
            "last_at": now,
        }
        insert = self._insert(builds).values(**values)
        self.connection.execute(
            insert.on_conflict_do_update(
                index_elements=["build"],
                set_={
                    "workflows": insert.excluded.workflows,
                    "compatible": insert.excluded.compatible,
                    "last_at": insert.excluded.last_at,
                },
            )
        )

    def builds(self, within_s: float | None = None) -> list[BuildRecord]:
        """The builds announced in the last ``within_s`` seconds (None: all), newest
        first."""
        query = select(builds)
        if within_s is not None:
            query = query.where(builds.c.last_at >= from_epoch(self.now() - within_s))
        rows = self.connection.execute(query.order_by(builds.c.first_at.desc())).mappings()
        return [
            BuildRecord(
                row["build"],
                list(row["workflows"]),
                list(row["compatible"]),
                to_epoch(row["first_at"]),
                to_epoch(row["last_at"]),
            )
            for row in rows
        ]

    def run_build(self, run_id: str) -> str | None:
        """The build ``run_id`` started on (None: none recorded)."""
        row = self.connection.execute(select(runs.c.build).where(runs.c.id == run_id)).first()
        return None if row is None else row.build

    def start_run_on(self, run_id: str, build: str) -> str | None:
        """Record that ``run_id`` started on ``build`` unless it has a build already;
        the build it has now (None: no such run)."""
        self.connection.execute(
            update(runs).where(runs.c.id == run_id, runs.c.build.is_(None)).values(build=build)
        )
        return self.run_build(run_id)

    def runs_by_build(self, statuses: Sequence[str]) -> dict[tuple[str, int, str], int]:
        """How many runs in ``statuses`` started on each build, by (workflow ref, version,
        build)."""
        c = runs.c
        query = (
            select(c.workflow_namespace, c.workflow, c.version, c.build, func.count())
            .where(c.build.is_not(None), c.status.in_(list(statuses)))
            .group_by(c.workflow_namespace, c.workflow, c.version, c.build)
        )
        return {
            (qualified(ns, wf), int(version), build): int(count)
            for ns, wf, version, build, count in self.connection.execute(query)
        }
