"""Exactly-once side effects: the effects ledger (``ctx.effect``) and the adapters that
ask external systems what really happened (see ``docs/effects.md``); and what answers
effects in a replay instead of the outside world: replay stubs (see
``docs/time-travel.md``)."""

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
from cairn.effects.replay import ReplayRefused, StubRequest, register_stub, replay_stub

__all__ = [
    "Adapter",
    "Check",
    "Effect",
    "EffectLedger",
    "EffectStatus",
    "EffectUnresolved",
    "Policy",
    "ReplayRefused",
    "StubRequest",
    "Verdict",
    "adapter_for",
    "digest_of",
    "effect_adapter",
    "idempotency_headers",
    "load_adapters",
    "register_adapter",
    "register_stub",
    "replay_stub",
]
