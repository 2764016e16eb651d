"""Which build of the code a node's message goes to (docs/versions.md).

A worker announces its build: an id, the workflow versions it runs, and the earlier
builds it declares itself compatible with. A run records the build it started on. Its
workflow's ``versioning`` says what that means for its later nodes:

- ``any``: nothing — any worker of the node's queue runs it (what cairn always did);
- ``pinned``: only workers of the run's build;
- ``auto-upgrade``: the newest live build that declares itself compatible with the run's
  build (or is it), so that a deploy takes over the runs in flight at their next node.

Pure: the caller reads the live builds and the clock; this decides.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum


class Versioning(StrEnum):
    ANY = "any"
    PINNED = "pinned"
    AUTO_UPGRADE = "auto-upgrade"


# The separator of a build's own queue: ``cairn@1.4.0-3f2a9c01b2de``. ``@`` is no
# character of a queue name (cairn.model.queues), so the two never collide.
BUILD_QUEUE_SEPARATOR = "@"


MAX_BUILD_ID = 64
BUILD_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+\-]*$")


def build_id_problem(value: object) -> str | None:
    """Why ``value`` is not a build id, or None if it is one: it names a broker queue
    (``<queue>@<build>``), so it keeps to what a queue name may hold, and ``+``."""
    if not isinstance(value, str) or not value or len(value) > MAX_BUILD_ID:
        return f"a build id is a string of 1 to {MAX_BUILD_ID} characters, got {value!r}"
    if not BUILD_ID.match(value):
        return (
            f"build id {value!r} may only hold letters, digits, '_', '-', '.' and '+', "
            "and starts with a letter or a digit"
        )
    return None


def build_queue(queue: str, build: str | None) -> str:
    """The broker queue of ``queue``'s messages for ``build`` (None: the queue itself)."""
    return queue if build is None else f"{queue}{BUILD_QUEUE_SEPARATOR}{build}"


def workflow_key(workflow: str, version: int) -> str:
    """How a build lists a workflow version it runs: ``acme/checkout@2``."""
    return f"{workflow}@{version}"


@dataclass(frozen=True)
class LiveBuild:
    """A build some worker announced recently: its id, the workflow versions it runs
    (``workflow_key``), the builds it can take over, and when it was first announced
    (seconds since the epoch: the newest build is the one first seen last)."""

    build: str
    runs: frozenset[str] = field(default_factory=frozenset)
    compatible: frozenset[str] = field(default_factory=frozenset)
    first_at: float = 0.0

    def takes_over(self, build: str) -> bool:
        return self.build == build or build in self.compatible


def _newest_first(live: Iterable[LiveBuild]) -> list[LiveBuild]:
    return sorted(live, key=lambda b: (b.first_at, b.build), reverse=True)


def starting_build(live: Sequence[LiveBuild], workflow: str) -> str | None:
    """The build a run of ``workflow`` (a ``workflow_key``) starts on: the newest live
    build that runs it; None while none does."""
    for candidate in _newest_first(live):
        if workflow in candidate.runs:
            return candidate.build
    return None


def route(
    versioning: Versioning, run_build: str | None, live: Sequence[LiveBuild], workflow: str
) -> str | None:
    """The build a node of a run goes to; None: any worker of its queue.

    ``run_build``: the build the run started on (None: it has none yet, and goes
    anywhere). A pinned run goes to its build whether or not one is live — its message
    waits for such a worker; an auto-upgrade run to the newest live build that runs its
    workflow version and declares itself compatible with the run's build, else its own."""
    if versioning is Versioning.ANY or run_build is None:
        return None
    if versioning is Versioning.AUTO_UPGRADE:
        for candidate in _newest_first(live):
            if workflow in candidate.runs and candidate.takes_over(run_build):
                return candidate.build
    return run_build


def waiting_for(
    versioning: Versioning, run_build: str | None, live: Sequence[LiveBuild], workflow: str
) -> str | None:
    """The build a run waits for because no live worker can run its nodes; None if one
    can (or the run is not routed)."""
    target = route(versioning, run_build, live, workflow)
    if target is None or any(b.build == target for b in live):
        return None
    return target
