"""Draining a workflow version: per workflow of a namespace, each version registered or
still run, with its runs in flight, how many of them wait, and since when the oldest — the
read model behind ``cairn versions``, ``GET /v1/versions`` and the console's versions page.

A version is **drained** when no run of it is in flight: nothing will execute its graph
again, so it may be left behind (its definition stays registered: the history of its
finished runs reads through it)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from cairn.engine.orchestrator import Orchestrator
from cairn.engine.patches import PatchInFlight, answers_in_flight
from cairn.store.versions import InFlight, Registered


@dataclass(frozen=True)
class OnBuild:
    """The runs in flight of a version that started on one build."""

    build: str
    in_flight: int
    waiting: int
    oldest_at: float


@dataclass(frozen=True)
class VersionView:
    """One version of a workflow, and what of it is still in flight."""

    version: int
    registered_at: float | None  # None: run here, registered in the namespace that shares it
    newest: bool  # new runs start on it
    in_flight: int = 0
    waiting: int = 0
    oldest_at: float | None = None  # the oldest run in flight's creation (epoch seconds)
    # Its runs in flight by the build they started on (those routed by build).
    builds: tuple[OnBuild, ...] = ()
    # The patch markers its runs in flight answered, and whether one still needs the old
    # path (docs/versions.md#patch-markers).
    patches: tuple[PatchInFlight, ...] = ()

    @property
    def drained(self) -> bool:
        return self.in_flight == 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "registered_at": self.registered_at,
            "newest": self.newest,
            "in_flight": self.in_flight,
            "waiting": self.waiting,
            "oldest_at": self.oldest_at,
            "drained": self.drained,
            "builds": [asdict(share) for share in self.builds],
            "patches": [patch.to_dict() for patch in self.patches],
        }


@dataclass(frozen=True)
class WorkflowVersions:
    """A workflow's versions, oldest first."""

    workflow: str  # its name; ``namespace/name`` for one another namespace shares
    versions: list[VersionView] = field(default_factory=list)

    @property
    def in_flight(self) -> int:
        return sum(version.in_flight for version in self.versions)

    def to_dict(self) -> dict[str, Any]:
        return {
            "workflow": self.workflow,
            "in_flight": self.in_flight,
            "versions": [version.to_dict() for version in self.versions],
        }


def versions_of(
    orchestrator: Orchestrator, namespace: str, workflow: str | None = None
) -> list[WorkflowVersions]:
    """Every workflow ``namespace`` registered or runs (``workflow`` only, if given), each
    with its versions, their runs in flight and the patch markers those answered."""
    with orchestrator.store.reading() as tx:
        registered = tx.registered_versions(namespace, workflow)
        in_flight = tx.in_flight_by_version(namespace, workflow)
    shown = assemble(namespace, registered, in_flight)
    return [_with_patches(orchestrator, namespace, entry) for entry in shown]


def _with_patches(
    orchestrator: Orchestrator, namespace: str, entry: WorkflowVersions
) -> WorkflowVersions:
    """The patch answers of each version with runs in flight (a workflow another namespace
    shares is named ``owner/name``: its runs' answers are not read here)."""
    if "/" in entry.workflow:
        return entry
    views = [
        replace(
            view,
            patches=tuple(
                answers_in_flight(orchestrator, entry.workflow, view.version, namespace=namespace)
            ),
        )
        if view.in_flight
        else view
        for view in entry.versions
    ]
    return replace(entry, versions=views)


def assemble(
    namespace: str, registered: list[Registered], in_flight: list[InFlight]
) -> list[WorkflowVersions]:
    """The report from the two reads (pure: tested without a database)."""
    since: dict[tuple[str, int], float | None] = {
        (r.workflow, r.version): r.registered_at for r in registered
    }
    running: dict[tuple[str, int], list[InFlight]] = defaultdict(list)
    for group in in_flight:
        name = (
            group.workflow
            if group.workflow_namespace == namespace
            else f"{group.workflow_namespace}/{group.workflow}"
        )
        running[(name, group.version)].append(group)
        since.setdefault((name, group.version), None)
    by_workflow: dict[str, list[int]] = defaultdict(list)
    for name, version in sorted(since):
        by_workflow[name].append(version)
    shown = []
    for name, versions in by_workflow.items():
        # New runs start on the newest version the namespace registered.
        newest = max((v for v in versions if since[(name, v)] is not None), default=None)
        views = [
            _view(version, since[(name, version)], version == newest, running[(name, version)])
            for version in versions
        ]
        shown.append(WorkflowVersions(name, views))
    return shown


def _view(
    version: int, registered_at: float | None, newest: bool, groups: list[InFlight]
) -> VersionView:
    if not groups:
        return VersionView(version, registered_at, newest)
    on_builds = tuple(
        OnBuild(g.build, g.runs, g.waiting, g.oldest_at) for g in groups if g.build is not None
    )
    return VersionView(
        version,
        registered_at,
        newest,
        in_flight=sum(g.runs for g in groups),
        waiting=sum(g.waiting for g in groups),
        oldest_at=min(g.oldest_at for g in groups),
        builds=tuple(sorted(on_builds, key=lambda share: share.build)),
    )
