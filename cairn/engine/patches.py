"""Which runs in flight still need the old path of a patch marker: what ``cairn versions``
reads before a patch's old branch may be deleted (docs/versions.md#patch-markers).

A run in flight needs the old path of patch P when

- it answered P False: it passed that point on code without the patch, and every later
  ask of the run gets False (the answer is sticky); or
- it has not asked about P yet, but started before the code with the patch was
  deployed (``since``): a node it ran before may ask on its next visit, and will be
  told False. Without ``since`` every run in flight that has not asked counts: nothing
  proves that it did not pass the point on older code.

Runs that answered True, and runs started after ``since`` that have not asked, take the
new path whenever they ask. A run that ended needs nothing. One read of the runs' rows
(only the answers part of their cached state); a run whose state is too large to be
cached on its row is restored.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from cairn.engine.orchestrator import Orchestrator
from cairn.model.patches import check_patch_id
from cairn.model.workflow_names import DEFAULT_NAMESPACE
from cairn.store.listing import AnsweringRun


@dataclass(frozen=True)
class PatchInFlight:
    """One patch id over the runs in flight of a workflow: how many answered True, how
    many False, how many have not asked (and of those, how many started before
    ``since``), and a few of the runs that still need the old path."""

    patch: str
    answered_true: int
    answered_false: int
    unanswered: int
    unanswered_before: int
    old_path_runs: tuple[str, ...]  # the oldest first, at most OLD_PATH_SAMPLE

    @property
    def needs_old_path(self) -> bool:
        """Whether a run in flight may still take the patch's old path."""
        return self.answered_false > 0 or self.unanswered_before > 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "patch": self.patch,
            "answered_true": self.answered_true,
            "answered_false": self.answered_false,
            "unanswered": self.unanswered,
            "unanswered_before": self.unanswered_before,
            "needs_old_path": self.needs_old_path,
            "old_path_runs": list(self.old_path_runs),
        }


OLD_PATH_SAMPLE = 10


def answers_in_flight(
    orchestrator: Orchestrator,
    workflow: str,
    version: int | None = None,
    *,
    namespace: str = DEFAULT_NAMESPACE,
    patches: Iterable[str] = (),
    since: float | None = None,
) -> list[PatchInFlight]:
    """Per patch id, the answers of ``workflow``'s runs in flight (of ``version``, or
    of every version) in ``namespace``: each id some run in flight answered, and each of
    ``patches`` (listed even when no run asked it yet), by id. ``since``: when the code
    with the patches was deployed (epoch seconds; None: unknown, see the module).
    :class:`~cairn.model.patches.BadPatchId` for a bad id in ``patches``."""
    wanted = [check_patch_id(patch) for patch in patches]
    with orchestrator.store.reading() as tx:
        found = tx.patch_answers(namespace, workflow, version)
    answered = [(run, _answers(orchestrator, run)) for run in found]
    ids = sorted({*wanted, *(patch for _run, given in answered for patch in given)})
    return [_tally(patch, answered, since) for patch in ids]


def _answers(orchestrator: Orchestrator, run: AnsweringRun) -> dict[str, bool]:
    if run.patches is not None:
        return run.patches
    _row, _definition, state = orchestrator.load(run.id)  # too large to cache: restored
    return dict(state.patches)


def _tally(
    patch: str, answered: list[tuple[AnsweringRun, dict[str, bool]]], since: float | None
) -> PatchInFlight:
    true = false = unanswered = before = 0
    old: list[str] = []
    for run, given in answered:  # oldest first
        answer = given.get(patch)
        if answer is True:
            true += 1
            continue
        if answer is False:
            false += 1
        else:
            unanswered += 1
            if since is not None and run.created_at >= since:
                continue
            before += 1
        if len(old) < OLD_PATH_SAMPLE:
            old.append(run.id)
    return PatchInFlight(patch, true, false, unanswered, before, tuple(old))


__all__ = ["OLD_PATH_SAMPLE", "PatchInFlight", "answers_in_flight"]
