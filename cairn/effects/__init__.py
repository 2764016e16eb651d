"""Exactly-once side effects: the effects ledger (``ctx.effect``) and the adapters that
ask external systems what really happened (see ``docs/effects.md``). What answers
effects in a replay instead of the outside world (replay stubs) is time travel's:
:mod:`cairn.timetravel`."""

from cairn.effects.adapters import (
    Adapter,
    Check,
    Effect,
    Verdict,
    adapter_for,
    effect_adapter,
    load_adapters,
    register_adapter,
)
from cairn.effects.ledger import EffectLedger, EffectUnresolved, digest_of, idempotency_headers
from cairn.model.effects import EffectStatus, Policy

__all__ = [
    "Adapter",
    "Check",
    "Effect",
    "EffectLedger",
    "EffectStatus",
    "EffectUnresolved",
    "Policy",
    "Verdict",
    "adapter_for",
    "digest_of",
    "effect_adapter",
    "idempotency_headers",
    "load_adapters",
    "register_adapter",
]
