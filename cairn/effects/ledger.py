"""``ctx.effect``: record, then do — an external side effect applied once however often
its node runs.

1. In one transaction: record the *intent* under the workflow's business key (or find
   the key already there, locked). Committed before anything is called.
2. Call ``call(key)``: the key goes to the outside world as its idempotency key.
3. Record the outcome: *applied* with the JSON result and its digest, or *failed* with
   its error class.

A key already applied returns its recorded result without calling. A failed key raises
its recorded failure again — unless it was transient: then calling again with the same
key is what a retry is for. A key left in *intent* (its caller died between 1 and 3, or
before recording the outcome) is resolved by asking the external system through the
effect type's adapter before any new call: applied there → the result is backfilled,
nothing is called; absent → called; unknown → a transient failure (ask again later; the
reconciler flags it). Without an adapter, the call is made again with the same key, and
the external system's idempotency is what keeps it once.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from cairn.effects.adapters import Effect, Verdict, adapter_for, checked
from cairn.errors import InvalidInput
from cairn.failures import BusinessError, HandlerError, PermanentError, TransientError
from cairn.faults import fault_point
from cairn.orchestrator.definition import ErrorClass, ref_path_of
from cairn.payloads import storable_json
from cairn.store.repository import Store, utcnow
from cairn.workers.classify import classify

log = logging.getLogger(__name__)

NAME_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]*$")
MAX_KEY_LENGTH = 500

_RAISED: dict[str, type[HandlerError]] = {
    ErrorClass.TRANSIENT.value: TransientError,
    ErrorClass.PERMANENT.value: PermanentError,
    ErrorClass.BUSINESS.value: BusinessError,
}


class EffectStatus(StrEnum):
    INTENT = "intent"  # recorded before the call; the outcome is not known yet
    APPLIED = "applied"
    FAILED = "failed"
    ABSENT = "absent"  # the reconciler found an old intent never took effect
    FLAGGED = "flagged"  # the ledger and the world disagree: a person decides
    COMPENSATED = "compensated"


class Policy(StrEnum):
    """What the reconciler does when the ledger says applied and the world says absent."""

    FLAG = "flag"  # report it for a person (the default: money is involved)
    REAPPLY = "reapply"  # apply it again through the adapter
    COMPENSATE = "compensate"  # run the effect's compensation


def digest_of(result: Any) -> str:
    """A stable digest of a JSON result (keys sorted): what the response was."""
    text = json.dumps(result, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


class EffectUnresolved(TransientError):
    """An earlier call's outcome is not known and the external system cannot say yet."""


@dataclass
class EffectLedger:
    """The effects ledger as one node execution uses it (``ctx.effect``)."""

    store: Store
    namespace: str
    run_id: str
    node: str
    iteration: int
    attempt: int
    fence: int
    max_payload_bytes: int
    # Why this execution may not apply effects at all (an ephemeral node), if it may not.
    refusal: str | None = None
    # A live fork's run id: its keys are scoped by it (:func:`scoped_key`), so that
    # neither this ledger nor the external system dedupes them against its parent's.
    scope: str | None = None

    def effect(
        self,
        name: str,
        key: str,
        call: Callable[[str], Any],
        *,
        compensate: Callable[..., Any] | str | None = None,
        policy: Policy | str = Policy.FLAG,
    ) -> Any:
        if self.refusal is not None:
            raise PermanentError(self.refusal)
        key = self.checked_key(name, key)
        policy = Policy(policy)
        compensate_path = ref_path_of(compensate) if callable(compensate) else compensate
        recorded = self._begin(name, key, policy, compensate_path)
        if recorded is not None:
            return recorded.value
        try:
            result = call(key)
        except Exception as exc:
            error_class = getattr(exc, "error_class", None) or classify(exc)
            self._finish(
                key,
                {
                    "status": EffectStatus.FAILED.value,
                    "error_class": ErrorClass(error_class).value,
                    "error": f"{type(exc).__name__}: {exc}",
                },
            )
            raise
        try:
            storable_json(
                result, what=f"effect {key!r}'s result", limit_bytes=self.max_payload_bytes
            )
        except InvalidInput as exc:  # it took effect: keep that, say what was wrong
            self._finish(key, applied(None))
            raise PermanentError(str(exc)) from exc
        fault_point("effect.after_call")
        self._finish(key, applied(result))
        return result

    def scoped(self, key: str) -> str:
        """``key`` as this ledger records it and sends it out (see :func:`scoped_key`)."""
        return scoped_key(key, self.scope)

    def checked_key(self, name: str, key: str) -> str:
        """The key as recorded (scoped), once ``name`` and ``key`` are found well-formed;
        :class:`InvalidInput` otherwise."""
        if not isinstance(name, str) or not NAME_PATTERN.match(name):
            raise InvalidInput(f"an effect's name is identifier-like, got {name!r}")
        if not isinstance(key, str) or not key or len(key) > MAX_KEY_LENGTH:
            raise InvalidInput(
                f"an effect's key is a non-empty business key of at most {MAX_KEY_LENGTH} "
                f"characters (e.g. 'order-123:charge'), got {key!r}"
            )
        recorded = self.scoped(key)
        if len(recorded) > MAX_KEY_LENGTH:
            raise InvalidInput(
                f"effect key {key!r} scoped to this forked run is {recorded!r}: longer than "
                f"{MAX_KEY_LENGTH} characters"
            )
        return recorded

    # -- the two transactions around the call --------------------------------------------

    def _begin(
        self, name: str, key: str, policy: Policy, compensate: str | None
    ) -> _Recorded | None:
        """Record the intent (and count the call about to be made); or return what the
        ledger already knows, without calling."""
        now = utcnow()
        with self.store.transaction() as tx:
            inserted = tx.record_intent(
                {
                    "namespace": self.namespace,
                    "key": key,
                    "name": name,
                    "run_id": self.run_id,
                    "node": self.node,
                    "iteration": self.iteration,
                    "attempt": self.attempt,
                    "fence": self.fence,
                    "status": EffectStatus.INTENT.value,
                    "calls": 1,
                    "policy": policy.value,
                    "compensate": compensate,
                    "created_at": now,
                    "updated_at": now,
                }
            )
            if inserted:
                return None
            row = tx.effect(self.namespace, key, lock=True)
            if row.name != name:
                raise InvalidInput(
                    f"effect key {key!r} belongs to a {row.name!r} effect, not {name!r}: "
                    "keys name one effect each"
                )
            status = EffectStatus(row.status)
            if status is EffectStatus.APPLIED:
                return _Recorded(row.result)
            if status is EffectStatus.FAILED and row.error_class != ErrorClass.TRANSIENT.value:
                raised = _RAISED.get(row.error_class or "", PermanentError)
                raise raised(f"effect {key!r} failed before: {row.error}")
            if status in (EffectStatus.FLAGGED, EffectStatus.COMPENSATED):
                raise PermanentError(
                    f"effect {key!r} is {status.value} by the reconciler: a person decides"
                )
            if row.fence > self.fence:
                raise TransientError(f"effect {key!r} is owned by a newer claim of its node")
            if status is EffectStatus.INTENT:
                resolved = self._resolve(tx, row)
                if resolved is not None:
                    return resolved
            tx.update_effect(
                row.id,
                {
                    "status": EffectStatus.INTENT.value,
                    "fence": self.fence,
                    "attempt": self.attempt,
                    "calls": row.calls + 1,
                    "error_class": None,
                    "error": None,
                },
            )
        return None

    def _resolve(self, tx: Any, row: Any) -> _Recorded | None:
        """An intent whose outcome was never recorded: ask the world. None: call again."""
        adapter = adapter_for(row.name)
        if adapter is None:
            log.warning(
                "effect %r was left in intent and has no %r adapter to ask: calling again "
                "with the same key (the external system's idempotency keeps it once)",
                row.key,
                row.name,
            )
            return None
        check = checked(adapter, Effect.from_row(row))
        if check.verdict is Verdict.APPLIED:
            log.info("effect %r had taken place: result backfilled, not called again", row.key)
            tx.update_effect(row.id, {**applied(check.record, checked=True), "fence": self.fence})
            return _Recorded(check.record)
        if check.verdict is Verdict.UNKNOWN:
            raise EffectUnresolved(
                f"effect {row.key!r}: an earlier call's outcome is unknown and {row.name!r} "
                f"cannot tell yet{': ' + check.detail if check.detail else ''}"
            )
        return None

    def _finish(self, key: str, changes: Mapping[str, Any]) -> None:
        with self.store.transaction() as tx:
            row = tx.effect(self.namespace, key)
            changed = tx.update_effect(
                row.id, changes, status=EffectStatus.INTENT.value, fence_at_most=self.fence
            )
        if not changed:
            log.warning(
                "effect %r: outcome not recorded (a newer claim or the reconciler got there first)",
                key,
            )


@dataclass(frozen=True)
class _Recorded:
    value: Any


def applied(result: Any, *, checked: bool = False) -> dict[str, Any]:
    """The ledger changes that record an effect applied with ``result`` (``checked``:
    and confirmed by the external system)."""
    now = utcnow()
    return {
        "status": EffectStatus.APPLIED.value,
        "result": result,
        "digest": digest_of(result),
        "applied_at": now,
        "error_class": None,
        "error": None,
        **({"checked_at": now} if checked else {}),
    }


FORK_SCOPE = "@fork:"


def scoped_key(key: str, scope: str | None) -> str:
    """The key a run records and sends out for the business key ``key``: the key itself,
    or, in a live fork (``scope``: the fork's run id), ``<key>@fork:<run id>`` — fresh, so
    that neither the ledger nor the external system's idempotency takes the fork's effect
    for its parent's. Idempotent: a key already scoped by ``scope`` is left as it is."""
    if scope is None:
        return key
    suffix = f"{FORK_SCOPE}{scope}"
    return key if key.endswith(suffix) else key + suffix


def effect_scope(run: Any) -> str | None:
    """The effect-key scope of a run, from its row: its own id if it is a live fork (it
    has a fork point), None for any other run."""
    return str(run.id) if getattr(run, "fork_seq", None) is not None else None


def idempotency_headers(key: str, fence: int | None = None) -> dict[str, str]:
    """HTTP headers carrying an effect's key (``Idempotency-Key``, as payment and
    messaging APIs expect) and, if given, the caller's fencing token."""
    headers = {"Idempotency-Key": key}
    if fence is not None:
        headers["X-Cairn-Fence"] = str(fence)
    return headers


__all__ = [
    "FORK_SCOPE",
    "EffectLedger",
    "EffectStatus",
    "EffectUnresolved",
    "Policy",
    "applied",
    "digest_of",
    "effect_scope",
    "idempotency_headers",
    "scoped_key",
]
