"""``ctx.model``'s recorded clients: an official ``openai`` or ``anthropic`` client (sync or
async), or any model function, wrapped in one with the same interface whose calls are
recorded (:class:`~cairn.recording.calls.ModelCalls`) as they complete, answered from the
record when they are made again, taken from their rate limits' buckets, and charged to
the node's budget. The step hands in what the calls need of it (:class:`Caller`), not
itself."""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from cairn.limits.departures import departing
from cairn.limits.limiter import RateLimiter, Ticket, retry_after, status_of
from cairn.limits.rates import reservation
from cairn.model.failures import BudgetExceeded, PermanentError, TransientError
from cairn.model.usage import usage_counts
from cairn.recording.calls import (
    ModelCalls,
    ModelRequest,
    conversation_field,
    left_out,
    plain,
)
from cairn.recording.http import install
from cairn.recording.scope import suspended
from cairn.recording.streams import (
    ChunkPublisher,
    RecordedAsyncStream,
    RecordedStream,
    assembler,
    replayed,
)

if TYPE_CHECKING:
    from cairn.workers.context import StepContext

log = logging.getLogger(__name__)

_T = TypeVar("_T")

# The statuses a provider answers that are worth sending again.
RETRYABLE_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504, 529})

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
        return {"value": to_json(response), "usage": plain(read) if read else None}

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
    if given is not None and not left_out(given):
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
                install()  # a departure is seen as the request leaves
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
                install()  # a departure is seen as the request leaves
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
