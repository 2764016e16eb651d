"""The reconciler: compares the effects ledger with what external systems really did,
repairs what is only a timing gap, and reports what needs a person.

See :mod:`cairn.reconciler.reconciler` and ``docs/effects.md``.
"""

from cairn.reconciler.reconciler import DriftReport, Reconciler

__all__ = ["DriftReport", "Reconciler"]
