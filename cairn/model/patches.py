"""Patch markers: ``ctx.patched("fix-rounding")``, the rule that answers it, and how the
answers a run gave are kept. Pure: no I/O.

A handler that must change what it does for new runs, without changing what runs in
flight already did, branches on a patch marker::

    if ctx.patched("fix-rounding"):
        total = round_half_up(amount)
    else:
        total = round(amount)  # what the run did before the fix was deployed

The rule (:func:`answer`): the first time a run asks about a patch, the answer is True —
unless the node asking has already run in this run without asking (an earlier visit of
it, or the node is compensating what it did): the run passed that point on code without
the patch, and goes on as that code would (False). Whatever the first answer, it is the
run's answer from then on: every later ask, by any node of the run, gets the same (the
answers are part of the run's state, :attr:`RunState.patches`, carried to it on the
result events of the steps that asked).

A replay answers from the record instead (:func:`recorded_answer`): what the recorded
execution was told, and False for a patch it never asked about — it ran code without it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from cairn.errors import InvalidInput

MAX_PATCH_ID = 100
# Letters, digits, ``.``, ``_``, ``-`` and ``:``, starting with a letter or a digit: an id
# reads the same in a log line, a command line and a JSON key.
PATCH_ID = re.compile(rf"[A-Za-z0-9][A-Za-z0-9._:\-]{{0,{MAX_PATCH_ID - 1}}}")


class BadPatchId(InvalidInput):
    """A patch id that is not one: empty, longer than 100 characters, or with other
    characters than letters, digits, ``.``, ``_``, ``-`` and ``:``."""

    code = "bad_patch_id"


def check_patch_id(patch_id: object) -> str:
    """``patch_id`` if it is a patch id; :class:`BadPatchId` otherwise."""
    if not isinstance(patch_id, str) or not PATCH_ID.fullmatch(patch_id):
        raise BadPatchId(
            f"a patch id is 1 to {MAX_PATCH_ID} letters, digits, '.', '_', '-' or ':', "
            f"starting with a letter or a digit (like 'fix-rounding'), not {patch_id!r}"
        )
    return patch_id


def ran_before(iteration: int, phase: str) -> bool:
    """Whether the node asking has already run in this run: a later visit of it, or its
    compensation (which follows only a run of it that succeeded)."""
    return iteration > 1 or phase != "run"


def answer(held: Mapping[str, bool], patch_id: str, *, node_ran_before: bool) -> bool:
    """The run's answer about ``patch_id``: the one it gave before (``held``, the run's
    answers so far), or — asked for the first time — True, unless the node asking ran
    before without asking (it passed this point on code without the patch)."""
    given = held.get(patch_id)
    if given is not None:
        return given
    return not node_ran_before


def recorded_answer(recorded: Mapping[str, bool], patch_id: str) -> bool:
    """A replay's answer: what the recorded execution was told, or False for a patch it
    never asked about (it ran code without the patch)."""
    return bool(recorded.get(patch_id, False))


@dataclass
class PatchAnswers:
    """One execution's answers to ``ctx.patched``: those it gave (``given``, which ride on
    its result event), from the run's answers so far (``held``) and whether its node ran
    before — or, in a replay, from what the recorded execution was told (``recorded``)."""

    held: Mapping[str, bool]
    node_ran_before: bool
    recorded: Mapping[str, bool] | None = None
    given: dict[str, bool] = field(default_factory=dict)

    @classmethod
    def of(
        cls,
        held: Mapping[str, bool],
        iteration: int,
        phase: str,
        recorded: Mapping[str, bool] | None = None,
    ) -> PatchAnswers:
        return cls(dict(held), ran_before(iteration, phase), recorded)

    def ask(self, patch_id: str) -> bool:
        """The answer about ``patch_id`` (the same every time);
        :class:`BadPatchId` for an id that is not one."""
        check_patch_id(patch_id)
        found = self.given.get(patch_id)
        if found is None:
            if self.recorded is not None:
                found = recorded_answer(self.recorded, patch_id)
            else:
                found = answer(self.held, patch_id, node_ran_before=self.node_ran_before)
            self.given[patch_id] = found
        return found


def with_answers(held: Mapping[str, bool], answers: Mapping[str, bool] | None) -> dict[str, bool]:
    """The run's answers with a step's added: a patch already answered keeps its first
    answer (two branches asking at once for the first time may be told differently —
    the first result recorded is the run's answer). A new dict."""
    merged = dict(held)
    for patch_id, given in (answers or {}).items():
        merged.setdefault(patch_id, bool(given))
    return merged


__all__ = [
    "MAX_PATCH_ID",
    "BadPatchId",
    "PatchAnswers",
    "answer",
    "check_patch_id",
    "ran_before",
    "recorded_answer",
    "with_answers",
]
