"""Removing what no artifact needs any more: orphan blobs, and expired artifacts.

An **orphan** is a blob no registration names: a worker wrote it and died before it
registered it, or a retention pass deleted its rows and died before its blobs. Orphans
younger than the grace period are left alone — a put may be between its write and its
registration right now (it would write the blob again, but needlessly).

**Retention** deletes the artifacts of runs that finished more than
``CAIRN_ARTIFACTS_RETENTION_DAYS`` ago, rows first and then their blobs — except a blob
whose content another, live artifact shares (content addressing stores it once).

Both are safe to run from several processes at once and to interrupt anywhere: a blob
is deleted only under its lock and only if no row names it (see
:mod:`cairn.store.artifacts`); what an interrupted pass leaves is an orphan, which
the next pass removes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import timedelta

from cairn.artifacts.stores import ObjectStore
from cairn.store.artifacts import ArtifactRegistry
from cairn.store.records import from_epoch

log = logging.getLogger(__name__)

# Blobs checked against the registry per query.
CHUNK = 500


@dataclass(frozen=True)
class CleanupReport:
    orphans_deleted: int = 0
    partial_deleted: int = 0
    expired_rows: int = 0
    expired_blobs: int = 0

    def __add__(self, other: CleanupReport) -> CleanupReport:
        return CleanupReport(
            self.orphans_deleted + other.orphans_deleted,
            self.partial_deleted + other.partial_deleted,
            self.expired_rows + other.expired_rows,
            self.expired_blobs + other.expired_blobs,
        )


def collect_orphans(
    registry: ArtifactRegistry,
    objects: ObjectStore,
    grace: timedelta,
    *,
    clock: Callable[[], float] = time.time,
) -> CleanupReport:
    """Delete blobs that no registration names and that are older than ``grace``; and
    writes a crash left incomplete."""
    cutoff = clock() - grace.total_seconds()
    old = (blob.sha256 for blob in objects.blobs() if blob.modified < cutoff)
    deleted = _delete_unreferenced(registry, objects, old)
    partial = objects.sweep_partial(cutoff)
    if deleted or partial:
        log.info("artifacts: deleted %d orphan blob(s), %d partial write(s)", deleted, partial)
    return CleanupReport(orphans_deleted=deleted, partial_deleted=partial)


def expire(
    registry: ArtifactRegistry,
    objects: ObjectStore,
    retention: timedelta,
    *,
    clock: Callable[[], float] = time.time,
    batch: int = 1000,
    max_batches: int | None = None,
) -> CleanupReport:
    """Delete the artifacts of runs that finished more than ``retention`` ago: their
    rows, then each blob no remaining row shares; all of them, or ``max_batches``
    batches (a scheduler pass must not run for long)."""
    finished_before = from_epoch(clock() - retention.total_seconds())
    rows = blobs = batches = 0
    while max_batches is None or batches < max_batches:
        shas = registry.expire(finished_before, limit=batch)
        batches += 1
        rows += len(shas)
        blobs += _delete_unreferenced(registry, objects, shas)
        if len(shas) < batch:
            break
    if rows:
        log.info("artifacts: expired %d registration(s), deleted %d blob(s)", rows, blobs)
    return CleanupReport(expired_rows=rows, expired_blobs=blobs)


def clean(
    registry: ArtifactRegistry,
    objects: ObjectStore,
    *,
    grace: timedelta,
    retention: timedelta | None,
    clock: Callable[[], float] = time.time,
) -> CleanupReport:
    """A whole pass: retention (if configured), then orphans."""
    report = CleanupReport()
    if retention is not None:
        report += expire(registry, objects, retention, clock=clock)
    return report + collect_orphans(registry, objects, grace, clock=clock)


def _delete_unreferenced(
    registry: ArtifactRegistry, objects: ObjectStore, shas: Iterable[str]
) -> int:
    deleted = 0
    chunk: list[str] = []

    def flush() -> int:
        # One query sorts out the blobs that are obviously still named; each candidate
        # is then checked again under its lock, where it counts.
        candidates = set(chunk) - registry.referenced(chunk)
        chunk.clear()
        return sum(
            registry.delete_blob_if_unreferenced(sha, objects.delete) for sha in sorted(candidates)
        )

    for sha in dict.fromkeys(shas):
        chunk.append(sha)
        if len(chunk) >= CHUNK:
            deleted += flush()
    if chunk:
        deleted += flush()
    return deleted


__all__ = ["CleanupReport", "clean", "collect_orphans", "expire"]
