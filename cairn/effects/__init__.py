"""Exactly-once side effects: the effects ledger (``ctx.effect``) and the adapters that
ask external systems what really happened. See ``docs/effects.md``."""

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
from cairn.effects.ledger import (
    EffectLedger,
    EffectStatus,
    EffectUnresolved,
    Policy,
    digest_of,
    idempotency_headers,
)

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
