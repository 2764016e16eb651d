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
its turn comes (:mod:`cairn.workers.rates`). Usage is charged to the node's budget
(``tokens``, ``input_tokens``, ``output_tokens``), and a call the remaining ``tokens``
cannot cover is refused before it is sent.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import inspect
import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from cairn.artifacts import Artifacts
from cairn.engine.rates import reservation
from cairn.errors import ArtifactError, InvalidInput
from cairn.model.definition import ContextPolicy
from cairn.model.failures import BudgetExceeded, PermanentError, StaleClaim, TransientError
from cairn.model.keys import Claim, ExecutionKey
from cairn.model.payloads import storable_json
from cairn.model.usage import usage_counts
from cairn.reconnect import store_through_outages
from cairn.store.model_calls import messages_stored
from cairn.store.records import ModelCallRecord, utcnow
from cairn.store.sql import Store
from cairn.workers.departures import departing
from cairn.workers.model_context import Compactor, estimated_tokens
from cairn.workers.model_streams import (
    ChunkPublisher,
    RecordedAsyncStream,
    RecordedStream,
    assembler,
    replayed,
)
from cairn.workers.rates import RateLimiter, Ticket, retry_after, status_of
from cairn.workers.recording import suspended

if TYPE_CHECKING:
    from cairn.workers.context import StepContext

log = logging.getLogger(__name__)

_T = TypeVar("_T")

# What the providers answer when they are busy or down: worth trying again.
RETRYABLE_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504, 529})


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
        sent = [_plain(message) for message in ([given] if isinstance(given, str) else given)]
        digests = tuple(_digest(message) for message in sent)
        passed = None if history is None else [_plain(message) for message in history]
        stored = dict(zip(digests, sent, strict=True))
        if passed is not None:
            stored.update((_digest(message), message) for message in passed)
        params = {
            name: _plain(value)
            for name, value in sorted(kwargs.items())
            if name not in {field, "extra_headers", "extra_query", "timeout"}
            and not _left_out(value)
        }
        model = kwargs.get("model")
        return cls(
            provider,
            operation,
            str(model) if model is not None else None,
            params,
            stored,
            digests,
            None if passed is None else tuple(_digest(message) for message in passed),
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

    store: Store
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
            self._compactor = Compactor(self.context, lambda message: _digest(_plain(message)))
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
        earlier = {i: list(c.messages) for i, c in recorded.items()}
        passed = {i: list(c.history or c.messages) for i, c in recorded.items()}
        history = request.history
        stored_response = self._offloaded(response, f"response {index}", request.model)
        call = {
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
        try:
            storable_json(call, what="a model call's record", limit_bytes=self.max_bytes)
        except InvalidInput as exc:
            raise PermanentError(str(exc)) from exc

        # The messages an earlier call stored are not sent again: an agent's call repeats
        # the whole conversation, and only what it added is new.
        stored = {d for c in recorded.values() for d in (*c.messages, *(c.history or ()))}
        bodies = {
            digest: self._offloaded(body, f"message {digest[:16]}", request.model)
            for digest, body in request.messages.items()
            if digest not in stored
        }

        def write() -> bool:
            with self.store.transaction() as tx:
                return tx.record_model_call(
                    self.key, self.attempt, self.fence, call, bodies, claim=self.claim
                )

        what = f"{self.key}: recording model call {index}"
        if not store_through_outages(self.reconnect_within, what, write):
            raise StaleClaim(f"{self.key}: finished or taken over; model call {index} not recorded")
        self._load()[index] = ModelCallRecord(
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

                def read() -> tuple[list[ModelCallRecord], frozenset[int]]:
                    with self.store.reading() as tx:
                        found = tx.model_calls_of(self.key)
                        return found, tx.charged_attempts(self.key) if found else frozenset()

                found, self._charged_attempts = store_through_outages(
                    self.reconnect_within, f"{self.key}: reading its model calls", read
                )
                self._record = {call.call_index: call for call in found}
        return self._record


# -- the clients ------------------------------------------------------------------------


def recorded_client(ctx: StepContext, calls: ModelCalls, client: Any) -> Any:
    """``client`` with its model calls recorded (see the module's docstring)."""
    module = type(client).__module__.split(".")[0]
    quiet = client.with_options(max_retries=0)  # cairn's retries are the only ones
    asynchronous = type(client).__name__.startswith("Async")
    if module == "openai":
        return _OpenAI(ctx, calls, quiet, asynchronous)
    if module == "anthropic":
        return _Anthropic(ctx, calls, quiet, asynchronous)
    raise TypeError(
        f"ctx.model takes an openai or anthropic client (OpenAI, AsyncOpenAI, Anthropic, "
        f"AsyncAnthropic), or a function with provider=..., not {type(client).__name__}"
    )


def recorded_function(
    ctx: StepContext,
    calls: ModelCalls,
    send: Callable[..., Any],
    *,
    provider: str,
    usage: Callable[[Any], Mapping[str, Any] | None] | None = None,
    encode: Callable[[Any], Any] | None = None,
    decode: Callable[[Any], Any] | None = None,
) -> Callable[..., Any]:
    """``send`` — any model client's call, taking keyword arguments — recorded like an
    SDK's: ``usage(response)`` reads its token counts (``input_tokens``/``output_tokens``
    or ``prompt_tokens``/``completion_tokens``) to charge; ``encode`` turns a response into
    JSON data to record (default: a pydantic model's dump, or the response itself if it
    is JSON data already) and ``decode`` turns the recorded data back into what the
    handler gets when the call is answered from the record (default: the data)."""
    to_json = encode or _json_of

    def encoded(response: Any) -> dict[str, Any]:
        read = usage(response) if usage is not None else None
        return {"value": to_json(response), "usage": _plain(read) if read else None}

    def decoded(answer: dict[str, Any]) -> Any:
        return decode(answer["value"]) if decode is not None else answer["value"]

    # The model_calls column holds 200 characters: a longer qualified name is cut to it.
    operation = (getattr(send, "__qualname__", None) or type(send).__name__)[:200]
    asynchronous = inspect.iscoroutinefunction(send)
    create = _Create(ctx, calls, provider, operation, encoded, decoded, asynchronous)
    return create.bound(send)


class _Wrapped:
    def __init__(self, wrapped: Any) -> None:
        self._wrapped = wrapped

    def __getattr__(self, name: str) -> Any:  # the rest of the SDK, unrecorded
        return getattr(self._wrapped, name)


def _sdk_create(  # noqa: PLR0917 - a _Create's fields, in order
    ctx: StepContext,
    calls: ModelCalls,
    provider: str,
    operation: str,
    response_type: Any,  # the SDK's pydantic model of the response
    asynchronous: bool,
) -> _Create:
    return _Create(
        ctx,
        calls,
        provider,
        operation,
        lambda response: response.model_dump(mode="json"),
        response_type.model_validate,
        asynchronous,
    )


class _OpenAI(_Wrapped):
    def __init__(self, ctx: StepContext, calls: ModelCalls, client: Any, asynchronous: bool):
        super().__init__(client)
        from openai.types.chat import ChatCompletion  # noqa: PLC0415 - an optional extra
        from openai.types.responses import Response  # noqa: PLC0415

        chat = _sdk_create(ctx, calls, "openai", "chat.completions", ChatCompletion, asynchronous)
        self.chat = _Namespace(
            client.chat, completions=_with_stream_helper(client.chat.completions, chat)
        )
        respond = _sdk_create(ctx, calls, "openai", "responses", Response, asynchronous)
        self.responses = _with_stream_helper(client.responses, respond)


def _with_stream_helper(resource: Any, create: _Create) -> _Namespace:
    """An OpenAI resource whose ``create`` is recorded, and whose ``stream`` helper is the
    SDK's own run over that ``create`` (it builds its stream from ``create(stream=True)``)."""
    recorded = _Namespace(resource, create=create.bound(resource.create))
    recorded.stream = functools.partial(type(resource).stream, recorded)  # type: ignore[attr-defined]
    return recorded


class _Anthropic(_Wrapped):
    def __init__(self, ctx: StepContext, calls: ModelCalls, client: Any, asynchronous: bool):
        super().__init__(client)
        from anthropic import NOT_GIVEN  # noqa: PLC0415 - an optional extra
        from anthropic.lib.streaming import (  # noqa: PLC0415
            AsyncMessageStreamManager,
            MessageStreamManager,
        )
        from anthropic.types import Message  # noqa: PLC0415

        create = _sdk_create(ctx, calls, "anthropic", "messages", Message, asynchronous)
        recorded = create.bound(client.messages.create)

        # The SDK's ``messages.stream`` posts by itself; the same manager over the
        # recorded ``create(stream=True)`` gives the same stream object.
        def stream(**kwargs: Any) -> Any:
            _refuse_output_format(kwargs)
            if asynchronous:
                return AsyncMessageStreamManager(
                    recorded(**kwargs, stream=True), output_format=NOT_GIVEN
                )
            return MessageStreamManager(
                functools.partial(recorded, **kwargs, stream=True), output_format=NOT_GIVEN
            )

        self.messages = _Namespace(client.messages, create=recorded, stream=stream)


def _refuse_output_format(kwargs: Mapping[str, Any]) -> None:
    given = kwargs.get("output_format")
    if given is not None and not _left_out(given):
        raise TypeError(
            "ctx.model's messages.stream does not take output_format: pass the JSON schema "
            "as output_config={'format': ...}, and validate the text yourself"
        )


class _Namespace(_Wrapped):
    def __init__(self, wrapped: Any, **recorded: Any) -> None:
        super().__init__(wrapped)
        for name, value in recorded.items():
            setattr(self, name, value)


@dataclass(frozen=True)
class _Create:
    """A recorded ``create``: one of the SDK's (or any client's call), with the record
    in front of it."""

    ctx: StepContext
    calls: ModelCalls
    provider: str
    operation: str
    encode: Callable[[Any], dict[str, Any]]  # a response, as recorded
    decode: Callable[[dict[str, Any]], Any]  # a recorded response, as the handler gets it
    asynchronous: bool

    def bound(self, send: Callable[..., Any]) -> Callable[..., Any]:
        """``send`` (the SDK's ``create``) with the record in front of it."""
        if self.asynchronous:

            async def create_async(**kwargs: Any) -> Any:
                return await self._call_async(send, kwargs)

            return create_async

        def create(**kwargs: Any) -> Any:
            return self._call(send, kwargs)

        return create

    def _prepare(
        self, kwargs: Mapping[str, Any], history: Sequence[Any] | None = None
    ) -> tuple[int, ModelRequest, dict[str, Any] | None]:
        request = ModelRequest.of(self.provider, self.operation, kwargs, history)
        index = self.calls.take_index()
        answer = self.calls.recorded(index, request)
        if answer is None:
            self._afford(request)
        return index, request, answer

    def _fitted(
        self, kwargs: dict[str, Any], sent: list[Any] | None
    ) -> tuple[dict[str, Any], list[Any] | None]:
        """``kwargs`` with ``sent`` as the conversation, and the conversation the handler
        passed (None, and ``kwargs`` as they are, if nothing was compacted)."""
        if sent is None:
            return kwargs, None
        field = conversation_field(kwargs)
        return {**kwargs, field: sent}, list(kwargs[field])

    def _conversation(self, kwargs: Mapping[str, Any]) -> list[Any] | None:
        """The conversation a context budget may compact (None: there is no budget)."""
        given = kwargs.get(conversation_field(kwargs))
        if self.calls.compactor is None or not isinstance(given, list | tuple):
            return None
        return list(given)

    def _call(self, send: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
        conversation = self._conversation(kwargs)
        if conversation is not None and self.calls.compactor is not None:
            compacted = self.calls.compactor.compact(self.ctx, conversation)
            kwargs, history = self._fitted(kwargs, compacted)
        else:
            history = None
        index, request, answer = self._prepare(kwargs, history)
        streaming = bool(kwargs.get("stream"))
        if answer is not None:
            return self._answered(index, answer, kwargs, streaming)
        started = time.perf_counter()
        response, ticket = self._send(send, kwargs, request)
        if streaming:

            def ended(final: dict[str, Any]) -> None:
                self._settle(ticket, final)
                self.calls.record(index, request, final, time.perf_counter() - started)
                self._charge(final.get("usage") or {}, request.model)

            assemble = assembler(self.provider, self.operation, kwargs)
            live = self._live(index)
            return RecordedStream(response, assemble, ended, self._failure, live)
        answer = self.encode(response)
        self._settle(ticket, answer)
        self.calls.record(index, request, answer, time.perf_counter() - started)
        return self._answered(index, answer, kwargs, streaming)

    def _send(
        self, send: Callable[..., Any], kwargs: dict[str, Any], request: ModelRequest
    ) -> tuple[Any, Ticket | None]:
        """``send(**kwargs)``: under a rate limit, when its buckets allow it, and again
        (when they allow it again) after a 429 that paused them."""
        limiter = self.calls.limiter
        if limiter is None:
            with suspended():  # recorded here, as a model call: not again as HTTP
                return _translated(self.provider, lambda: send(**kwargs)), None
        tokens = self._reservation(limiter, request, kwargs)
        refusals = 0
        while True:
            ticket = limiter.admit(tokens)
            try:
                with suspended(), departing(limiter.departure(ticket)):
                    return send(**kwargs), ticket
            except Exception as exc:
                status = status_of(exc)
                if status == 429:
                    refusals += 1
                    if limiter.refused(ticket, exc, refusals):
                        continue
                else:
                    limiter.failed(ticket, answered=status is not None)
                raise _failure(self.provider, exc) from exc

    async def _send_async(
        self, send: Callable[..., Awaitable[Any]], kwargs: dict[str, Any], request: ModelRequest
    ) -> tuple[Any, Ticket | None]:
        limiter = self.calls.limiter
        if limiter is None:
            try:
                with suspended():  # recorded here, as a model call: not again as HTTP
                    return await send(**kwargs), None
            except Exception as exc:
                raise self._failure(exc) from exc
        tokens = self._reservation(limiter, request, kwargs)
        refusals = 0
        while True:
            ticket = await limiter.admit_async(tokens)
            try:
                with suspended(), departing(limiter.departure(ticket)):
                    return await send(**kwargs), ticket
            except Exception as exc:
                status = status_of(exc)
                if status == 429:
                    refusals += 1
                    if await asyncio.to_thread(limiter.refused, ticket, exc, refusals):
                        continue
                else:
                    await asyncio.to_thread(limiter.failed, ticket, status is not None)
                raise self._failure(exc) from exc

    @staticmethod
    def _reservation(limiter: RateLimiter, request: ModelRequest, kwargs: Mapping[str, Any]) -> int:
        return reservation(request.estimated_tokens(), kwargs, limiter.default_output_tokens)

    def _settle(self, ticket: Ticket | None, answer: Mapping[str, Any]) -> None:
        """Charge the call's buckets what it used, as the provider reported it."""
        limiter = self.calls.limiter
        if ticket is not None and limiter is not None:
            limiter.settle(ticket, answer.get("usage"))

    async def _call_async(self, send: Callable[..., Awaitable[Any]], kwargs: dict[str, Any]) -> Any:
        conversation = self._conversation(kwargs)
        if conversation is not None and self.calls.compactor is not None:
            compacted = await self.calls.compactor.compact_async(self.ctx, conversation)
            kwargs, history = self._fitted(kwargs, compacted)
        else:
            history = None
        index, request, answer = await asyncio.to_thread(self._prepare, kwargs, history)
        streaming = bool(kwargs.get("stream"))
        if answer is not None:
            if streaming:
                self._charge_answer(index, answer, kwargs)
                chunks = replayed(self.provider, self.operation, answer, kwargs)
                return RecordedAsyncStream(chunks, None, None, self._failure)
            return self._answered(index, answer, kwargs, streaming)
        started = time.perf_counter()
        response, ticket = await self._send_async(send, kwargs, request)
        if streaming:

            async def ended(final: dict[str, Any]) -> None:
                await asyncio.to_thread(self._settle, ticket, final)
                latency = time.perf_counter() - started
                await asyncio.to_thread(self.calls.record, index, request, final, latency)
                self._charge(final.get("usage") or {}, request.model)

            assemble = assembler(self.provider, self.operation, kwargs)
            live = self._live(index)
            return RecordedAsyncStream(response, assemble, ended, self._failure, live)
        answer = self.encode(response)
        await asyncio.to_thread(self._settle, ticket, answer)
        latency = time.perf_counter() - started
        await asyncio.to_thread(self.calls.record, index, request, answer, latency)
        return self._answered(index, answer, kwargs, streaming)

    def _answered(
        self, index: int, answer: dict[str, Any], kwargs: Mapping[str, Any], streaming: bool
    ) -> Any:
        self._charge_answer(index, answer, kwargs)
        if streaming:  # a recorded streaming call: its message, streamed again
            return RecordedStream(
                replayed(self.provider, self.operation, answer, kwargs), None, None, self._failure
            )
        return self.decode(answer)

    def _failure(self, exc: Exception) -> Exception:
        return _failure(self.provider, exc)

    def _live(self, index: int) -> ChunkPublisher | None:
        calls = self.calls
        if calls.publish_chunks is None:
            return None
        head = {
            "node": calls.key.node,
            "iteration": calls.key.iteration,
            "attempt": calls.attempt,
            "call": index,
        }
        return ChunkPublisher(self.provider, head, calls.publish_chunks)

    def _afford(self, request: ModelRequest) -> None:
        """Refuse, before it is sent, a call whose request alone is over what is left."""
        tokens = request.estimated_tokens()
        price = price_of(self.calls.prices, request.model)
        needs = {"tokens": float(tokens)}
        if price is not None:
            needs["usd"] = tokens * price[0] / 1e6
        for unit, amount in needs.items():
            remaining = self.ctx.remaining(unit)
            if remaining is not None and amount > remaining:
                raise BudgetExceeded(
                    f"{self.ctx.node}: a {request.model} call of about {tokens} input tokens "
                    f"({amount:g} {unit}) is over the {remaining:g} {unit} left in its "
                    "budget: not sent"
                )

    def _charge_answer(
        self, index: int, answer: Mapping[str, Any], kwargs: Mapping[str, Any]
    ) -> None:
        if not self.calls.charged(index):
            self._charge(answer.get("usage") or {}, kwargs.get("model"))

    def _charge(self, usage: Mapping[str, Any], model: str | None) -> None:
        spent_in, spent_out, cached = usage_counts(usage)
        if not (spent_in or spent_out):
            return
        spent: dict[str, float] = {
            "tokens": spent_in + spent_out,
            "input_tokens": spent_in,
            "output_tokens": spent_out,
        }
        if cached:
            spent["cached_tokens"] = cached
        price = price_of(self.calls.prices, model)
        if price is not None:
            cached_price = price[2] if len(price) > 2 else price[0]
            fresh = spent_in - cached
            spent["usd"] = (fresh * price[0] + cached * cached_price + spent_out * price[1]) / 1e6
        self.ctx.charge(**spent)


def price_of(
    prices: Mapping[str, tuple[float, ...]], model: str | None
) -> tuple[float, ...] | None:
    """The price of ``model``: its own, or that of the longest name it starts with (a
    dated snapshot of a model is priced as the model)."""
    if model is None:
        return None
    if model in prices:
        return prices[model]
    starts = [name for name in prices if model.startswith(name)]
    return prices[max(starts, key=len)] if starts else None


def _translated(provider: str, send: Callable[[], _T]) -> _T:
    """``send()``, its SDK error raised as cairn's (:func:`_failure`)."""
    try:
        return send()
    except Exception as exc:
        raise _failure(provider, exc) from exc


def _failure(provider: str, exc: Exception) -> Exception:
    """The SDK's error as cairn's: busy or unreachable is transient (after the server's
    ``Retry-After``, when it gave one); a request the model cannot take is permanent."""
    if isinstance(exc, TransientError | PermanentError):
        return exc
    status = getattr(exc, "status_code", None)
    if status is None:
        name = type(exc).__name__
        transport = type(exc).__module__.split(".")[0] in {
            "httpx",
            "httpx2",
            "httpcore",
            "httpcore2",
        }
        if name in {"APIConnectionError", "APITimeoutError"} or transport:
            return TransientError(f"{provider}: {name}: {exc}")  # the call broke off
        return exc
    text = str(exc)
    if status == 400 and ("context_length" in text or "too long" in text):
        return PermanentError(f"{provider}: the request is over the model's context: {text}")
    if status in RETRYABLE_STATUS:
        return TransientError(f"{provider}: HTTP {status}: {text}", retry_after_s=_retry_after(exc))
    return PermanentError(f"{provider}: HTTP {status}: {text}")


def _retry_after(exc: Exception) -> float | None:
    return retry_after(exc)


def conversation_field(kwargs: Mapping[str, Any]) -> str:
    """What holds a call's conversation: ``messages``, or the Responses API's ``input``
    (a list of items, or one string)."""
    return "input" if "messages" not in kwargs and "input" in kwargs else "messages"


def _left_out(value: Any) -> bool:
    """Whether ``value`` is an SDK's marker of an argument not given (``omit``,
    ``NOT_GIVEN``), which its helpers pass on: not part of the request."""
    return type(value).__name__ in {"Omit", "NotGiven"}


def _json_of(response: Any) -> Any:
    """A generic client's response as JSON data: a pydantic model's dump, or the data."""
    if hasattr(response, "model_dump"):
        return response.model_dump(mode="json")
    try:
        json.dumps(response)
    except (TypeError, ValueError) as exc:
        raise TypeError(
            f"ctx.model cannot record a {type(response).__name__} response: give "
            "encode= (to JSON data) and decode= (back) for it"
        ) from exc
    return response


def _plain(value: Any) -> Any:
    """JSON data of what a handler passes the SDK (dicts, or the SDK's own models)."""
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json", exclude_none=True)
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)


def _digest(message: Any) -> str:
    canonical = json.dumps(message, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()
