"""How cairn asks the outside world whether an effect took place.

An adapter per effect type (its ``name`` in ``ctx.effect(name, key, call)``) knows the
external system: ``check(effect)`` answers applied, absent or unknown — by the effect's
key, which the call carried as its idempotency key — and may return the external record.
It may also ``apply(effect)`` again (the reconciler's ``reapply`` policy) and
``compensate(effect)`` (its ``compensate`` policy). Workers use ``check`` to resolve an
intent a crash left behind before calling again; the reconciler uses all of them.

Register adapters in code (``@effect_adapter("payments.charge")`` on a class or an
instance, or :func:`register_adapter`), or by settings:
``CAIRN_EFFECT_ADAPTERS="payments.charge=myapp.adapters:Payments,..."``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, Protocol, TypeVar, runtime_checkable

from cairn.errors import ConfigError
from cairn.model.definition import import_ref
from cairn.model.effects import EffectStatus
from cairn.store.records import EffectRecord


class Verdict(StrEnum):
    APPLIED = "applied"  # the external system has it
    ABSENT = "absent"  # it does not: the call never took effect
    UNKNOWN = "unknown"  # it cannot tell (yet): a person has to look


@dataclass(frozen=True)
class Check:
    verdict: Verdict
    record: Any = None  # the external record (JSON), when the adapter fetched it
    detail: str = ""


@dataclass(frozen=True)
class Effect:
    """An effects-ledger entry, as adapters and reports see it."""

    id: int
    namespace: str
    key: str
    name: str
    run_id: str
    node: str
    iteration: int
    attempt: int
    status: EffectStatus
    calls: int
    result: Any
    digest: str | None
    error_class: str | None
    error: str | None
    policy: str
    compensate: str | None
    created_at: datetime
    applied_at: datetime | None
    resolution: dict[str, Any] | None = None  # what a person recorded (resolution.py)

    @classmethod
    def from_row(cls, row: EffectRecord) -> Effect:
        return cls(**{name: getattr(row, name) for name in cls.__dataclass_fields__})

    def to_dict(self) -> dict[str, Any]:
        return {
            name: (value.isoformat() if isinstance(value, datetime) else value)
            for name, value in self.__dict__.items()
        }


@runtime_checkable
class Adapter(Protocol):
    def check(self, effect: Effect) -> Check | Verdict | str:
        """Did ``effect`` (by ``effect.key``) take place in the external system?"""
        ...


def checked(adapter: Adapter, effect: Effect) -> Check:
    """``adapter.check`` as a :class:`Check`, whatever form the adapter answered in; an
    adapter that raises cannot tell."""
    try:
        answer = adapter.check(effect)
    except Exception as exc:
        return Check(Verdict.UNKNOWN, detail=f"the adapter raised {type(exc).__name__}: {exc}")
    if isinstance(answer, Check):
        return answer
    return Check(Verdict(answer))


_adapters: dict[str, Adapter] = {}
_lock = threading.Lock()

_A = TypeVar("_A")


def register_adapter(name: str, adapter: Adapter) -> None:
    if not isinstance(adapter, Adapter):
        raise TypeError(f"an effect adapter has check(effect); {adapter!r} does not")
    with _lock:
        _adapters[name] = adapter


def effect_adapter(name: str) -> Callable[[_A], _A]:
    """Class or instance decorator: the adapter for effects called ``name`` (a class is
    instantiated without arguments)."""

    def register(target: _A) -> _A:
        register_adapter(name, target() if isinstance(target, type) else target)  # type: ignore[arg-type]
        return target

    return register


def adapter_for(name: str) -> Adapter | None:
    return _adapters.get(name)


def load_adapters(specs: Iterable[str]) -> None:
    """Register ``name=module:attr`` entries (from ``CAIRN_EFFECT_ADAPTERS``)."""
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not name.strip() or not path.strip():
            raise ConfigError(f"an effect adapter is 'name=module:attr', not {spec!r}")
        try:
            target = import_ref(path.strip())
        except (ImportError, AttributeError, TypeError) as exc:
            raise ConfigError(f"effect adapter {spec!r}: {exc}") from exc
        register_adapter(name.strip(), target() if isinstance(target, type) else target)  # type: ignore[arg-type]
