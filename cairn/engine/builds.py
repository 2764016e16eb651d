"""Builds: which build of the code a process is, the builds live now, and the build each
node's message goes to (docs/versions.md#pinned-builds-and-auto-upgrade).

A process's build id is ``CAIRN_BUILD`` if set, else ``<cairn version>-<12 hex>``: the
first 12 hex digits of a SHA-256 over the source files of the modules its registered
handlers live in (see :func:`derived_build`). Workers announce theirs every
``CAIRN_BUILD_ANNOUNCE_S`` (:class:`Announcer`); a build announced within three of those
periods is live. Which build a node goes to is decided by :func:`cairn.model.builds.route`
over the run's build, its workflow's ``versioning`` and the live builds, read at most
every :data:`LIVE_CACHE_S` seconds.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.metadata
import importlib.util
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from cairn.config import Settings
from cairn.engine.outbox import Publisher
from cairn.engine.registry import Registry
from cairn.errors import CairnError
from cairn.model.builds import LiveBuild, Versioning, route, starting_build, waiting_for
from cairn.model.builds import workflow_key as key_of
from cairn.model.definition import Ref, WorkflowDefinition
from cairn.model.messages import NodeMessage
from cairn.model.statuses import RunStatus
from cairn.store.sql import Store

log = logging.getLogger(__name__)

# How long the live builds read is reused: routing costs no read per message.
LIVE_CACHE_S = 5.0
# A build is live while announced within this many announce periods.
LIVE_PERIODS = 3
# The runs whose build this process remembers (a run's build never changes once set).
RUN_BUILDS_KEPT = 10_000
DIGEST_HEX = 12


def package_version() -> str:
    """The installed cairn's version (its metadata; the source's own when not installed)."""
    try:
        return importlib.metadata.version("cairn")
    except importlib.metadata.PackageNotFoundError:
        from cairn import __version__  # noqa: PLC0415 - cairn's __init__ imports its users

        return __version__


def _refs(value: object, seen: set[int]) -> Iterator[Ref]:
    """Every handler, guard and compensation reference in a compiled definition."""
    if isinstance(value, Ref):
        yield value
    elif id(value) in seen or isinstance(value, str | bytes | int | float):
        return
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        seen.add(id(value))
        for item in dataclasses.fields(value):
            yield from _refs(getattr(value, item.name), seen)
    elif isinstance(value, Mapping | tuple | list | frozenset | set):
        seen.add(id(value))
        items = value.values() if isinstance(value, Mapping) else value
        for item in items:
            yield from _refs(item, seen)


def handler_modules(definitions: Iterable[WorkflowDefinition]) -> list[str]:
    """The modules the definitions' handlers, guards and compensations live in, sorted."""
    seen: set[int] = set()
    return sorted({ref.path.partition(":")[0] for d in definitions for ref in _refs(d, seen)})


def source_digest(modules: Sequence[str]) -> str:
    """SHA-256 over, for each module in the order given: its name in UTF-8, a newline,
    the bytes of its source file (none when it has no source file: a built-in or a
    compiled extension's is not read), and a newline."""
    digest = hashlib.sha256()
    for module in modules:
        digest.update(module.encode() + b"\n")
        try:
            spec = importlib.util.find_spec(module)
        except (ImportError, ValueError):
            spec = None
        origin = spec.origin if spec is not None else None
        if origin is not None and origin.endswith(".py") and Path(origin).is_file():
            digest.update(Path(origin).read_bytes())
        digest.update(b"\n")
    return digest.hexdigest()


def derived_build(definitions: Iterable[WorkflowDefinition]) -> str:
    """``<cairn version>-<12 hex>`` of :func:`source_digest` over :func:`handler_modules`."""
    return f"{package_version()}-{source_digest(handler_modules(definitions))[:DIGEST_HEX]}"


def build_of(settings: Settings, definitions: Iterable[WorkflowDefinition]) -> str:
    """This process's build: ``CAIRN_BUILD``, else derived from its handlers' source."""
    return settings.build or derived_build(definitions)


class BuildBook:
    """The live builds, as this process last read them, and the build each run started
    on: routing a node costs no read but once per run and once per
    :data:`LIVE_CACHE_S`."""

    def __init__(self, store: Store, registry: Registry, settings: Settings) -> None:
        self.store = store
        self.registry = registry
        self.window_s = settings.build_announce_s * LIVE_PERIODS
        self._lock = threading.Lock()
        self._live: tuple[float, list[LiveBuild]] | None = None
        self._runs: OrderedDict[str, str] = OrderedDict()

    def live(self) -> list[LiveBuild]:
        """The builds announced within the window, read at most every few seconds."""
        now = time.monotonic()
        with self._lock:
            if self._live is not None and now - self._live[0] < LIVE_CACHE_S:
                return self._live[1]
        with self.store.reading() as tx:
            records = tx.builds(self.window_s)
        live = [
            LiveBuild(r.build, frozenset(r.workflows), frozenset(r.compatible), r.first_at)
            for r in records
        ]
        with self._lock:
            self._live = (now, live)
        return live

    def forget_live(self) -> None:
        """Read the live builds afresh next time (a build was just announced here)."""
        with self._lock:
            self._live = None

    def run_build(self, run_id: str, workflow: str, *, start: bool = True) -> str | None:
        """The build ``run_id`` started on; ``start``: if it has none yet, record the newest
        live build that runs ``workflow`` (a workflow key) as its build."""
        with self._lock:
            known = self._runs.get(run_id)
        if known is not None:
            return known
        with self.store.reading() as tx:
            build = tx.run_build(run_id)
        if build is None and start:
            first = starting_build(self.live(), workflow)
            if first is not None:
                with self.store.transaction() as tx:
                    build = tx.start_run_on(run_id, first)
        if build is not None:
            with self._lock:
                self._runs[run_id] = build
                while len(self._runs) > RUN_BUILDS_KEPT:
                    self._runs.popitem(last=False)
        return build

    def routed(self, message: NodeMessage) -> NodeMessage:
        """``message`` with the build it must go to (unchanged when its workflow does not
        route by build, or its definition cannot be read: a node is never lost to this)."""
        try:
            definition = self.registry.get(message.workflow, message.version)
        except CairnError:
            return message
        if definition.versioning is Versioning.ANY:
            return message
        workflow = key_of(message.workflow, message.version)
        run_build = self.run_build(message.run_id, workflow)
        target = route(definition.versioning, run_build, self.live(), workflow)
        return message if target is None else replace(message, build=target)

    def target(self, run_id: str, definition: WorkflowDefinition) -> str | None:
        """The build a node of ``run_id`` goes to now (None: any worker); no write."""
        if definition.versioning is Versioning.ANY:
            return None
        workflow = key_of(definition.qualified, definition.version)
        run_build = self.run_build(run_id, workflow, start=False)
        return route(definition.versioning, run_build, self.live(), workflow)

    def waiting_for(self, run_id: str, definition: WorkflowDefinition) -> str | None:
        """The build a run waits for because no live worker runs it (docs/versions.md);
        None when one does, or its workflow does not route by build."""
        if definition.versioning is Versioning.ANY:
            return None
        workflow = key_of(definition.qualified, definition.version)
        run_build = self.run_build(run_id, workflow, start=False)
        return waiting_for(definition.versioning, run_build, self.live(), workflow)

    def waiting_runs(self) -> dict[tuple[str, str], int]:
        """Unfinished runs waiting for a worker of a build, by (workflow ref, build): the
        gauge ``cairn_runs_waiting_for_worker``."""
        unfinished = [status.value for status in RunStatus if not status.terminal]
        with self.store.reading() as tx:
            counts = tx.runs_by_build(unfinished)
        live = self.live()
        waiting: dict[tuple[str, str], int] = {}
        for (workflow, version, build), count in counts.items():
            try:
                versioning = self.registry.get(workflow, version).versioning
            except CairnError:
                continue
            target = waiting_for(versioning, build, live, key_of(workflow, version))
            if target is not None:
                waiting[(workflow, target)] = waiting.get((workflow, target), 0) + count
        return waiting


class RoutingPublisher:
    """A publisher whose messages first get their build (:meth:`BuildBook.routed`): each
    goes to its queue's queue of that build (``<queue>@<build>``), which only workers of
    the build consume. Every publish goes through it — a step's dispatches, the relay's,
    a recovery's, a slot's wake — so no path sends a node where it cannot run."""

    def __init__(self, publisher: Publisher, book: BuildBook) -> None:
        self.inner = publisher
        self.book = book

    def publish(self, messages: Sequence[NodeMessage]) -> bool:
        routed = []
        for message in messages:
            try:
                routed.append(self.book.routed(message))
            except Exception:  # the relay publishes it again, routed then
                log.warning("could not route %s to a build", message.key, exc_info=True)
                return False
        return self.inner.publish(routed)

    def backlog(self, queue: str | None = None) -> int | None:
        return self.inner.backlog(queue)


class Announcer:
    """A worker's announcement of its build, every ``CAIRN_BUILD_ANNOUNCE_S`` on a
    thread of its own, until stopped. A failed announcement is logged and tried again
    at the next period: a build unannounced for a while only stops taking new runs."""

    def __init__(
        self, store: Store, settings: Settings, build: str, workflows: Sequence[str]
    ) -> None:
        self.store = store
        self.build = build
        self.workflows = list(workflows)
        self.compatible = list(settings.compatible_builds)
        self.every_s = settings.build_announce_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.after_each: Callable[[], None] = lambda: None

    def announce(self) -> None:
        try:
            with self.store.transaction() as tx:
                tx.announce_build(self.build, self.workflows, self.compatible)
        finally:
            self.after_each()

    def start(self) -> Announcer:
        self._thread = threading.Thread(target=self._loop, name="cairn-build", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while True:
            try:
                self.announce()
            except Exception:
                log.warning("could not announce build %s", self.build, exc_info=True)
            if self._stop.wait(self.every_s):
                return

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)


def workflow_keys(definitions: Iterable[WorkflowDefinition]) -> list[str]:
    """How a build lists the workflow versions it runs."""
    return sorted({key_of(d.qualified, d.version) for d in definitions})
