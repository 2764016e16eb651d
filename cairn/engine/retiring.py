"""Retiring a build: which builds the fleet's workers announced, which are live, and
which may go — part of what ``cairn versions`` shows (docs/versions.md#retiring-a-build).

A build is **needed** by a run in flight whose next node only a worker of that build may
run: a ``pinned`` run that started on it, or an ``auto-upgrade`` run that started on it
while no other live build declares itself compatible with it (cairn.model.builds.route,
asked as if the build were gone). A run of a workflow with ``versioning: any`` needs no
build. A build no run in flight needs is **safe to retire**: stop its workers, and
nothing waits for them. Builds are the fleet's, shared by every namespace, so the runs
counted are every namespace's."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cairn.engine.orchestrator import Orchestrator
from cairn.errors import CairnError
from cairn.model.builds import LiveBuild, Versioning, route, workflow_key
from cairn.store.versions import IN_FLIGHT


@dataclass(frozen=True)
class BuildView:
    """One build some worker announced, and whether a run in flight still needs it."""

    build: str
    first_at: float  # when a worker first announced it (the database's clock)
    last_at: float  # when one last did
    live: bool  # announced within the live window: its workers are up
    workflows: tuple[str, ...]  # the workflow versions it runs (``name@version``)
    compatible: tuple[str, ...]  # the earlier builds it declares it can take over
    needed_by: int  # runs in flight only this build may run next

    @property
    def safe_to_retire(self) -> bool:
        return self.needed_by == 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "build": self.build,
            "first_at": self.first_at,
            "last_at": self.last_at,
            "live": self.live,
            "workflows": list(self.workflows),
            "compatible": list(self.compatible),
            "needed_by": self.needed_by,
            "safe_to_retire": self.safe_to_retire,
        }


def builds_of(orchestrator: Orchestrator) -> list[BuildView]:
    """Every build announced, newest first, with the runs in flight that need it."""
    with orchestrator.store.reading() as tx:
        records = tx.builds(None)
        started_on = tx.runs_by_build(IN_FLIGHT)
    live = orchestrator.builds.live()
    alive = {b.build for b in live}
    needed: dict[str, int] = {}
    for (workflow, version, build), count in started_on.items():
        try:
            versioning = orchestrator.registry.get(workflow, version).versioning
        except CairnError:  # a definition this process cannot read: counted as needing it
            versioning = Versioning.PINNED
        if needs(versioning, build, live, workflow_key(workflow, version)):
            needed[build] = needed.get(build, 0) + count
    return [
        BuildView(
            r.build,
            r.first_at,
            r.last_at,
            r.build in alive,
            tuple(r.workflows),
            tuple(r.compatible),
            needed.get(r.build, 0),
        )
        for r in records
    ]


def needs(versioning: Versioning, build: str, live: list[LiveBuild], workflow: str) -> bool:
    """Whether a run of ``workflow`` started on ``build`` may run its next node only on
    ``build``: where it would be routed were ``build`` gone."""
    others = [b for b in live if b.build != build]
    return route(versioning, build, others, workflow) == build
