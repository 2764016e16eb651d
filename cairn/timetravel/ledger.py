"""Effects in a replay: the ledger read, never written, and the outside world never called.

A replay (``cairn replay``) or a fork's dry run (``cairn fork``) runs handlers again, and
handlers declare their side effects through ``ctx.effect(name, key, call)``. In a replay
context that goes through a :class:`ReplayLedger`, which answers from what the effects
ledger recorded and otherwise from a *stub* — ``call`` is never invoked:

- ledger ``applied``: the recorded result;
- ledger ``failed``: the recorded failure, raised again (its class as recorded);
- anything else, or nothing: the effect type's replay stub's fake result — without a
  stub, :class:`ReplayRefused`.

Stubs are declared per effect type, next to the adapters::

    @replay_stub("payments.charge")
    def fake_charge(request: StubRequest) -> dict:
        return {"id": f"replay-{request.key}"}

(in a module the handlers import, or named with ``cairn replay --stubs MODULE``). Every
answer is noted (:class:`EffectUse`) for the replay's report. See ``docs/time-travel.md``.
"""

from __future__ import annotations

import copy
import importlib
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from cairn.effects.ledger import _RAISED, EffectLedger
from cairn.errors import CairnError, ConfigError, InvalidInput
from cairn.model.definition import ErrorClass, import_ref
from cairn.model.effects import EffectStatus, Policy
from cairn.model.failures import PermanentError
from cairn.model.payloads import storable_json


class ReplayRefused(CairnError):
    """An effect a replay cannot answer: nothing was recorded for its key (or not an
    outcome) and its type has no replay stub. Replays never call the outside world."""

    code = "replay_refused"
    error_class = ErrorClass.PERMANENT.value

    def __init__(self, message: str, *, name: str = "", key: str = "") -> None:
        super().__init__(message)
        self.name = name
        self.key = key


@dataclass(frozen=True)
class StubRequest:
    """What a replay stub is asked for: the effect, and the execution asking."""

    name: str
    key: str  # the business key, as the handler gave it
    recorded_key: str  # the key as the ledger would record it (scoped in a live fork)
    run_id: str
    node: str
    iteration: int
    attempt: int


Stub = Callable[[StubRequest], Any]

_stubs: dict[str, Stub] = {}
_lock = threading.Lock()

_S = TypeVar("_S")


def register_stub(name: str, stub: Stub) -> None:
    """Answer replays of effects called ``name`` with ``stub(request)``'s fake result."""
    if not callable(stub):
        raise TypeError(f"a replay stub is callable (request) -> result; {stub!r} is not")
    with _lock:
        _stubs[name] = stub


def replay_stub(name: str) -> Callable[[_S], _S]:
    """Decorator: the replay stub for effects called ``name`` (a function, or a class
    instantiated without arguments whose instances are callable)."""

    def register(target: _S) -> _S:
        register_stub(name, target() if isinstance(target, type) else target)  # type: ignore[arg-type]
        return target

    return register


def stub_for(name: str) -> Stub | None:
    return _stubs.get(name)


def unregister_stub(name: str) -> None:
    with _lock:
        _stubs.pop(name, None)


def load_stubs(specs: Iterable[str]) -> None:
    """Import what declares stubs: ``module`` (its ``@replay_stub`` decorators register
    them) or ``name=module:attr``."""
    for given in specs:
        spec = given.strip()
        if not spec:
            continue
        name, sep, path = spec.partition("=")
        try:
            if sep:
                target = import_ref(path.strip())
                register_stub(name.strip(), target() if isinstance(target, type) else target)
            else:
                importlib.import_module(spec)
        except (ImportError, AttributeError, TypeError, ValueError) as exc:
            raise ConfigError(f"replay stubs {spec!r}: {type(exc).__name__}: {exc}") from exc


class Answer:
    RECORDED = "recorded"  # the ledger's applied result
    RECORDED_FAILURE = "recorded_failure"  # the ledger's failure, raised again
    STUBBED = "stubbed"  # the type's replay stub answered
    REFUSED = "refused"  # nothing to answer with: ReplayRefused


@dataclass(frozen=True)
class EffectUse:
    """One ``ctx.effect`` in a replay, and how it was answered (never by calling)."""

    name: str
    key: str  # as recorded (scoped in a live fork)
    answer: str  # an Answer
    ledger_status: str | None  # what the ledger had for the key (None: nothing)
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "key": self.key,
            "answer": self.answer,
            "ledger_status": self.ledger_status,
            "detail": self.detail,
        }


@dataclass
class ReplayLedger(EffectLedger):
    """``ctx.effect`` in a replay: reads the effects ledger, never writes it, never calls.

    ``namespace`` and ``scope`` say where the recorded keys are: the replayed run's (for a
    replay), the parent's (for a fork's dry run). ``uses`` notes every answer."""

    uses: list[EffectUse] = field(default_factory=list)

    def effect(
        self,
        name: str,
        key: str,
        call: Callable[[str], Any],
        *,
        compensate: Callable[..., Any] | str | None = None,
        policy: Policy | str = Policy.FLAG,
    ) -> Any:
        del call, compensate  # never called: that is the point
        if self.refusal is not None:
            raise PermanentError(self.refusal)
        recorded_key = self.checked_key(name, key)
        Policy(policy)  # refused as the real ledger would refuse it
        with self.store.reading() as tx:
            row = tx.effect(self.namespace, recorded_key)
        status = row.status if row is not None else None
        if row is not None and row.name != name:
            raise InvalidInput(
                f"effect key {recorded_key!r} belongs to a {row.name!r} effect, not {name!r}: "
                "keys name one effect each"
            )
        if row is not None and status is EffectStatus.APPLIED:
            self._note(name, recorded_key, Answer.RECORDED, status)
            return copy.deepcopy(row.result)
        if row is not None and status in (EffectStatus.FAILED, EffectStatus.UNKNOWN):
            # Unknown too: the recorded execution saw its call raise, whatever the world did.
            self._note(name, recorded_key, Answer.RECORDED_FAILURE, status, row.error or "")
            raised = _RAISED.get(row.error_class or "", PermanentError)
            raise raised(f"effect {recorded_key!r} failed before: {row.error}")
        stub = stub_for(name)
        what = "was never recorded" if row is None else f"is {row.status} in the ledger"
        if stub is None:
            self._note(name, recorded_key, Answer.REFUSED, status, f"{what}; no replay stub")
            raise ReplayRefused(
                f"effect {name} {recorded_key!r} {what} and {name!r} has no replay stub: "
                "refused (a replay never calls the outside world; declare one with "
                f"@replay_stub({name!r}))",
                name=name,
                key=recorded_key,
            )
        result = stub(
            StubRequest(
                name,
                key,
                recorded_key,
                self.run_id,
                self.node,
                self.iteration,
                self.attempt,
            )
        )
        storable_json(
            result, what=f"the replay stub's result for {key!r}", limit_bytes=self.max_payload_bytes
        )
        self._note(name, recorded_key, Answer.STUBBED, status, what)
        return result

    @property
    def refused(self) -> list[EffectUse]:
        return [use for use in self.uses if use.answer == Answer.REFUSED]

    def _note(
        self,
        name: str,
        key: str,
        answer: str,
        status: EffectStatus | None,
        detail: str = "",
    ) -> None:
        self.uses.append(EffectUse(name, key, answer, status.value if status else None, detail))

    # A replay ledger never writes: the real ledger's two transactions must not happen.
    def _begin(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a replay ledger records nothing")

    def _finish(self, *args: Any, **kwargs: Any) -> None:
        raise AssertionError("a replay ledger records nothing")


__all__ = [
    "Answer",
    "EffectUse",
    "ReplayLedger",
    "ReplayRefused",
    "StubRequest",
    "load_stubs",
    "register_stub",
    "replay_stub",
    "stub_for",
    "unregister_stub",
]
