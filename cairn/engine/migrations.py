"""Migrating runs in flight between two versions of their workflow (``cairn runs
migrate``, ``POST /v1/runs/migrate``; docs/versions.md), and undoing one run's migration.

A dry run reads each selected run and checks it (:mod:`cairn.engine.migration_checks`),
writing nothing. The real migration takes each run in a transaction of its own: the run
row locked, the run read and checked again under the lock (it may have moved since the
dry run), then its version changed and one ``run_migrated`` event written through the
ordinary write path — its timers, dispatches and snapshot with it — and committed. A run
that no longer passes is reported, not moved; the others are not held back by it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cairn.decider import Decision
from cairn.decider.migration import position
from cairn.engine.advance import Advanced, Steps
from cairn.engine.migration_checks import Candidate, Mapper, MigrationCheck
from cairn.engine.reads import AUDIT_ONLY, restore, versions_of
from cairn.errors import CodeUnavailable, InvalidInput, NotMigratable, RunNotFound
from cairn.model.definition import import_ref
from cairn.model.events import RunMigrated, event_from_dict
from cairn.model.migrations import MigrationReport, Reason, RunVerdict, Where
from cairn.model.selection import RunFilter
from cairn.model.statuses import RunStatus
from cairn.model.workflow_names import qualified
from cairn.store.records import RunRecord
from cairn.store.sql import Tx

PAGE = 500
# Every run still on the old version and unfinished is reported: the ones that cannot
# move say why, so that nobody believes the old version drained when it did not.
UNFINISHED = tuple(status for status in RunStatus if not status.terminal)


@dataclass(frozen=True)
class MigrationRequest:
    """Which runs move where: ``workflow`` (its name in ``namespace``) from one version to
    another, through the mapping at ``mapping`` (``package.module:function``)."""

    namespace: str
    workflow: str
    from_version: int
    to_version: int
    mapping: str
    where: Where = field(default_factory=Where)
    reason: str = ""

    @property
    def ref(self) -> str:
        return qualified(self.namespace, self.workflow)


@dataclass(frozen=True)
class Undone:
    """A migration undone: the run, back on ``version``, and the seq of the event."""

    run_id: str
    version: int
    status: RunStatus
    seq: int
    decision: Decision


class Migrations:
    def __init__(self, steps: Steps) -> None:
        self.steps = steps
        self.store = steps.store
        self.registry = steps.registry

    def migrate(
        self, request: MigrationRequest, *, actor: str | None, dry_run: bool
    ) -> MigrationReport:
        """Check every selected run (``dry_run``: and write nothing), or move each that
        passes, each with its ``run_migrated`` event recording ``actor``."""
        if request.from_version == request.to_version:
            raise InvalidInput("--from and --to name the same version: nothing would move")
        mapper = _mapper(request.mapping)
        verdicts = []
        for run_id in self._selected(request):
            if dry_run:
                verdict = self._checked(request, mapper, run_id, actor)
            else:
                verdict = self._moved(request, mapper, run_id, actor)
            if verdict is not None:
                verdicts.append(verdict)
        return MigrationReport(
            request.workflow,
            request.from_version,
            request.to_version,
            request.mapping,
            dry_run,
            tuple(verdicts),
        )

    def rollback(self, run_id: str, *, actor: str | None, reason: str = "") -> Undone:
        """Undo run ``run_id``'s migration: back to its state just before it, on the old
        version, with an event of its own. Only while nothing else has happened to it
        since (:class:`NotMigratable` otherwise, and nothing is written)."""
        with self.store.transaction() as tx:
            row, now = tx.lock_run(run_id)
            if row is None:
                raise RunNotFound(f"no run {run_id}")
            migration, seq = _last_migration(tx, row)
            old = self.registry.get(row.workflow_ref, migration.from_version, tx)
            new = self.registry.get(row.workflow_ref, row.version, tx)
            versions = versions_of(self.registry, row, tx)
            before = restore(tx, row, old, seq - 1, versions)
            undone = RunMigrated(
                at=now,
                from_version=row.version,
                to_version=old.version,
                node=position(before) or "",
                mapping=migration.mapping,
                reason=reason,
                actor=actor,
                undoes=seq,
                rewind=before.to_dict(),
            )
            state = restore(tx, row, new, versions=versions)
            tx.move_run_version(run_id, row.version, old.version)
            advanced = self.steps.advance(tx, row, old, state, undone)
        self.steps.after_commit(advanced)
        state = advanced.decision.state
        return Undone(run_id, state.version, state.status, row.last_seq + 1, advanced.decision)

    # -- one run -----------------------------------------------------------------------

    def _selected(self, request: MigrationRequest) -> list[str]:
        """The ids of the runs of the old version the request selects by its row, oldest
        first (``--where`` on their state is checked with each)."""
        selection = RunFilter(
            statuses=UNFINISHED,
            workflow=request.workflow,
            version=request.from_version,
            ids=request.where.ids,
        )
        found: list[str] = []
        before = None
        with self.store.reading() as tx:
            # Both versions must exist before anything is read: a typo fails at once.
            for version in (request.from_version, request.to_version):
                self.registry.get(request.ref, version, tx)
            while True:
                page = tx.runs_page(request.namespace, selection, limit=PAGE, before=before)
                found.extend(listed.id for listed in page)
                if len(page) < PAGE:
                    break
                before = (page[-1].created_at, page[-1].id)
        return list(reversed(found))

    def _checked(
        self, request: MigrationRequest, mapper: Mapper, run_id: str, actor: str | None
    ) -> RunVerdict | None:
        with self.store.reading() as tx:
            row = tx.run(run_id)
            if row is None or row.workflow_ref != request.ref:
                return None
            check, candidate = self._read(tx, request, mapper, row, actor)
            if candidate is None:
                return None
            return check.check(candidate, tx.now()).verdict

    def _moved(
        self, request: MigrationRequest, mapper: Mapper, run_id: str, actor: str | None
    ) -> RunVerdict | None:
        with self.store.transaction() as tx:
            row, now = tx.lock_run(run_id)
            if row is None or row.workflow_ref != request.ref:
                return None
            if row.version != request.from_version:
                why = f"it is on version {row.version} now (moved meanwhile)"
                return RunVerdict(run_id, None, reasons=(Reason("version_moved", why),))
            check, candidate = self._read(tx, request, mapper, row, actor)
            if candidate is None:
                return None
            checked = check.check(candidate, now)
            if checked.event is None:
                return checked.verdict
            tx.move_run_version(run_id, request.from_version, request.to_version)
            advanced: Advanced = self.steps.advance(
                tx, row, check.new, candidate.recorded, checked.event
            )
        self.steps.after_commit(advanced)
        verdict = checked.verdict
        return RunVerdict(
            verdict.run_id, verdict.node, verdict.to_node, moved=True, seq=row.last_seq + 1
        )

    def _read(
        self,
        tx: Tx,
        request: MigrationRequest,
        mapper: Mapper,
        row: RunRecord,
        actor: str | None,
    ) -> tuple[MigrationCheck, Candidate | None]:
        """The checks of this request, and the run as they read it (None: its state
        does not meet ``--where``)."""
        versions = versions_of(self.registry, row, tx)
        check = MigrationCheck(
            old=self.registry.get(request.ref, request.from_version, tx),
            new=self.registry.get(request.ref, request.to_version, tx),
            mapping=request.mapping,
            mapper=mapper,
            versions=versions,
            actor=actor,
            reason=request.reason,
        )
        recorded = restore(tx, row, check.old, versions=versions)
        where = request.where
        if not where.holds(row.id, position(recorded), recorded.status.value, recorded.vars):
            return check, None
        candidate = Candidate(row, recorded, tx.events_after(row.id, 0), tx.executions_of(row.id))
        return check, candidate


def _mapper(path: str) -> Mapper:
    try:
        mapper: Mapper = import_ref(path)
    except (ImportError, AttributeError, TypeError) as exc:
        raise CodeUnavailable(f"the mapping {path} cannot be imported here: {exc}") from exc
    return mapper


def _last_migration(tx: Tx, row: RunRecord) -> tuple[RunMigrated, int]:
    """The migration a rollback undoes: the run's last decision, or it has moved since."""
    for entry in reversed(tx.events_after(row.id, 0)):
        if entry.type.startswith(AUDIT_ONLY):
            continue
        event = event_from_dict(entry.data)
        if isinstance(event, RunMigrated) and event.undoes is None:
            return event, entry.seq
        if isinstance(event, RunMigrated):
            raise NotMigratable(f"run {row.id}'s last migration was rolled back already")
        raise NotMigratable(
            f"run {row.id} has moved since its last migration (seq {entry.seq}: "
            f"{entry.type}), or was never migrated: only a run that has not moved since "
            "can be returned; migrate it back with a mapping instead"
        )
    raise NotMigratable(f"run {row.id} was never migrated")
