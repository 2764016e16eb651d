"""The effects ledger's vocabulary: the states an external side effect goes through, and
what the reconciler may do about one the world has no trace of."""

from __future__ import annotations

from enum import StrEnum


class EffectStatus(StrEnum):
    INTENT = "intent"  # recorded before the call; the outcome is not known yet
    APPLIED = "applied"
    FAILED = "failed"  # it did not take effect (or failed for good): see error_class
    # The call was made; whether it took effect is not known (its response was lost).
    UNKNOWN = "unknown"
    ABSENT = "absent"  # the reconciler found an old intent never took effect
    FLAGGED = "flagged"  # the ledger and the world disagree: a person decides
    COMPENSATED = "compensated"


class Policy(StrEnum):
    """What the reconciler does when the ledger says applied and the world says absent."""

    FLAG = "flag"  # report it for a person (the default: money is involved)
    REAPPLY = "reapply"  # apply it again through the adapter
    COMPENSATE = "compensate"  # run the effect's compensation
