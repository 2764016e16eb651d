"""The reconciler: compares the effects ledger with what external systems really did.

Empty until the effects ledger exists; see ``docs/architecture.md``.
"""
