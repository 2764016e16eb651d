"""Artifact registrations in PostgreSQL (or SQLite in the embedded default).

A row per version: which run and execution made it (node, iteration, attempt, phase, a
call id), from what (model, tool, parameters, further metadata), when, and the blob it
names (sha256, size, uri). The constraints do the bookkeeping (see migration 0007):
concurrent puts of a name cannot take the same version, and a node that runs again and
puts the same content under the same name gets back what it registered before.

Blob and row must not drift apart: a row whose blob was deleted would be an artifact
nobody can read. A put and a cleanup therefore meet on a lock per blob — on PostgreSQL
an advisory lock (puts share it, a cleanup takes it alone), on SQLite the database's
single writer lock. A put confirms its blob is in the store under that lock before it
inserts the row; a cleanup checks under it that no row references a blob before it
deletes it. Whichever comes second sees what the first did.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import delete, func, select
from sqlalchemy.engine import Row

from cairn.errors import ArtifactNotFound, StoreError
from cairn.store.base import TxBase
from cairn.store.records import to_epoch, utcnow
from cairn.store.schema import artifacts, runs

if TYPE_CHECKING:
    from cairn.store.sql import Store
# Concurrent puts of one name race for the next version; the loser retries. More
# conflicts than this in one put means something other than a race is wrong.
MAX_VERSION_RACES = 20


@dataclass(frozen=True)
class Provenance:
    """Which execution puts an artifact, and from what."""

    run_id: str
    node: str
    iteration: int
    attempt: int
    phase: str
    call_id: str
    model: str | None = None
    tool: str | None = None
    params: Mapping[str, Any] | None = None
    meta: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class ArtifactInfo:
    """One registered version of an artifact."""

    run_id: str
    name: str
    version: int
    sha256: str
    size: int
    uri: str
    node: str
    iteration: int
    attempt: int
    phase: str
    call_id: str
    model: str | None
    tool: str | None
    params: dict[str, Any] | None
    meta: dict[str, Any] | None
    created_at: float

    def ref(self) -> dict[str, Any]:
        """The reference a handler gets back and the run state keeps: small, JSON."""
        return {
            "name": self.name,
            "version": self.version,
            "sha256": self.sha256,
            "size": self.size,
            "uri": self.uri,
        }

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _info(row: Row[Any]) -> ArtifactInfo:
    data = row._mapping
    return ArtifactInfo(
        run_id=data["run_id"],
        name=data["name"],
        version=data["version"],
        sha256=data["sha256"],
        size=data["size"],
        uri=data["uri"],
        node=data["node"],
        iteration=data["iteration"],
        attempt=data["attempt"],
        phase=data["phase"],
        call_id=data["call_id"],
        model=data["model"],
        tool=data["tool"],
        params=data["params"],
        meta=data["meta"],
        created_at=to_epoch(data["created_at"]),
    )


class ArtifactsTx(TxBase):
    """The ``artifacts`` table's statements (see the module)."""

    def _blob_lock(self, sha256: str, *, shared: bool) -> None:
        """The blob's lock until the transaction ends: a put shares it, a cleanup takes
        it alone. A database with one writer needs none — a transaction that writes
        holds the write lock from its BEGIN (:class:`cairn.store.sqlite.SqliteTx`)."""

    def artifact_put(
        self, run_id: str, node: str, iteration: int, name: str, sha256: str
    ) -> ArtifactInfo | None:
        """What this execution key registered before under ``name`` with this content."""
        row = self.connection.execute(
            select(artifacts).where(*_same_put(run_id, node, iteration, name, sha256))
        ).first()
        return _info(row) if row is not None else None

    def register_artifact(
        self, name: str, blob: Blob, provenance: Provenance, ensure_blob: Callable[[], object]
    ) -> ArtifactInfo:
        """Under the blob's shared lock, with the blob made sure of: the registration
        this put made before, or the name's next version."""
        p = provenance
        self._blob_lock(blob.sha256, shared=True)
        ensure_blob()
        for _race in range(MAX_VERSION_RACES):
            found = self.artifact_put(p.run_id, p.node, p.iteration, name, blob.sha256)
            if found is not None:
                return found
            latest = self.connection.execute(
                select(func.coalesce(func.max(artifacts.c.version), 0)).where(
                    artifacts.c.run_id == p.run_id, artifacts.c.name == name
                )
            ).scalar_one()
            # Either constraint may refuse the row: another put took this version (try
            # the next one), or the same put committed first (found above).
            inserted = self.connection.execute(
                self._insert(artifacts)
                .values(_row(name, int(latest) + 1, blob, p))
                .on_conflict_do_nothing()
                .returning(*artifacts.c)
            ).first()
            if inserted is not None:
                return _info(inserted)
        raise StoreError(
            f"registering artifact {name!r} of run {p.run_id}: lost the race for a version "
            f"{MAX_VERSION_RACES} times"
        )

    def artifact(self, run_id: str, name: str, version: int | None) -> ArtifactInfo | None:
        """A version of ``name`` in the run (the latest if ``version`` is None)."""
        query = select(artifacts).where(artifacts.c.run_id == run_id, artifacts.c.name == name)
        if version is None:
            query = query.order_by(artifacts.c.version.desc()).limit(1)
        else:
            query = query.where(artifacts.c.version == version)
        row = self.connection.execute(query).first()
        return _info(row) if row is not None else None

    def artifact_versions(self, run_id: str, name: str | None) -> list[ArtifactInfo]:
        query = select(artifacts).where(artifacts.c.run_id == run_id)
        if name is not None:
            query = query.where(artifacts.c.name == name)
        rows = self.connection.execute(query.order_by(artifacts.c.name, artifacts.c.version))
        return [_info(row) for row in rows]

    def blobs_referenced(self, wanted: list[str]) -> set[str]:
        found = self.connection.execute(
            select(artifacts.c.sha256).distinct().where(artifacts.c.sha256.in_(wanted))
        ).scalars()
        return set(found)

    def blob_unreferenced(self, sha256: str) -> bool:
        """No registration names the blob — nor can one until this transaction ends."""
        self._blob_lock(sha256, shared=False)
        named = self.connection.execute(
            select(artifacts.c.id).where(artifacts.c.sha256 == sha256).limit(1)
        ).first()
        return named is None

    def expire_artifacts(self, finished_before: datetime, limit: int) -> list[str]:
        finished = select(runs.c.id).where(runs.c.finished_at < finished_before)
        batch = (
            select(artifacts.c.id)
            .where(artifacts.c.run_id.in_(finished))
            .order_by(artifacts.c.id)
            .limit(limit)
        )
        deleted = self.connection.execute(
            delete(artifacts).where(artifacts.c.id.in_(batch)).returning(artifacts.c.sha256)
        ).scalars()
        return list(deleted)


@dataclass(frozen=True)
class Blob:
    """The content a registration names."""

    sha256: str
    size: int
    uri: str


def _row(name: str, version: int, blob: Blob, p: Provenance) -> dict[str, Any]:
    return {
        "run_id": p.run_id,
        "name": name,
        "version": version,
        "sha256": blob.sha256,
        "size": blob.size,
        "uri": blob.uri,
        "node": p.node,
        "iteration": p.iteration,
        "attempt": p.attempt,
        "phase": p.phase,
        "call_id": p.call_id,
        "model": p.model,
        "tool": p.tool,
        "params": dict(p.params) if p.params is not None else None,
        "meta": dict(p.meta) if p.meta is not None else None,
        "created_at": utcnow(),
    }


class ArtifactRegistry:
    """The ``artifacts`` table, through the store's transactions."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def find(
        self, run_id: str, node: str, iteration: int, name: str, sha256: str
    ) -> ArtifactInfo | None:
        """What this execution key registered before under ``name`` with this content."""
        with self.store.reading() as tx:
            return tx.artifact_put(run_id, node, iteration, name, sha256)

    def register(
        self,
        *,
        name: str,
        sha256: str,
        size: int,
        uri: str,
        provenance: Provenance,
        ensure_blob: Callable[[], object],
    ) -> ArtifactInfo:
        """Register the next version of ``name`` in the run — or return the registration
        this execution key made before with the same content. ``ensure_blob`` puts the
        blob back if a cleanup removed it since it was written; it runs under the blob's
        lock, so the row never names a blob that is gone."""
        with self.store.transaction() as tx:
            return tx.register_artifact(name, Blob(sha256, size, uri), provenance, ensure_blob)

    def get(self, run_id: str, name: str, version: int | None = None) -> ArtifactInfo:
        """A version of ``name`` in the run (the latest if ``version`` is None)."""
        with self.store.reading() as tx:
            found = tx.artifact(run_id, name, version)
        if found is None:
            which = f"version {version} of " if version is not None else ""
            raise ArtifactNotFound(f"run {run_id} has no {which}artifact {name!r}")
        return found

    def versions(self, run_id: str, name: str | None = None) -> list[ArtifactInfo]:
        """Every version registered in the run (of ``name`` only, if given), by name and
        version."""
        with self.store.reading() as tx:
            return tx.artifact_versions(run_id, name)

    def referenced(self, shas: Iterable[str]) -> set[str]:
        """Which of these blobs some registration names."""
        wanted = sorted(set(shas))
        if not wanted:
            return set()
        with self.store.reading() as tx:
            return tx.blobs_referenced(wanted)

    def delete_blob_if_unreferenced(self, sha256: str, delete_blob: Callable[[str], None]) -> bool:
        """Delete a blob unless a registration names it; True if deleted. Under the
        blob's lock, held alone: no put can register it meanwhile (see the module)."""
        with self.store.transaction() as tx:
            if not tx.blob_unreferenced(sha256):
                return False
            delete_blob(sha256)
            return True

    def expire(self, finished_before: datetime, limit: int = 1000) -> list[str]:
        """Delete the registrations of runs that finished before ``finished_before``, at
        most ``limit``; the sha256 of each deleted row (its blob may now be unreferenced)."""
        with self.store.transaction() as tx:
            return tx.expire_artifacts(finished_before, limit)


def _same_put(run_id: str, node: str, iteration: int, name: str, sha256: str) -> list[Any]:
    return [
        artifacts.c.run_id == run_id,
        artifacts.c.node == node,
        artifacts.c.iteration == iteration,
        artifacts.c.name == name,
        artifacts.c.sha256 == sha256,
    ]


__all__ = ["ArtifactInfo", "ArtifactRegistry", "ArtifactsTx", "Provenance"]
