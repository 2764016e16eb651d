"""Housekeeping: snapshot compaction, and retention of ended runs and their artifacts.

- **compaction**: a run's newest snapshots are kept, and one per stretch of older history,
  so that its state at any seq replays a bounded number of events (the event log itself
  is never compacted);
- **retention**: the artifacts of runs that ended longer ago than
  ``CAIRN_ARTIFACTS_RETENTION_DAYS``, then runs that ended longer ago than
  ``CAIRN_RUN_RETENTION_S``, are deleted with their history (each off by default).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta

from cairn.artifacts.cleanup import expire as expire_artifacts
from cairn.artifacts.stores import open_store
from cairn.config import Settings
from cairn.engine.orchestrator import Orchestrator
from cairn.store.artifacts import ArtifactRegistry

log = logging.getLogger(__name__)

BATCH = 500


@dataclass
class Housekeeping:
    orchestrator: Orchestrator
    settings: Settings

    def expire(self) -> int:
        """Delete the artifacts of runs that ended longer ago than
        CAIRN_ARTIFACTS_RETENTION_DAYS, then runs that ended longer ago than
        CAIRN_RUN_RETENTION_S (each if set), a batch per pass; returns how many runs.
        (Orphan blobs are left to ``cairn artifacts-cleanup``: finding them lists the
        whole object store.)"""
        days = self.settings.artifacts_retention_days
        if days is not None:
            expire_artifacts(
                ArtifactRegistry(self.orchestrator.store),
                open_store(self.settings.effective_artifacts_url),
                timedelta(days=days),
                batch=BATCH,
                max_batches=1,
            )
        retention = self.settings.run_retention_s
        if not retention:
            return 0
        with self.orchestrator.store.transaction() as tx:
            expired = tx.delete_runs(tx.expired_runs(tx.now() - retention, BATCH))
        if expired:
            log.info("deleted %d run(s) that ended over %.0f s ago", expired, retention)
        return expired

    def compact(self) -> int:
        """Keep the newest snapshots of each run, and one per stretch of older history, so
        that state at any seq replays a bounded number of events."""
        keep_newest = self.settings.snapshot_keep
        stretch = 10 * self.settings.snapshot_every_events
        store = self.orchestrator.store
        with store.reading() as tx:
            crowded = tx.runs_with_snapshots_over(keep_newest, BATCH)
        deleted = 0
        for run_id in crowded:
            with store.transaction() as tx:
                seqs = tx.snapshot_seqs(run_id)
                old = seqs[:-keep_newest]
                kept_stretches: set[int] = set()
                doomed = []
                for seq in old:
                    if seq // stretch in kept_stretches:
                        doomed.append(seq)
                    else:
                        kept_stretches.add(seq // stretch)
                deleted += tx.delete_snapshots(run_id, doomed)
        return deleted
