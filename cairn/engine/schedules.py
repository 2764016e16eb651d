"""Schedules: kept (add, change, pause, resume, delete), declared by definitions, ticked
by schedulers, and backfilled.

A tick is looked at in one transaction that locks its schedule (a schedule another
scheduler holds is passed by): the ticks due are worked out by the pure
:func:`cairn.model.schedules.plan_ticks`, each one started is a run whose request id is
derived from the schedule and the tick's time, and the schedule's state moves on in the
same commit. The request id is what makes a tick start once however many schedulers
run — and a backfill over the same range start nothing new.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from cairn.engine.advance import Advanced
from cairn.engine.batches import MAX_BATCH, SubmitItem
from cairn.engine.inputs import check_input, new_run
from cairn.engine.starts import Starts
from cairn.engine.submit import Submissions
from cairn.errors import (
    InvalidInput,
    InvalidSchedule,
    ScheduleExists,
    ScheduleNotFound,
    UnknownWorkflow,
)
from cairn.model.definition import WorkflowDefinition
from cairn.model.schedules import (
    MAX_BACKFILL,
    Cron,
    OverlapPolicy,
    ScheduleSpec,
    TickAction,
    TickDecision,
    jitter_of,
    plan_ticks,
    tick_label,
    tick_request_id,
)
from cairn.store.records import ScheduleRecord
from cairn.store.sql import Tx

log = logging.getLogger(__name__)

# What a change may set (PATCH): a schedule's definition, not its ticks' state.
CHANGEABLE = frozenset(
    {"workflow", "version", "cron", "timezone", "input", "overlap", "catch_up_s", "jitter_s"}
)


def schedule_actor(name: str) -> str:
    """The actor of what a schedule does by the clock (its ticks, their cancels)."""
    return f"system:schedule/{name}"


@dataclass(frozen=True)
class Ticked:
    """What one look at a schedule did."""

    started: list[str]  # run ids
    skipped: int
    buffered: bool


@dataclass(frozen=True)
class Backfilled:
    ticks: int
    created: int
    existing: int
    run_ids: list[str]


def _key(namespace: str, name: str) -> str:
    """What a tick's jitter is derived from: the schedule's identity."""
    return f"{namespace}/{name}"


def _first_due(spec: ScheduleSpec, namespace: str, after: float) -> float | None:
    cron = Cron(spec.cron, spec.timezone)
    first = cron.next_after(after)
    if first is None:
        return None
    return first + jitter_of(_key(namespace, spec.name), first, spec.jitter_s)


def _spec_of(row: ScheduleRecord) -> ScheduleSpec:
    return ScheduleSpec(
        name=row.name,
        cron=row.cron,
        workflow=row.workflow,
        version=row.version,
        timezone=row.timezone,
        input=row.input,
        overlap=OverlapPolicy(row.overlap),
        catch_up_s=row.catch_up_s,
        jitter_s=row.jitter_s,
    )


def _columns(spec: ScheduleSpec) -> dict[str, Any]:
    return {
        "workflow": spec.workflow,
        "version": spec.version,
        "cron": " ".join(spec.cron.split()),
        "timezone": spec.timezone,
        "input": dict(spec.input),
        "overlap": OverlapPolicy(spec.overlap).value,
        "catch_up_s": float(spec.catch_up_s),
        "jitter_s": float(spec.jitter_s),
    }


@dataclass
class _Carried:
    """What a tick's decisions came to: the runs started, the ticks skipped, and the
    schedule's last run, tick and error after them."""

    last_run: str | None
    last_tick: float | None
    error: str | None
    started: list[str] = field(default_factory=list)
    skipped: int = 0


class Schedules:
    def __init__(self, submissions: Submissions) -> None:
        self.submissions = submissions
        self.starts: Starts = submissions.starts
        self.steps = submissions.steps
        self.store = submissions.store
        self.registry = submissions.registry
        self.limit_bytes = submissions.limit_bytes

    # -- kept by people ----------------------------------------------------------------

    def _checked(self, namespace: str, spec: ScheduleSpec) -> ScheduleSpec:
        """The spec, its input as it will be stored; a typed error for a bad cron, time
        zone, policy, an unknown workflow or an input its schema refuses."""
        spec = spec.checked()
        if not spec.workflow:
            raise InvalidSchedule(f"schedule {spec.name!r} names no workflow")
        definition = self.registry.resolve_for(namespace, spec.workflow, spec.version)
        payload = check_input(definition, spec.input, limit_bytes=self.limit_bytes)
        return replace(spec, input=payload, overlap=OverlapPolicy(spec.overlap))

    def add(
        self,
        namespace: str,
        spec: ScheduleSpec,
        *,
        paused: bool = False,
        declared: Mapping[str, Any] | None = None,
    ) -> ScheduleRecord:
        """A new schedule; its first tick is the first after now. ScheduleExists if the
        name is taken in the namespace. ``declared``: what a definition declares of it
        (see :meth:`declare`)."""
        spec = self._checked(namespace, spec)
        with self.store.transaction() as tx:
            now = tx.now()
            values = {
                "namespace": namespace,
                "name": spec.name,
                **_columns(spec),
                "paused": paused,
                "ticks_from": now,
                "next_at": _first_due(spec, namespace, now),
                "buffered_at": None,
                "last_tick_at": None,
                "last_run_id": None,
                "skipped": 0,
                "last_error": None,
                "created_at": now,
                "updated_at": now,
                "declared": None if declared is None else dict(declared),
            }
            if not tx.insert_schedule(values):
                raise ScheduleExists(
                    f"schedule {spec.name!r} exists in namespace {namespace!r}; change it "
                    "or delete it first"
                )
            row = tx.schedule(namespace, spec.name)
        assert row is not None
        log.info("schedule %s/%s added: %s (%s)", namespace, spec.name, spec.cron, spec.timezone)
        return row

    def change(
        self,
        namespace: str,
        name: str,
        changes: Mapping[str, Any],
        *,
        declared: Mapping[str, Any] | None = None,
    ) -> ScheduleRecord:
        """Change what a schedule starts or when (the keys of :data:`CHANGEABLE`); its
        ticks go on from where they stand, by the new expression. ``declared``: the
        declaration this change brings it to (see :meth:`declare`)."""
        unknown = set(changes) - CHANGEABLE
        if unknown:
            raise InvalidSchedule(f"a schedule has no {', '.join(sorted(unknown))} to change")
        current = self.get(namespace, name)
        spec = self._checked(namespace, replace(_spec_of(current), **changes))
        with self.store.transaction() as tx:
            now = tx.now()
            row = tx.lock_schedule(namespace, name)
            if row is None:
                raise ScheduleNotFound(f"no schedule {name!r} in namespace {namespace!r}")
            values: dict[str, Any] = {**_columns(spec), "updated_at": now, "last_error": None}
            if declared is not None:
                values["declared"] = dict(declared)
            values["next_at"] = _first_due(spec, namespace, row.ticks_from)
            if row.buffered_at is not None:
                values["next_at"] = now
            tx.update_schedule(namespace, name, values)
            changed = tx.schedule(namespace, name)
        assert changed is not None
        return changed

    def declare(self, namespace: str, definition: WorkflowDefinition) -> list[ScheduleRecord]:
        """Add, or bring up to date, the schedules a definition declares — at ``cairn
        register`` and whenever a process registers ``CAIRN_WORKFLOWS`` at its start. A
        schedule that exists keeps its ticks' state and paused flag, and is changed only
        where the declaration changed since it was last declared: a restart, or a
        deploy that leaves it as it was, does not undo what an operator changed."""
        kept = []
        for each in definition.schedules:
            spec = replace(each, workflow=definition.name)
            declared = _columns(self._checked(namespace, spec))
            try:
                existing = self.get(namespace, spec.name)
            except ScheduleNotFound:
                try:
                    kept.append(self.add(namespace, spec, declared=declared))
                    continue
                except ScheduleExists:  # declared by a concurrent register
                    existing = self.get(namespace, spec.name)
            if existing.declared == declared:
                kept.append(existing)
                continue
            was = existing.declared or {}
            changes = {
                name: value
                for name, value in declared.items()
                if getattr(existing, name) != value and was.get(name) != value
            }
            kept.append(self.change(namespace, spec.name, changes, declared=declared))
        return kept

    def get(self, namespace: str, name: str) -> ScheduleRecord:
        with self.store.reading() as tx:
            row = tx.schedule(namespace, name)
        if row is None:
            raise ScheduleNotFound(f"no schedule {name!r} in namespace {namespace!r}")
        return row

    def of_namespace(self, namespace: str) -> list[ScheduleRecord]:
        with self.store.reading() as tx:
            return tx.schedules_of(namespace)

    def runs(self, namespace: str, name: str, limit: int = 20) -> list[Any]:
        """The runs its ticks and backfills started, the newest tick first."""
        with self.store.reading() as tx:
            return tx.runs_of_schedule(namespace, name, limit)

    def pause(self, namespace: str, name: str) -> ScheduleRecord:
        """Stop ticking; a tick that comes while paused is not started, then or later."""
        return self._set_paused(namespace, name, paused=True)

    def resume(self, namespace: str, name: str) -> ScheduleRecord:
        """Tick again, from now: the ticks that came while it was paused are not started
        (backfill them if they are wanted)."""
        return self._set_paused(namespace, name, paused=False)

    def _set_paused(self, namespace: str, name: str, *, paused: bool) -> ScheduleRecord:
        with self.store.transaction() as tx:
            now = tx.now()
            row = tx.lock_schedule(namespace, name)
            if row is None:
                raise ScheduleNotFound(f"no schedule {name!r} in namespace {namespace!r}")
            values: dict[str, Any] = {"paused": paused, "updated_at": now}
            if row.paused and not paused:
                values["ticks_from"] = now
                values["next_at"] = _first_due(_spec_of(row), namespace, now)
                if row.buffered_at is not None:
                    values["next_at"] = now
            tx.update_schedule(namespace, name, values)
            changed = tx.schedule(namespace, name)
        assert changed is not None
        log.info("schedule %s/%s %s", namespace, name, "paused" if paused else "resumed")
        return changed

    def delete(self, namespace: str, name: str) -> None:
        """Delete the schedule; the runs it started go on."""
        with self.store.transaction() as tx:
            if not tx.delete_schedule(namespace, name):
                raise ScheduleNotFound(f"no schedule {name!r} in namespace {namespace!r}")
        log.info("schedule %s/%s deleted", namespace, name)

    def backfill(
        self, namespace: str, name: str, start: float, end: float, *, actor: str | None = None
    ) -> Backfilled:
        """Start a run for every tick in ``[start, end)`` (epoch seconds), now, whatever
        the overlap policy says (the ticks were asked for). Each is keyed like the tick
        itself: a tick that ran, or a backfill done twice, starts nothing new."""
        if not end > start:
            raise InvalidSchedule("a backfill's end must be after its start")
        row = self.get(namespace, name)
        ticks = Cron(row.cron, row.timezone).between(start, end, MAX_BACKFILL)
        created = existing = 0
        run_ids: list[str] = []
        for first in range(0, len(ticks), MAX_BATCH):
            items = [
                SubmitItem(row.workflow, row.input, tick_request_id(name, tick), row.version)
                for tick in ticks[first : first + MAX_BATCH]
            ]
            for answer in self.submissions.submit_batch(
                items, namespace=namespace, actor=actor or schedule_actor(name)
            ):
                if answer.run_id is None:  # the workflow or its input refused it
                    raise InvalidInput(
                        f"backfill of {name!r} refused at tick "
                        f"{tick_label(ticks[first + answer.index])}: {answer.error}"
                    )
                run_ids.append(answer.run_id)
                created += answer.created
                existing += not answer.created
        log.info(
            "schedule %s/%s backfilled: %d ticks, %d runs started",
            namespace,
            name,
            len(ticks),
            created,
        )
        return Backfilled(len(ticks), created, existing, run_ids)

    def record_error(self, namespace: str, name: str, error: str) -> None:
        """Keep why the schedule's tick could not be taken (a fault its transaction rolled
        back), for ``cairn schedule show`` and the API; its ticks stay due, so once the
        fault is mended they start (within the schedule's catch-up window)."""
        with self.store.transaction() as tx:
            tx.update_schedule(namespace, name, {"last_error": error[:2000]})

    # -- ticked by schedulers ----------------------------------------------------------

    def tick(self, namespace: str, name: str) -> Ticked | None:
        """Start the schedule's due ticks, in one transaction; None if another scheduler
        holds the schedule, or it is not due (any more), or it is paused."""
        advanced: list[Advanced | None] = []
        with self.store.transaction() as tx:
            row = tx.lock_schedule(namespace, name, skip_locked=True)
            now = tx.now()
            if row is None or row.paused or row.next_at is None or row.next_at > now:
                return None
            try:
                cron = Cron(row.cron, row.timezone)
                policy = OverlapPolicy.parse(row.overlap)
            except InvalidSchedule as bad:  # a stored schedule was checked: a newer cairn?
                tx.update_schedule(namespace, name, {"next_at": None, "last_error": str(bad)})
                log.error("schedule %s/%s cannot tick: %s", namespace, name, bad)
                return Ticked([], 0, buffered=False)
            previous = tx.run(row.last_run_id) if row.last_run_id is not None else None
            plan = plan_ticks(
                cron,
                policy,
                key=_key(namespace, name),
                catch_up_s=row.catch_up_s,
                jitter_s=row.jitter_s,
                ticks_from=row.ticks_from,
                buffered=row.buffered_at,
                previous_active=previous is not None and not previous.status.terminal,
                now=now,
            )
            done = self._carry_out(tx, row, plan.decisions, now, advanced)
            tx.update_schedule(
                namespace,
                name,
                {
                    "ticks_from": plan.ticks_from,
                    "buffered_at": plan.buffered,
                    "next_at": plan.next_at,
                    "last_tick_at": done.last_tick,
                    "last_run_id": done.last_run,
                    "skipped": row.skipped + done.skipped,
                    "last_error": done.error,
                },
            )
        self.starts.after_commit(*advanced)
        return Ticked(done.started, done.skipped, buffered=plan.buffered is not None)

    def _carry_out(
        self,
        tx: Tx,
        row: ScheduleRecord,
        decisions: Sequence[TickDecision],
        now: float,
        advanced: list[Advanced | None],
    ) -> _Carried:
        """Start, skip or buffer each tick decided, in the tick's transaction."""
        namespace, name = row.namespace, row.name
        done = _Carried(last_run=row.last_run_id, last_tick=row.last_tick_at, error=row.last_error)
        for decision in decisions:
            label = tick_label(decision.tick)
            if decision.action.skipped:
                done.skipped += 1
                log.info("schedule %s/%s: tick %s %s", namespace, name, label, decision.action)
                continue
            if decision.action is TickAction.BUFFER:
                log.info("schedule %s/%s: tick %s buffered", namespace, name, label)
                continue
            if decision.action is TickAction.CANCEL_AND_START and done.last_run is not None:
                reason = f"schedule {name!r}: tick {label} (overlap: cancel_running)"
                advanced.append(
                    self.starts.cancel_in(tx, done.last_run, reason, schedule_actor(name))
                )
            run_id, refused = self._start_tick(tx, row, decision.tick, now, advanced)
            if refused is not None:
                done.skipped += 1
                done.error = f"tick {label}: {refused}"
                log.error("schedule %s/%s: %s", namespace, name, done.error)
                continue
            assert run_id is not None
            done.started.append(run_id)
            done.last_run, done.last_tick, done.error = run_id, decision.tick, None
            log.info("schedule %s/%s: tick %s started run %s", namespace, name, label, run_id)
        return done

    def _start_tick(
        self,
        tx: Tx,
        row: ScheduleRecord,
        tick: float,
        now: float,
        advanced: list[Advanced | None],
    ) -> tuple[str | None, str | None]:
        """(the run of the tick, None), or (None, why it could not start)."""
        try:
            # Its workflow as written, in the schedule's namespace (then what is shared
            # with it): a share revoked since stops its ticks, as it stops submits.
            definition = self.registry.resolve_for(row.namespace, row.workflow, row.version, tx)
            payload = check_input(definition, row.input, limit_bytes=self.limit_bytes)
        except (UnknownWorkflow, InvalidInput) as refused:
            return None, str(refused)
        values = new_run(
            str(uuid.uuid4()),
            row.namespace,
            definition,
            payload,
            request_id=tick_request_id(row.name, tick),
            at=now,
        )
        run_id, step = self.starts.start_in(tx, definition, values, now, schedule_actor(row.name))
        advanced.append(step)
        return run_id, None
