"""``ctx.effect``: record, then do — an external side effect applied once however often
its node runs.

1. In one transaction: record the *intent* under the workflow's business key (or find
   the key already there, locked) — only if PostgreSQL has no newer claim of this
   node's execution on record than this worker's. Committed before anything is called.
2. Call ``call(key)``: the key goes to the outside world as its idempotency key.
3. Record the outcome: *applied* with the JSON result and its digest; *failed* with its
   error class, if it certainly did not take effect (a permanent or business error, or
   a transient one raised before the request left); or *unknown* — the call was made
   and whether it took effect is not known (a read timeout, a reset, a 5xx answer).

A key already applied returns its recorded result without calling. A failed key raises
its recorded failure again — unless it was transient: then calling again with the same
key is what a retry is for. A key left in *intent* (its caller died between 1 and 3, or
before recording the outcome) or *unknown* is resolved by asking the external system
through the effect type's adapter before any new call: applied there → the result is
backfilled, nothing is called; absent → called; unknown → a transient failure (ask again
later; the reconciler flags it). Without an adapter, the call is made again with the
same key, and the external system's idempotency is what keeps it once.

Both transactions ride out a database outage (``CAIRN_RECONNECT_WITHIN``); past that,
:class:`cairn.errors.StoreUnavailable` — not the handler's failure: the worker gives the
message back and the node runs again on the same attempt.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from cairn.effects.adapters import Effect, Verdict, adapter_for, checked
from cairn.errors import InvalidInput, StoreError, StoreUnavailable
from cairn.faults import fault_point
from cairn.model.classify import classify, may_have_applied
from cairn.model.definition import DEFAULT_CANCEL_TIMEOUT, ErrorClass, ref_path_of
from cairn.model.effects import EffectStatus, Policy
from cairn.model.failures import (
    BusinessError,
    HandlerError,
    PermanentError,
    StaleClaim,
    TransientError,
)
from cairn.model.keys import ExecutionKey
from cairn.model.payloads import storable_json
from cairn.reconnect import store_through_outages
from cairn.store.records import Intent, utcnow
from cairn.store.schema import effects
from cairn.store.sql import Store

log = logging.getLogger(__name__)

_T = TypeVar("_T")

NAME_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]*$")
MAX_KEY_LENGTH = 500

_RAISED: dict[str, type[HandlerError]] = {
    ErrorClass.TRANSIENT.value: TransientError,
    ErrorClass.PERMANENT.value: PermanentError,
    ErrorClass.BUSINESS.value: BusinessError,
}


def digest_of(result: Any) -> str:
    """A stable digest of a JSON result (keys sorted): what the response was."""
    text = json.dumps(result, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


class EffectUnresolved(TransientError):
    """An earlier call's outcome is not known and the external system cannot say yet."""


# Not settled: an earlier call may or may not have taken effect; ask before calling.
UNSETTLED = frozenset({EffectStatus.INTENT, EffectStatus.UNKNOWN})
DEFAULT_RECONNECT_WITHIN_S = 30.0  # CAIRN_RECONNECT_WITHIN's default


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
    # The execution's phase (``run``, ``compensate``): with run, node and iteration, the
    # node execution whose newest claim PostgreSQL records (``node_executions.fence``).
    phase: str = "run"
    # How long each of the ledger's transactions rides out a database outage.
    reconnect_within: float = DEFAULT_RECONNECT_WITHIN_S
    # Does this worker still trust its claim (its lease)? Asked before the intent is
    # recorded and again just before the call; False: StaleClaim, no call.
    lease_trusted: Callable[[], bool] | None = None
    # How long a cancelled async handler waits for an effect's call still out (the
    # workflow's cancel_timeout) before detaching it.
    cancel_timeout_s: float = DEFAULT_CANCEL_TIMEOUT.total_seconds()

    def effect(
        self,
        name: str,
        key: str,
        call: Callable[[str], Any],
        *,
        compensate: Callable[..., Any] | str | None = None,
        policy: Policy | str = Policy.FLAG,
    ) -> Any:
        key, recorded = self._before_call(name, key, compensate, policy)
        if recorded is not None:
            return recorded.value
        try:
            result = call(key)
        except Exception as exc:
            self._finish(key, failed(exc))
            raise
        return self._after_call(key, result)

    async def effect_async(
        self,
        name: str,
        key: str,
        call: Callable[[str], Awaitable[Any]],
        *,
        compensate: Callable[..., Any] | str | None = None,
        policy: Policy | str = Policy.FLAG,
        cancellable: bool = False,
    ) -> Any:
        """:meth:`effect` for an ``async`` call, the ledger's writes off the event loop.
        A cancel of the awaiting coroutine does not cut the call short (a payment on its
        way is not "half sent"): it is awaited to its end, for up to the workflow's
        ``cancel_timeout``, its outcome recorded, and the cancel goes on; a call still out
        then is detached — left to finish — and recorded ``unknown``, for the reconciler.
        ``cancellable``: the call is cancelled with its coroutine, recorded ``unknown``."""
        key, recorded = await asyncio.to_thread(self._before_call, name, key, compensate, policy)
        if recorded is not None:
            return recorded.value
        pending = asyncio.ensure_future(call(key))
        try:
            result = await (pending if cancellable else asyncio.shield(pending))
        except asyncio.CancelledError:
            await self._settle_cancelled(key, pending, cancellable)
            raise
        except Exception as exc:
            await asyncio.to_thread(self._finish, key, failed(exc))
            raise
        return await asyncio.to_thread(self._after_call, key, result)

    async def _settle_cancelled(
        self, key: str, pending: asyncio.Future[Any], cancellable: bool
    ) -> None:
        """Record what became of a call whose coroutine was cancelled while it was out."""
        if not cancellable and not pending.done():
            await asyncio.wait({pending}, timeout=self.cancel_timeout_s)
        if pending.done() and not pending.cancelled():
            error = pending.exception()
            if error is None:
                with contextlib.suppress(PermanentError):  # kept as applied, regardless
                    await asyncio.to_thread(self._after_call, key, pending.result())
                return
            changes = failed(error)
        else:
            if not pending.done():
                log.warning(
                    "effect %r: still out %g s after its node was cancelled; detached, "
                    "recorded unknown for the reconciler",
                    key,
                    self.cancel_timeout_s,
                )
            changes = {
                "status": EffectStatus.UNKNOWN.value,
                "error_class": ErrorClass.TRANSIENT.value,
                "error": "cancelled while the call was out: it may have taken effect",
            }
        await asyncio.to_thread(self._finish, key, changes)

    def _before_call(
        self,
        name: str,
        key: str,
        compensate: Callable[..., Any] | str | None,
        policy: Policy | str,
    ) -> tuple[str, _Recorded | None]:
        """The key as recorded, and what the ledger already knows of it (None: the intent
        is recorded and the call may be made)."""
        if self.refusal is not None:
            raise PermanentError(self.refusal)
        key = self.checked_key(name, key)
        policy = Policy(policy)
        compensate_path = ref_path_of(compensate) if callable(compensate) else compensate
        self._check_lease(key, "recording its intent")
        recorded = self._transaction(
            key, "recording its intent", lambda: self._begin(name, key, policy, compensate_path)
        )
        if recorded is not None:
            return key, recorded
        try:
            self._check_lease(key, "calling")
        except StaleClaim as stale:
            self._not_called(key, stale)
            raise
        return key, None

    def _after_call(self, key: str, result: Any) -> Any:
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
        ledger already knows, without calling. :class:`StaleClaim`, with nothing written,
        if PostgreSQL has a newer claim of this execution on record."""
        now = utcnow()
        with self.store.transaction() as tx:
            recorded = tx.record_intent(
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
                },
                phase=self.phase,
            )
            if recorded is Intent.RECORDED:
                return None
            if recorded is Intent.FENCED:
                raise self._stale(key, "PostgreSQL has a newer claim of it on record")
            row = tx.effect(self.namespace, key, lock=True)
            if row is None:  # retention deleted it between the two statements
                raise StoreError(f"effect {key!r} vanished while being recorded")
            return self._again(tx, row, name, key)

    def _again(self, tx: Any, row: Any, name: str, key: str) -> _Recorded | None:
        """The effect is on record already (its row locked): what it was — its result,
        or its failure raised again — or the intent recorded anew for this claim."""
        if row.name != name:
            raise InvalidInput(
                f"effect key {key!r} belongs to a {row.name!r} effect, not {name!r}: "
                "keys name one effect each"
            )
        status = row.status
        if status is EffectStatus.APPLIED:
            return _Recorded(row.result)
        if status is EffectStatus.FAILED and row.error_class != ErrorClass.TRANSIENT.value:
            raised = _RAISED.get(row.error_class or "", PermanentError)
            raise raised(f"effect {key!r} failed before: {row.error}")
        if status in (EffectStatus.FLAGGED, EffectStatus.COMPENSATED):
            raise PermanentError(
                f"effect {key!r} is {status.value} by the reconciler: a person decides"
            )
        if self._ours(row) and row.fence > self.fence:
            raise self._stale(key, f"a newer claim (fence {row.fence}) called it")
        if status in UNSETTLED:
            resolved = self._resolve(tx, row)
            if resolved is not None:
                return resolved
        reclaimed = tx.update_effect(
            row.id,
            {
                "status": EffectStatus.INTENT.value,
                "fence": self.fence,
                "attempt": self.attempt,
                "calls": row.calls + 1,
                "error_class": None,
                "error": None,
            },
            claim=self._claim,
        )
        if not reclaimed:  # the row is locked: only a newer claim can refuse it
            raise self._stale(key, "PostgreSQL has a newer claim of it on record")
        return None

    def _resolve(self, tx: Any, row: Any) -> _Recorded | None:
        """An intent whose outcome was never recorded, or an earlier call whose outcome is
        unknown: ask the world. None: call again."""
        adapter = adapter_for(row.name)
        if adapter is None:
            log.warning(
                "effect %r was left in %s and has no %r adapter to ask: calling again "
                "with the same key (the external system's idempotency keeps it once)",
                row.key,
                row.status,
                row.name,
            )
            return None
        check = checked(adapter, Effect.from_row(row))
        if check.verdict is Verdict.APPLIED:
            backfilled = tx.update_effect(
                row.id,
                {**applied(check.record, checked=True), "fence": self.fence},
                claim=self._claim,
            )
            if not backfilled:
                raise self._stale(row.key, "PostgreSQL has a newer claim of it on record")
            log.info("effect %r had taken place: result backfilled, not called again", row.key)
            return _Recorded(check.record)
        if check.verdict is Verdict.UNKNOWN:
            raise EffectUnresolved(
                f"effect {row.key!r}: an earlier call's outcome is unknown and {row.name!r} "
                f"cannot tell yet{': ' + check.detail if check.detail else ''}"
            )
        return None

    def _finish(self, key: str, changes: Mapping[str, Any]) -> None:
        def record() -> bool:
            with self.store.transaction() as tx:
                row = tx.effect(self.namespace, key)
                if row is None:
                    return False
                return tx.update_effect(
                    row.id, changes, status=EffectStatus.INTENT.value, fence_at_most=self.fence
                )

        if not self._transaction(key, "recording its outcome", record):
            log.warning(
                "effect %r: outcome not recorded (a newer claim or the reconciler got there first)",
                key,
            )

    def _not_called(self, key: str, stale: StaleClaim) -> None:
        """The intent was recorded, then the claim was found stale before the call: say
        the effect was not called (best effort: a left intent is resolved anyway)."""
        changes = {
            "status": EffectStatus.FAILED.value,  # certainly: it was not called
            "error_class": ErrorClass.TRANSIENT.value,
            "error": f"{type(stale).__name__}: {stale}",
            "calls": effects.c.calls - 1,  # counted when the intent was recorded
        }
        try:
            self._finish(key, changes)
        except StoreUnavailable:
            log.warning("effect %r: could not record that it was not called", key)

    # -- claims and outages -------------------------------------------------------------

    @property
    def _claim(self) -> tuple[ExecutionKey, int]:
        """This ledger's execution and its claim's fence, as PostgreSQL conditions on."""
        return ExecutionKey(self.run_id, self.node, self.iteration, self.phase), self.fence

    def _ours(self, row: Any) -> bool:
        """Was the effect last claimed by this ledger's execution (a key can be shared by
        runs: fences of different executions do not compare)?"""
        return bool(
            row.run_id == self.run_id and row.node == self.node and row.iteration == self.iteration
        )

    def _stale(self, key: str, why: str) -> StaleClaim:
        log.warning("effect %r not made: claim (fence %d) is stale: %s", key, self.fence, why)
        return StaleClaim(
            f"effect {key!r}: this worker's claim of {self.node} (fence {self.fence}) was "
            f"taken over ({why}): no effect made"
        )

    def _check_lease(self, key: str, before: str) -> None:
        if self.lease_trusted is not None and not self.lease_trusted():
            raise self._stale(key, f"its lease is no longer trusted, before {before} it")

    def _transaction(self, key: str, what: str, work: Callable[[], _T]) -> _T:
        """``work()`` (one ledger transaction), riding out a database outage for up to
        ``reconnect_within`` seconds; then :class:`StoreUnavailable`, from the outage."""
        return store_through_outages(self.reconnect_within, f"effect {key!r}: {what}", work)


@dataclass(frozen=True)
class _Recorded:
    value: Any


def failed(error: BaseException) -> dict[str, Any]:
    """The ledger changes that record a call that raised ``error``: ``unknown`` if it may
    have taken effect (the request left and no answer says what became of it), else
    ``failed`` — with its error class either way (see
    :func:`cairn.model.classify.may_have_applied`)."""
    error_class = classify(error)
    status = EffectStatus.UNKNOWN if may_have_applied(error) else EffectStatus.FAILED
    return {
        "status": status.value,
        "error_class": error_class.value,
        "error": f"{type(error).__name__}: {error}",
    }


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
    "UNSETTLED",
    "EffectLedger",
    "EffectStatus",
    "EffectUnresolved",
    "Policy",
    "applied",
    "digest_of",
    "effect_scope",
    "failed",
    "idempotency_headers",
    "scoped_key",
]
