"""One action on every run a filter selects: cancel them, send each a signal, or fork
each failed one from its failure.

Asked first as a dry run, it counts what the filter selects and answers a selection
token (:func:`~cairn.model.selection.selection_token`); asked again with that token, it
selects again and acts only if the runs are the same — else :class:`SelectionChanged`,
nothing done — so it acts on exactly the runs the person saw counted. Without a token it
acts on what the filter selects now.

Each run is acted on as the one request would be (its event records the actor) and
answered on its own: a run that cannot take the action (finished meanwhile, not waiting
on that signal, not one its principal may approve) is listed as refused, with the
reason's code, and the others go on. Asked twice, it does not act twice: a cancel is
ignored by a run already cancelling, a signal's id and a fork's request id are derived
from the selection (or the caller's idempotency key) and the run.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from cairn.engine.orchestrator import Orchestrator
from cairn.errors import CairnError, InvalidInput, SelectionChanged
from cairn.model.principals import Principal
from cairn.model.selection import RunFilter, selection_token
from cairn.model.statuses import RunStatus
from cairn.store.records import ListedRun
from cairn.timetravel.failure import failure_seq
from cairn.timetravel.fork import fork_live, fork_point

MAX_RUNS = 1000  # per request: narrow the filter (or page by created_before) for more
PAGE = 500


@dataclass
class BulkOutcome:
    """What a bulk action selected and, unless a dry run, did to each run."""

    action: str
    dry_run: bool
    matched: int
    selection: str  # the token of the runs selected
    run_ids: list[str]
    done: list[dict[str, Any]] = field(default_factory=list)
    refused: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "action": self.action,
            "dry_run": self.dry_run,
            "matched": self.matched,
            "selection": self.selection,
            "run_ids": self.run_ids,
            "done": self.done,
            "refused": self.refused,
        }


@dataclass(frozen=True)
class Bulk:
    """Bulk actions in ``principal``'s namespace, as ``principal``."""

    orchestrator: Orchestrator
    principal: Principal

    def select(self, selection: RunFilter) -> list[str]:
        """The ids of the runs ``selection`` selects, oldest first (at most
        :data:`MAX_RUNS`; more is :class:`InvalidInput`)."""
        found: list[ListedRun] = []
        with self.orchestrator.store.reading() as tx:
            while True:
                before = (found[-1].created_at, found[-1].id) if found else None
                page = tx.runs_page(self.principal.namespace, selection, limit=PAGE, before=before)
                found += page
                if len(page) < PAGE or len(found) > MAX_RUNS:
                    break
        if len(found) > MAX_RUNS:
            raise InvalidInput(
                f"the filter selects more than {MAX_RUNS} runs: narrow it (a workflow, a "
                "status, created_before) and act on them in parts"
            )
        return [row.id for row in reversed(found)]

    def cancel(
        self, selection: RunFilter, reason: str, *, dry_run: bool, expect: str | None
    ) -> BulkOutcome:
        going = tuple(status for status in RunStatus if not status.terminal)
        selection = _narrowed(selection, going, "a cancel selects runs not finished")

        def cancel_one(run_id: str, _bulk_id: str) -> dict[str, Any]:
            decision = self.orchestrator.cancel(run_id, reason, actor=self.principal.actor)
            return {"changed": decision.ignored is None, "status": decision.state.status.value}

        return self._each("cancel", selection, cancel_one, dry_run=dry_run, expect=expect)

    def signal(
        self,
        selection: RunFilter,
        name: str,
        payload: Mapping[str, Any] | None,
        *,
        comment: str | None,
        dry_run: bool,
        expect: str | None,
        request_id: str | None,
    ) -> BulkOutcome:
        selection = _narrowed(selection, (RunStatus.WAITING,), "a signal selects waiting runs")

        def signal_one(run_id: str, bulk_id: str) -> dict[str, Any]:
            decision = self.orchestrator.signal(
                run_id,
                name,
                payload,
                actor=self.principal.actor,
                signal_id=f"bulk:{bulk_id}:{run_id}",
                comment=comment,
                role=self.principal.role.value,
            )
            return {"applied": decision.ignored is None, "status": decision.state.status.value}

        return self._each(
            "signal",
            selection,
            signal_one,
            dry_run=dry_run,
            expect=expect,
            request_id=request_id,
        )

    def fork_from_failure(
        self,
        selection: RunFilter,
        patch: Mapping[str, Any] | None,
        *,
        dry_run: bool,
        expect: str | None,
        request_id: str | None,
    ) -> BulkOutcome:
        failed = _narrowed(
            selection, (RunStatus.FAILED,), "a fork from the failure selects failed runs"
        )

        def fork_one(run_id: str, bulk_id: str) -> dict[str, Any]:
            seq = failure_seq(self.orchestrator, run_id)
            point = fork_point(self.orchestrator, run_id, seq, patch)
            fork_id = fork_live(
                self.orchestrator,
                point,
                confirm=True,
                actor=self.principal.actor,
                request_id=f"bulk:{bulk_id}:{run_id}",
            )
            return {"fork": fork_id, "fork_seq": seq}

        return self._each(
            "fork", failed, fork_one, dry_run=dry_run, expect=expect, request_id=request_id
        )

    def _each(
        self,
        action: str,
        selection: RunFilter,
        act: Callable[[str, str], dict[str, Any]],
        *,
        dry_run: bool,
        expect: str | None,
        request_id: str | None = None,
    ) -> BulkOutcome:
        run_ids = self.select(selection)
        token = selection_token(run_ids)
        if expect is not None and expect != token:
            raise SelectionChanged(
                f"the filter now selects {len(run_ids)} run(s), not the ones the dry run "
                "counted: nothing was done; count them again"
            )
        outcome = BulkOutcome(action, dry_run, len(run_ids), token, run_ids)
        if dry_run:
            return outcome
        bulk_id = request_id or token
        for run_id in run_ids:
            try:
                done = act(run_id, bulk_id)
            except CairnError as exc:
                outcome.refused.append({"run_id": run_id, "code": exc.code, "message": str(exc)})
            else:
                outcome.done.append({"run_id": run_id, **done})
        return outcome


def _narrowed(selection: RunFilter, allowed: tuple[RunStatus, ...], rule: str) -> RunFilter:
    """``selection`` within the statuses an action applies to: all of them if it names
    none; :class:`InvalidInput` if it names another."""
    others = [status.value for status in selection.statuses if status not in allowed]
    if others:
        raise InvalidInput(f"{rule} only, not {', '.join(others)}")
    return replace(selection, statuses=selection.statuses or allowed)
