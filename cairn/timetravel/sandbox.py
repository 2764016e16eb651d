"""Where a replay's (or a fork's dry run's) writes go, never the run's own: a namespace
of their own, an in-memory sandbox for the artifacts a replayed handler puts while it
still reads the real ones (``ctx.artifacts`` in a replay context), and the checkpoints it
saves (``ctx.checkpoint()``), kept in memory."""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cairn.artifacts import Artifacts, _check_name, _content
from cairn.artifacts.stores import MemoryStore, digest, open_store
from cairn.config import Settings
from cairn.store.artifacts import ArtifactInfo, ArtifactRegistry
from cairn.store.records import CheckpointRecord
from cairn.store.sql import Store
from cairn.workers.checkpoints import Checkpoints

REPLAY_TAG = "replay"


def replay_namespace(namespace: str) -> str:
    """Where a replay's (or a dry run's) writes are said to go: never the run's own."""
    return f"{namespace}.{REPLAY_TAG}"


class ArtifactSandbox:
    """Where the artifacts a replay puts go: blobs in this process's memory, their
    registrations in a dict — never the object store or the ``artifacts`` table."""

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        self.objects = MemoryStore(f"{namespace}/{uuid.uuid4().hex[:12]}")
        self._infos: dict[str, list[ArtifactInfo]] = {}

    def find(self, name: str, version: int) -> ArtifactInfo | None:
        return next((i for i in self._infos.get(name, ()) if i.version == version), None)

    def latest_version(self, name: str) -> int:
        return max((i.version for i in self._infos.get(name, ())), default=0)

    def add(self, info: ArtifactInfo) -> None:
        self._infos.setdefault(info.name, []).append(info)

    def holds(self, info: ArtifactInfo) -> bool:
        return info.uri.startswith(self.objects.url + "/")

    def infos(self) -> list[ArtifactInfo]:
        return [info for infos in self._infos.values() for info in infos]


class ReplayArtifacts(Artifacts):
    """``ctx.artifacts`` in a replay. Reads: the sandbox's puts, else the real registry
    and object store — this run's artifacts are ``source_run``'s (the run itself in a
    replay, the parent in a fork's dry run), and "the latest" means the latest as of the
    input state (``known``: its artifact references). Puts: the sandbox, tagged
    ``replay``; content the replayed execution already registered gets that
    registration back (read, not written), as a real retry would."""

    def __init__(
        self,
        store: Store,
        settings: Settings,
        sandbox: ArtifactSandbox,
        *,
        run_id: str,
        source_run: str,
        known: Mapping[str, Mapping[str, Any]],
        node: str,
        iteration: int,
        attempt: int,
        phase: str,
    ) -> None:
        super().__init__(
            ArtifactRegistry(store),
            lambda: open_store(settings.effective_artifacts_url),
            run_id=run_id,
            node=node,
            iteration=iteration,
            attempt=attempt,
            phase=phase,
        )
        self.sandbox = sandbox
        self.source_run = source_run
        self.known = dict(known)

    def put(
        self, name: str, data: bytes | bytearray | memoryview | str, **meta: Any
    ) -> dict[str, Any]:
        content = _content(data)
        _check_name(name)
        provenance = self._provenance(meta)
        sha256 = digest(content)
        info = None
        if self.source_run == self.run_id:  # a replay: what the execution registered then
            info = self.registry.find(self.run_id, self.node, self.iteration, name, sha256)
        if info is None:
            self.sandbox.objects.ensure(sha256, content)
            known = int((self.known.get(name) or {}).get("version", 0))
            info = ArtifactInfo(
                run_id=self.run_id,
                name=name,
                version=max(known, self.sandbox.latest_version(name)) + 1,
                sha256=sha256,
                size=len(content),
                uri=self.sandbox.objects.uri(sha256),
                node=self.node,
                iteration=self.iteration,
                attempt=self.attempt,
                phase=self.phase,
                call_id=provenance.call_id,
                model=provenance.model,
                tool=provenance.tool,
                params=dict(provenance.params) if provenance.params is not None else None,
                meta={**(provenance.meta or {}), REPLAY_TAG: self.sandbox.namespace},
                created_at=time.time(),
            )
            self.sandbox.add(info)
        ref = info.ref()
        kept = self._created.get(name)
        if kept is None or kept["version"] <= ref["version"]:
            self._created[name] = ref
        return ref

    def info(
        self, name: str, version: int | None = None, *, run_id: str | None = None
    ) -> ArtifactInfo:
        wanted = run_id or self.run_id
        if wanted not in (self.run_id, self.source_run):
            return self.registry.get(wanted, name, version)
        if version is None:
            ref = self._created.get(name) or self.known.get(name)
            version = int(ref["version"]) if ref is not None else None
        if version is not None:
            found = self.sandbox.find(name, version)
            if found is not None:
                return found
        return self.registry.get(self.source_run, name, version)

    def get(self, name: str, version: int | None = None, *, run_id: str | None = None) -> bytes:
        info = self.info(name, version, run_id=run_id)
        if self.sandbox.holds(info):
            return self.sandbox.objects.read(info.sha256)
        return self.objects.read(info.sha256)

    def versions(self, name: str | None = None, *, run_id: str | None = None) -> list[ArtifactInfo]:
        wanted = run_id or self.run_id
        if wanted not in (self.run_id, self.source_run):
            return self.registry.versions(wanted, name)
        found = self.registry.versions(self.source_run, name)
        found += [i for i in self.sandbox.infos() if name is None or i.name == name]
        return sorted(found, key=lambda info: (info.name, info.version))


@dataclass
class ReplayCheckpoints(Checkpoints):
    """``ctx.checkpoint()`` in a replay: checked as a live save would be (JSON, its size)
    and numbered, its working context kept in this process (``saved_contexts``) —
    never written to the run. Nothing is restored: the checkpoint a live execution
    resumed from was forgotten when its result was committed, and the replayed handler
    starts from the input state, its model calls answered from the record from the
    first on."""

    saved_contexts: list[dict[str, Any]] = field(default_factory=list)

    def save(self, context: Mapping[str, Any], turns: int) -> int:
        self._check(context)
        self.saved_contexts.append(dict(context))
        self.saved, self._last_at, self._last_turns = (
            len(self.saved_contexts),
            time.monotonic(),
            turns,
        )
        return self.saved

    def load(self) -> CheckpointRecord | None:
        return None

    def forget(self) -> None:
        return None
