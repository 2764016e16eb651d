"""Mappings for the migration tests (``cairn runs migrate --map``): what a run of
``journey@1`` becomes in ``journey@2``."""

from __future__ import annotations

from cairn.model.migrations import MigratingRun, Migration

RENAMED = {"review": "approval"}


def journey_1_to_2(run: MigratingRun) -> Migration | None:
    """The review is the approval now, with the version it came from noted in the state;
    any other node keeps its name (``hold`` has none in version 2: such a run cannot
    move, and the dry run says so)."""
    if run.node in RENAMED:
        return Migration(node=RENAMED[run.node], vars={**run.vars, "migrated_from": 1})
    return None


def keeps_everyone(run: MigratingRun) -> Migration:
    return Migration(stay="not this week")
