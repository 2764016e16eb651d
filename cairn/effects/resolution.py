"""A person settles what the reconciler could not: an effect it flagged (the ledger and the
external system disagree, or nobody can ask the system) or whose outcome nobody can tell
(``unknown``). They look at the external system and record what really happened — it
took effect (with the external record, if they have it), it never did, or it was undone
by hand — with a note. The effect leaves the reconciler's report; the ledger keeps what
it was, who resolved it, when and why (``resolution``).

Only an effect still flagged or unknown is resolved, by a conditional update: two people
resolving the same effect at once, or a reconciler settling it meanwhile, resolve it
once — the other is told it is no longer open.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from cairn.effects.adapters import Effect
from cairn.effects.ledger import applied
from cairn.errors import EffectNotFound, EffectNotOpen
from cairn.model.effects import EffectStatus
from cairn.store.records import EffectRecord, utcnow
from cairn.store.sql import Store

OPEN = (EffectStatus.FLAGGED, EffectStatus.UNKNOWN)


class Outcome(StrEnum):
    APPLIED = "applied"  # it took effect at the external system
    ABSENT = "absent"  # it never did: a retry of its node may call again
    COMPENSATED = "compensated"  # it took effect and was undone by hand


@dataclass(frozen=True)
class Resolve:
    """What a person records about one effect of a run."""

    run_id: str
    key: str
    outcome: Outcome
    note: str
    actor: str
    record: Any = None  # the external system's record of it, if they have it


def resolve_effect(store: Store, asked: Resolve) -> Effect:
    """Record ``asked``; the effect as it is now. :class:`EffectNotFound` if the run has
    no effect of that key, :class:`EffectNotOpen` if it is not flagged or unknown."""
    with store.transaction() as tx:
        found = [row for row in tx.effects_of(asked.run_id) if row.key == asked.key]
        if not found:
            raise EffectNotFound(f"run {asked.run_id} has no effect {asked.key!r}")
        row = found[0]
        if row.status not in OPEN:
            raise EffectNotOpen(
                f"effect {asked.key!r} is {row.status.value}: only a flagged effect, or one "
                "of unknown outcome, is resolved by a person"
            )
        now = utcnow()
        resolution = {
            "outcome": asked.outcome.value,
            "note": asked.note,
            "by": asked.actor,
            "at": now.isoformat(),
            "was": row.status.value,
            **({"record": asked.record} if asked.record is not None else {}),
        }
        changes = _changes(asked, row)
        if not tx.update_effect(
            row.id,
            {**changes, "checked_at": now, "resolution": resolution},
            status=row.status.value,
        ):
            raise EffectNotOpen(f"effect {asked.key!r} was settled meanwhile: look again")
        (updated,) = [r for r in tx.effects_of(asked.run_id) if r.key == asked.key]
    return Effect.from_row(updated)


def _changes(asked: Resolve, row: EffectRecord) -> dict[str, Any]:
    if asked.outcome is not Outcome.APPLIED:
        return {"status": asked.outcome.value}
    # What it returned, if the ledger knew; else the record the person saw.
    changes = applied(row.result if row.result is not None else asked.record)
    if row.applied_at is not None:  # when it took effect, if the ledger knew
        changes["applied_at"] = row.applied_at
    return changes
