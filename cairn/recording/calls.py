"""Durable model calls: ``ctx.model(client)`` wraps an official ``openai`` or
``anthropic`` client (sync or async) in one with the same interface whose calls are
recorded as they complete.

Each completed call is one fenced write: the messages it sent, stored once each by
digest, and the call — its index in the execution, provider, model, parameters, the
digests of its messages, the response, usage and latency. A re-execution of the node (its
worker lost, a retry) answers the calls it makes again from that record, in order, as
long as it asks the same; only the call that was in flight is sent again. A replay
answers from the record and never sends (:class:`ModelCalls` with ``live=False``).

The SDK's own retries are switched off: cairn's durable retries are the only ones, and a
429's ``Retry-After`` becomes the retry's delay. Under a rate limit (``rate:``) a call
first takes its request and tokens from its buckets, waiting for them; is charged what
it used once answered; and a 429 pauses its buckets fleet-wide and sends it again when
its turn comes (:mod:`cairn.limits.limiter`). Usage is charged to the node's budget
(``tokens``, ``input_tokens``, ``output_tokens``), and a call the remaining ``tokens``
cannot cover is refused before it is sent.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn, Protocol

from cairn.errors import ArtifactError, InvalidInput
from cairn.limits.limiter import RateLimiter
from cairn.model.definition import ContextPolicy
from cairn.model.failures import PermanentError, StaleClaim
from cairn.model.keys import Claim, ExecutionKey
from cairn.model.payloads import storable_json
from cairn.reconnect import store_through_outages
from cairn.recording.compaction import Compactor, estimated_tokens
from cairn.store.model_calls import messages_stored
from cairn.store.records import ModelCallRecord, utcnow

if TYPE_CHECKING:
    from cairn.artifacts import Artifacts

log = logging.getLogger(__name__)


class CallRecords(Protocol):
    """What the recorder needs of the engine: an execution's recorded calls, and the
    fenced write of one call (:class:`cairn.engine.model_calls.ModelCallBook`), each a
    transaction the engine opens. Handed in: recording imports no engine."""

    def calls_of(self, key: ExecutionKey) -> tuple[list[ModelCallRecord], frozenset[int]]: ...

    def record(
        self,
        key: ExecutionKey,
        attempt: int,
        fence: int,
        call: dict[str, Any],
        bodies: dict[str, Any],
        *,
        claim: Claim | None,
    ) -> bool: ...


class ModelCallRefused(PermanentError):
    """A replay (or dry-run fork) reached a model call the record cannot answer: it is
    never sent. The message names the call and what differs from the record."""


# The key of a reference to a payload kept in the artifact store in place of its content.
OFFLOADED = "cairn:artifact"


def is_offloaded(stored: Any) -> bool:
    return (
        isinstance(stored, dict)
        and OFFLOADED in stored
        and set(stored)
        <= {
            OFFLOADED,
            "name",
            "bytes",
        }
    )


@dataclass(frozen=True)
class ModelRequest:
    """A call as recorded and compared: the messages by digest, the rest as parameters."""

    provider: str
    operation: str
    model: str | None
    params: dict[str, Any]
    messages: dict[str, Any]  # digest -> message (a mapping, or an input string), as sent
    digests: tuple[str, ...]
    # The whole conversation the handler passed, by digest, if what was sent was compacted.
    history: tuple[str, ...] | None = None

    @classmethod
    def of(
        cls,
        provider: str,
        operation: str,
        kwargs: Mapping[str, Any],
        history: Sequence[Any] | None = None,
    ) -> ModelRequest:
        field = conversation_field(kwargs)
        given = kwargs.get(field) or ()
        sent = [plain(message) for message in ([given] if isinstance(given, str) else given)]
        digests = tuple(digest_of(message) for message in sent)
        passed = None if history is None else [plain(message) for message in history]
        stored = dict(zip(digests, sent, strict=True))
        if passed is not None:
            stored.update((digest_of(message), message) for message in passed)
        params = {
            name: plain(value)
            for name, value in sorted(kwargs.items())
            if name not in {field, "extra_headers", "extra_query", "timeout"}
            and not left_out(value)
        }
        model = kwargs.get("model")
        return cls(
            provider,
            operation,
            str(model) if model is not None else None,
            params,
            stored,
            digests,
            None if passed is None else tuple(digest_of(message) for message in passed),
        )

    def differs_from(self, record: ModelCallRecord) -> str | None:
        """What changed since ``record`` was made (None: the same request)."""
        if (record.provider, record.operation) != (self.provider, self.operation):
            return f"it is a {self.provider} {self.operation} call, recorded as {record.operation}"
        if record.params != self.params:
            changed = sorted(
                k
                for k in set(record.params) | set(self.params)
                if record.params.get(k) != self.params.get(k)
            )
            return f"its parameters differ ({', '.join(changed)})"
        if tuple(record.messages) != self.digests:
            same = next(
                (
                    i
                    for i, (a, b) in enumerate(zip(record.messages, self.digests, strict=False))
                    if a != b
                ),
                min(len(record.messages), len(self.digests)),
            )
            return (
                f"its messages differ from message {same} on ({len(self.digests)} sent, "
                f"{len(record.messages)} recorded)"
            )
        return None

    def estimated_tokens(self) -> int:
        """A rough count of the request's input tokens (four characters each)."""
        sent = [self.messages[digest] for digest in self.digests]
        return estimated_tokens([*sent, self.params.get("system")])


@dataclass(frozen=True)
class Unanswered:
    """A replayed call the record cannot answer: not in it, or asking something else
    than the recorded call (whose response is ``recorded``)."""

    index: int | None  # None: an HTTP request its node does not record
    request: ModelRequest
    reason: str
    recorded: dict[str, Any] | None


@dataclass
class ModelCalls:
    """The model calls of one execution: the record earlier executions left, and the
    recording of new calls. ``live=False`` (a replay): answered from the record or
    refused, never sent, nothing written."""

    book: CallRecords
    key: ExecutionKey
    attempt: int
    fence: int
    max_bytes: int
    reconnect_within: float
    lease_trusted: Callable[[], bool] | None = None
    live: bool = True
    # Whether an earlier execution may have left calls (a first attempt reads nothing).
    may_have_record: bool = False
    # Where a live stream's text goes as it arrives (the run's chunk log), if anywhere.
    publish_chunks: Callable[[Sequence[Any]], None] | None = None
    # USD per million input and output tokens by model name (or its start): CAIRN_MODEL_PRICES.
    prices: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    # The node's context budget: older messages compacted before a call over it.
    context: ContextPolicy | None = None
    # A message or response larger than this (as JSON) goes to the artifact store, its
    # reference in the record (CAIRN_MODEL_INLINE_BYTES).
    inline_bytes: int = 65_536
    # The execution's artifacts (its StepContext sets them): where large payloads go.
    artifacts: Artifacts | None = None
    # In a replay: what answers a call the record cannot (its replay stub, if registered);
    # and what it answered, for the replay's report.
    stand_in: Callable[[Unanswered], dict[str, Any] | None] | None = None
    stood_in: list[str] = field(default_factory=list)
    # In a replay: the calls refused (never sent), whatever the handler made of it.
    refused: list[str] = field(default_factory=list)
    # Whether the execution's own HTTP is in its record (its node declares record: http).
    # A replay answers such HTTP from the record; any other HTTP it refuses (or a stub
    # answers): never sent.
    records_http: bool = True
    # The rate buckets its live calls take from (None: no rate limit applies).
    limiter: RateLimiter | None = None
    # The claim its records are fenced by, when not its own (a node fused after an
    # ephemeral one: the chain's first); None: its own (``key``, ``attempt``, ``fence``).
    claim: Claim | None = None
    next_index: int = 0  # the index of the execution's next call
    _compactor: Compactor | None = field(default=None, repr=False)
    _record: dict[int, ModelCallRecord] | None = field(default=None, repr=False)
    _charged_attempts: frozenset[int] = field(default=frozenset(), repr=False)

    @property
    def compactor(self) -> Compactor | None:
        if self._compactor is None and self.context is not None:
            self._compactor = Compactor(self.context, lambda message: digest_of(plain(message)))
        return self._compactor

    def take_index(self) -> int:
        index, self.next_index = self.next_index, self.next_index + 1
        return index

    def recorded(self, index: int, request: ModelRequest) -> dict[str, Any] | None:
        """The recorded response of call ``index`` if it asked the same; None if there is
        none (or, live, if it asked something else: sent again, recorded anew). In a
        replay, a call the record cannot answer goes to ``stand_in`` (a replay stub), or
        is refused: never sent."""
        found = self._load().get(index)
        call = f"{self.key} {'HTTP request' if request.provider == 'http' else 'model call'}"
        if found is None:
            if not self.live:
                return self._stood_in(
                    Unanswered(index, request, f"{call} {index} is not in the record", None),
                    "never sent",
                )
            return None
        changed = request.differs_from(found)
        if changed is None:
            response: dict[str, Any] = self._inlined(found.response)
            return response
        if not self.live:
            why = f"{call} {index} diverged from the record: {changed}"
            return self._stood_in(
                Unanswered(index, request, why, self._inlined(found.response)),
                "a replay never sends it",
            )
        log.warning("%s %d asks something else now (%s): sent", call, index, changed)
        return None

    def charged(self, index: int) -> bool:
        """Whether what recorded call ``index`` used is counted already: an earlier attempt
        made it and reported its end, charges included (a retry answered from the record
        is not charged for it again; a re-execution after a crash is, once)."""
        found = self._load().get(index)
        return (
            found is not None
            and found.attempt < self.attempt
            and found.attempt in self._charged_attempts
        )

    def unrecorded(self, request: ModelRequest) -> dict[str, Any]:
        """In a replay, the answer to an HTTP request of a node that does not record its
        HTTP (no ``record: http``): its ``http`` replay stub's, or
        :class:`ModelCallRefused` — never sent."""
        unanswered = Unanswered(None, request, self._unrecorded(request, None), None)
        return self._stood_in(unanswered, "a replay never sends it")

    def refuse(self, request: ModelRequest, why: str) -> NoReturn:
        """In a replay, refuse an HTTP request that cannot have been recorded (``why``):
        :class:`ModelCallRefused`, noted in :attr:`refused`; no stub answers it."""
        refusal = f"{self._unrecorded(request, why)}; a replay never sends it"
        self.refused.append(refusal)
        raise ModelCallRefused(refusal)

    def _unrecorded(self, request: ModelRequest, why: str | None) -> str:
        because = why or "its node does not declare record: http"
        return (
            f"{self.key} HTTP {request.operation} {request.model} is not in the record ({because})"
        )

    def _stood_in(self, unanswered: Unanswered, refusal: str) -> dict[str, Any]:
        answer = self.stand_in(unanswered) if self.stand_in is not None else None
        if answer is None:
            self.refused.append(f"{unanswered.reason}; {refusal}")
            raise ModelCallRefused(f"{unanswered.reason}; {refusal}")
        self.stood_in.append(f"{unanswered.reason}; answered by its replay stub")
        return answer

    def record(
        self, index: int, request: ModelRequest, response: dict[str, Any], latency_s: float
    ) -> None:
        """Commit call ``index`` as it completed (one transaction; StaleClaim, with nothing
        written, if the claim is no longer this worker's)."""
        if not self.live:
            return
        if self.lease_trusted is not None and not self.lease_trusted():
            raise StaleClaim(f"{self.key}: the claim is stale; model call {index} not recorded")
        recorded = {i: c for i, c in self._load().items() if i < index}
        call = self._call_row(index, request, response, latency_s, recorded)
        try:
            storable_json(call, what="a model call's record", limit_bytes=self.max_bytes)
        except InvalidInput as exc:
            raise PermanentError(str(exc)) from exc
        bodies = self._new_messages(request, recorded)

        def write() -> bool:
            return self.book.record(
                self.key, self.attempt, self.fence, call, bodies, claim=self.claim
            )

        what = f"{self.key}: recording model call {index}"
        if not store_through_outages(self.reconnect_within, what, write):
            raise StaleClaim(f"{self.key}: finished or taken over; model call {index} not recorded")
        self._load()[index] = self._as_recorded(index, request, response, latency_s)

    def _call_row(
        self,
        index: int,
        request: ModelRequest,
        response: dict[str, Any],
        latency_s: float,
        recorded: Mapping[int, ModelCallRecord],
    ) -> dict[str, Any]:
        """The call as it is written: its messages (and history) as digests, each relative
        to what the ``recorded`` calls before it stored; its response offloaded if large."""
        earlier = {i: list(c.messages) for i, c in recorded.items()}
        passed = {i: list(c.history or c.messages) for i, c in recorded.items()}
        history = request.history
        stored_response = self._offloaded(response, f"response {index}", request.model)
        return {
            "call_index": index,
            "provider": request.provider,
            "operation": request.operation,
            "model": request.model,
            "params": request.params,
            "messages": messages_stored(request.digests, earlier),
            "response": stored_response,
            "usage": response.get("usage"),
            "latency_s": latency_s,
            "history": None if history is None else messages_stored(history, passed),
        }

    def _new_messages(
        self, request: ModelRequest, recorded: Mapping[int, ModelCallRecord]
    ) -> dict[str, Any]:
        """The bodies of the call's messages no ``recorded`` call stored, by digest."""
        # The messages an earlier call stored are not sent again: an agent's call repeats
        # the whole conversation, and only what it added is new.
        stored = {d for c in recorded.values() for d in (*c.messages, *(c.history or ()))}
        return {
            digest: self._offloaded(body, f"message {digest[:16]}", request.model)
            for digest, body in request.messages.items()
            if digest not in stored
        }

    def _as_recorded(
        self, index: int, request: ModelRequest, response: dict[str, Any], latency_s: float
    ) -> ModelCallRecord:
        """The call just committed, as reading the record back would give it (its
        response as sent, not offloaded)."""
        history = request.history
        return ModelCallRecord(
            self.key.run_id,
            self.key.node,
            self.key.iteration,
            self.key.phase,
            index,
            self.attempt,
            self.fence,
            request.provider,
            request.operation,
            request.model,
            request.params,
            list(request.digests),
            response,
            response.get("usage"),
            latency_s,
            utcnow(),
            None if history is None else list(history),
        )

    def _offloaded(self, payload: Any, what: str, model: str | None) -> Any:
        """``payload``, or — larger than ``inline_bytes`` as JSON, with an artifact store
        to put it in — its reference (:data:`OFFLOADED`)."""
        if self.artifacts is None:
            return payload
        data = json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode()
        if len(data) <= self.inline_bytes:
            return payload
        name = f"model-calls/{self.key.node}/{what.replace(' ', '-')}"
        try:
            put = self.artifacts.put(name, data, model=model, content_type="application/json")
        except ArtifactError:  # no store for this context: kept in the record
            return payload
        return {OFFLOADED: put["sha256"], "name": name, "bytes": len(data)}

    def _inlined(self, stored: Any) -> Any:
        """A recorded payload, its content read back if it went to the artifact store."""
        if not is_offloaded(stored):
            return stored
        if self.artifacts is None:
            raise ModelCallRefused(f"{self.key}: a recorded payload is in the artifact store")
        return json.loads(self.artifacts.objects.read(stored[OFFLOADED]))

    def _load(self) -> dict[int, ModelCallRecord]:
        if self._record is None:
            if not self.may_have_record:
                self._record = {}
            else:
                found, self._charged_attempts = store_through_outages(
                    self.reconnect_within,
                    f"{self.key}: reading its model calls",
                    lambda: self.book.calls_of(self.key),
                )
                self._record = {call.call_index: call for call in found}
        return self._record


def conversation_field(kwargs: Mapping[str, Any]) -> str:
    """What holds a call's conversation: ``messages``, or the Responses API's ``input``
    (a list of items, or one string)."""
    return "input" if "messages" not in kwargs and "input" in kwargs else "messages"


def left_out(value: Any) -> bool:
    """Whether ``value`` is an SDK's marker of an argument not given (``omit``,
    ``NOT_GIVEN``), which its helpers pass on: not part of the request."""
    return type(value).__name__ in {"Omit", "NotGiven"}


def plain(value: Any) -> Any:
    """JSON data of what a handler passes the SDK (dicts, or the SDK's own models)."""
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json", exclude_none=True)
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)


def digest_of(message: Any) -> str:
    canonical = json.dumps(message, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()
