"""Streaming model calls through ``ctx.model``: the handler iterates the SDK's stream as
ever, while the chunks are assembled (by the SDK's own accumulators) into the message that
gets recorded once the stream has ended; a recorded streaming call is answered with a
stream made from that message. A stream that breaks off, or that the handler leaves
before its end, records nothing: the call was not complete, and a re-execution makes it
again."""

from __future__ import annotations

import functools
import json
import logging
import time
import typing
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from typing import Any

from cairn.model.failures import TransientError

log = logging.getLogger(__name__)

# How long said text may wait to be published with more: the chunks a person sees arrive
# in batches this far apart at most (and a fast stream costs a Redis write per batch).
PUBLISH_EVERY_S = 0.02


class ChunkPublisher:
    """The text a live stream says, published as it arrives — in batches at most
    ``PUBLISH_EVERY_S`` apart — to the run's chunk log (``Leases.append_chunks``), each
    chunk naming its call and where its text starts in the call's output."""

    def __init__(
        self, provider: str, head: Mapping[str, Any], publish: Callable[[Sequence[Any]], None]
    ) -> None:
        self._provider = provider
        self._head = dict(head)  # node, iteration, attempt, call
        self._publish = publish
        self._pending: list[dict[str, Any]] = []
        self._offset = 0
        self._last = time.monotonic()

    def add(self, chunk: Any) -> None:
        text = text_of(self._provider, chunk)
        if text:
            self._pending.append({**self._head, "offset": self._offset, "text": text})
            self._offset += len(text)
        if self._pending and time.monotonic() - self._last >= PUBLISH_EVERY_S:
            self.flush()

    def flush(self, *, done: bool = False) -> None:
        if done:
            self._pending.append({**self._head, "offset": self._offset, "text": "", "done": True})
        if self._pending:
            pending, self._pending = self._pending, []
            try:
                self._publish(pending)
            except Exception:  # live output is best effort: the record is what counts
                log.warning("streamed text not published", exc_info=True)
        self._last = time.monotonic()


def text_of(provider: str, chunk: Any) -> str:
    """The text a chunk (OpenAI chat), or an event (OpenAI Responses, Anthropic), adds to
    the answer."""
    kind = getattr(chunk, "type", None)
    if kind == "response.output_text.delta":
        return str(chunk.delta or "")
    if kind == "content_block_delta":
        return str(getattr(chunk.delta, "text", "") or "")
    if provider == "openai" and kind is None:
        return "".join(choice.delta.content or "" for choice in getattr(chunk, "choices", []))
    return ""


class _OpenAIAssembler:
    def __init__(self, kwargs: Mapping[str, Any]) -> None:
        from openai.lib.streaming.chat import ChatCompletionStreamState  # noqa: PLC0415

        tools = kwargs.get("tools")
        self._state: Any = (
            ChatCompletionStreamState(input_tools=tools) if tools else ChatCompletionStreamState()
        )
        self._usage: dict[str, Any] | None = None

    def add(self, chunk: Any) -> None:
        self._state.handle_chunk(chunk)
        if getattr(chunk, "usage", None) is not None:
            self._usage = chunk.usage.model_dump(mode="json")

    def final(self) -> dict[str, Any]:
        completion: dict[str, Any] = self._state.get_final_completion().model_dump(mode="json")
        for choice in completion.get("choices", []):  # the parsed extras are not the wire's
            message = choice.get("message") or {}
            message.pop("parsed", None)
            for call in message.get("tool_calls") or []:
                call.get("function", {}).pop("parsed_arguments", None)
        completion["object"] = "chat.completion"
        if self._usage is not None:
            completion["usage"] = self._usage
        return completion


class _AnthropicAssembler:
    def __init__(self, kwargs: Mapping[str, Any]) -> None:
        self._snapshot: Any = None
        self._buffers: dict[int, bytes] = {}

    def add(self, event: Any) -> None:
        from anthropic.lib.streaming._messages import accumulate_event  # noqa: PLC0415

        self._snapshot = accumulate_event(
            event=event, current_snapshot=self._snapshot, json_bufs=self._buffers
        )

    def final(self) -> dict[str, Any]:
        message: dict[str, Any] = self._snapshot.model_dump(mode="json")
        for block in message.get("content", []):
            block.pop("parsed_output", None)
        return message


# The events that end a Responses stream; each carries the whole response.
_RESPONSE_ENDS = frozenset({"response.completed", "response.incomplete", "response.failed"})


class _ResponsesAssembler:
    """The Responses API streams events and ends with one holding the whole response:
    that is the message recorded."""

    def __init__(self, kwargs: Mapping[str, Any]) -> None:
        self._final: dict[str, Any] | None = None

    def add(self, event: Any) -> None:
        if getattr(event, "type", None) in _RESPONSE_ENDS:
            self._final = event.response.model_dump(mode="json")

    def final(self) -> dict[str, Any]:
        if self._final is None:
            raise TransientError("the Responses stream ended before its response.completed event")
        return self._final


Assembler = _OpenAIAssembler | _ResponsesAssembler | _AnthropicAssembler


def assembler(provider: str, operation: str, kwargs: Mapping[str, Any]) -> Assembler:
    if operation == "responses":
        return _ResponsesAssembler(kwargs)
    return _OpenAIAssembler(kwargs) if provider == "openai" else _AnthropicAssembler(kwargs)


def replayed(
    provider: str, operation: str, final: Mapping[str, Any], kwargs: Mapping[str, Any]
) -> list[Any]:
    """The chunks (OpenAI chat) or events (OpenAI Responses, Anthropic) of a stream that
    says ``final`` — what a recorded streaming call answers with, without sending it."""
    if operation == "responses":
        return _responses_events(final)
    return _openai_chunks(final, kwargs) if provider == "openai" else _anthropic_events(final)


def _openai_chunks(final: Mapping[str, Any], kwargs: Mapping[str, Any]) -> list[Any]:
    from openai.types.chat import ChatCompletionChunk  # noqa: PLC0415

    head = {
        "id": final.get("id", "replayed"),
        "object": "chat.completion.chunk",
        "created": final.get("created", 0),
        "model": final.get("model", kwargs.get("model", "")),
    }
    choices = []
    for choice in final.get("choices", []):
        message = choice.get("message") or {}
        delta: dict[str, Any] = {"role": "assistant", "content": message.get("content")}
        calls = message.get("tool_calls") or []
        if calls:
            delta["tool_calls"] = [
                {
                    "index": position,
                    "id": call.get("id"),
                    "type": "function",
                    "function": call.get("function"),
                }
                for position, call in enumerate(calls)
            ]
        choices.append(
            {
                "index": choice.get("index", 0),
                "delta": delta,
                "finish_reason": choice.get("finish_reason"),
            }
        )
    chunks = [ChatCompletionChunk.model_validate({**head, "choices": choices})]
    wants_usage = (kwargs.get("stream_options") or {}).get("include_usage")
    if wants_usage and final.get("usage") is not None:
        chunks.append(
            ChatCompletionChunk.model_validate({**head, "choices": [], "usage": final["usage"]})
        )
    return chunks


def _anthropic_events(final: Mapping[str, Any]) -> list[Any]:
    from anthropic.types import (  # noqa: PLC0415
        RawContentBlockDeltaEvent,
        RawContentBlockStartEvent,
        RawContentBlockStopEvent,
        RawMessageDeltaEvent,
        RawMessageStartEvent,
        RawMessageStopEvent,
    )

    usage = dict(final.get("usage") or {})
    start = {**final, "content": [], "stop_reason": None, "stop_sequence": None}
    events: list[Any] = [
        RawMessageStartEvent.model_validate({"type": "message_start", "message": start})
    ]
    for index, block in enumerate(final.get("content", [])):
        if block.get("type") == "tool_use":
            opened = {**block, "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block.get("input", {}))}
        else:
            opened = {**block, "text": ""}
            delta = {"type": "text_delta", "text": block.get("text", "")}
        events += [
            RawContentBlockStartEvent.model_validate(
                {"type": "content_block_start", "index": index, "content_block": opened}
            ),
            RawContentBlockDeltaEvent.model_validate(
                {"type": "content_block_delta", "index": index, "delta": delta}
            ),
            RawContentBlockStopEvent.model_validate({"type": "content_block_stop", "index": index}),
        ]
    events += [
        RawMessageDeltaEvent.model_validate(
            {
                "type": "message_delta",
                "delta": {
                    "stop_reason": final.get("stop_reason"),
                    "stop_sequence": final.get("stop_sequence"),
                },
                "usage": {"output_tokens": usage.get("output_tokens", 0)},
            }
        ),
        RawMessageStopEvent.model_validate({"type": "message_stop"}),
    ]
    return events


def _responses_events(final: Mapping[str, Any]) -> list[Any]:
    """The events of a Responses stream that ends in ``final``: each output item opened,
    its text or arguments in one delta, closed, then the response completed — the order
    the SDK's ``responses.stream`` helper assembles from."""
    events: list[dict[str, Any]] = []

    def emit(kind: str, **fields: Any) -> None:
        events.append({"type": kind, "sequence_number": len(events), **fields})

    emit("response.created", response={**final, "status": "in_progress", "output": []})
    for index, item in enumerate(final.get("output") or []):
        kind = item.get("type")
        if kind == "message":
            emit("response.output_item.added", output_index=index, item={**item, "content": []})
            for position, part in enumerate(item.get("content") or []):
                where = {"item_id": item.get("id"), "output_index": index}
                where["content_index"] = position
                emit("response.content_part.added", part={**part, "text": ""}, **where)
                text = part.get("text", "")
                emit("response.output_text.delta", delta=text, logprobs=[], **where)
                emit("response.output_text.done", text=text, logprobs=[], **where)
                emit("response.content_part.done", part=part, **where)
        elif kind == "function_call":
            emit(
                "response.output_item.added",
                output_index=index,
                item={**item, "arguments": ""},
            )
            where = {"item_id": item.get("id"), "output_index": index}
            arguments = item.get("arguments", "")
            emit("response.function_call_arguments.delta", delta=arguments, **where)
            emit("response.function_call_arguments.done", arguments=arguments, **where)
        else:  # reasoning and the rest: whole, as they were recorded
            emit("response.output_item.added", output_index=index, item=item)
        emit("response.output_item.done", output_index=index, item=item)
    ending = final.get("status")
    ending = ending if ending in {"incomplete", "failed"} else "completed"
    emit(f"response.{ending}", response=final)
    return [_response_event(event) for event in events]


def _response_event(event: Mapping[str, Any]) -> Any:
    classes = _response_event_classes()
    return classes[event["type"]].model_validate(event)


@functools.cache
def _response_event_classes() -> dict[str, Any]:
    from openai.types.responses import ResponseStreamEvent  # noqa: PLC0415

    union = typing.get_args(ResponseStreamEvent)[0]  # Annotated[Union[...], discriminator]
    return {
        typing.get_args(cls.model_fields["type"].annotation)[0]: cls
        for cls in typing.get_args(union)
    }


class _NoResponse:
    """The HTTP response of a stream answered from the record: there is none. The SDK's
    stream helpers hold one, to close it."""

    headers: Mapping[str, str] = {}

    def close(self) -> None:
        pass

    async def aclose(self) -> None:
        pass


class _Recorded:
    """What both kinds of recorded stream hold: the SDK's stream (or, answered from the
    record, a list of chunks), what assembles and publishes it, and what to do at its
    end (never called if it broke off)."""

    def __init__(
        self,
        chunks: Any,
        assemble: Assembler | None,
        ended: Callable[[dict[str, Any]], Any] | None,
        failure: Callable[[Exception], Exception],
        live: ChunkPublisher | None = None,
    ) -> None:
        self._chunks = chunks
        self._assemble = assemble
        self._ended = ended
        self._failure = failure
        self._live = live

    @property
    def response(self) -> Any:
        """The SDK stream's HTTP response (the SDK's stream helpers close it)."""
        return getattr(self._chunks, "response", None) or _NoResponse()

    def _seen(self, chunk: Any) -> None:
        if self._assemble is not None:
            self._assemble.add(chunk)
        if self._live is not None:
            self._live.add(chunk)  # in an async handler: one Redis write per batch, on the loop

    def _broke(self) -> None:
        """The stream broke off: what it said is published still (a newer attempt's
        chunks will mark it superseded)."""
        if self._live is not None:
            self._live.flush()

    def _over(self) -> dict[str, Any] | None:
        """The assembled message, once the stream has ended (None: nothing to record)."""
        if self._live is not None:
            self._live.flush(done=True)
        if self._assemble is None or self._ended is None:
            return None
        return self._assemble.final()


class RecordedStream(_Recorded):
    """The SDK's stream, as the handler iterates it, assembled on the way; ``ended`` is
    called with the assembled message once the stream is over."""

    def __iter__(self) -> Iterator[Any]:
        try:
            for chunk in self._chunks:
                self._seen(chunk)
                yield chunk
        except Exception as exc:
            self._broke()
            raise self._failure(exc) from exc
        final = self._over()
        if final is not None and self._ended is not None:
            self._ended(final)

    def __enter__(self) -> RecordedStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        closing = getattr(self._chunks, "close", None)
        if callable(closing):
            closing()


class RecordedAsyncStream(_Recorded):
    """:class:`RecordedStream` for an async client; ``ended`` is awaited."""

    async def __aiter__(self) -> AsyncIterator[Any]:
        try:
            if hasattr(self._chunks, "__aiter__"):
                async for chunk in self._chunks:
                    self._seen(chunk)
                    yield chunk
            else:  # answered from the record: a list
                for chunk in self._chunks:
                    yield chunk
        except Exception as exc:
            self._broke()
            raise self._failure(exc) from exc
        final = self._over()
        if final is not None and self._ended is not None:
            await self._ended(final)

    async def __aenter__(self) -> RecordedAsyncStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        closing = getattr(self._chunks, "close", None)
        if callable(closing):
            result = closing()
            if hasattr(result, "__await__"):
                await result
