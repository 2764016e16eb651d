"""What a test scripts the stand-in with, and what it reads back: replies, faults, the
requests received."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

Provider = Literal["openai", "anthropic"]


@dataclass(frozen=True)
class ToolCall:
    """A tool the model asks to call: OpenAI gets ``arguments`` as a JSON string, Anthropic
    as the ``input`` object. An ``id`` left out is generated (``call_…`` / ``toolu_…``)."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    id: str | None = None


@dataclass(frozen=True)
class Reply:
    """What the model answers to one request.

    ``finish_reason`` defaults to ``tool_calls``/``tool_use`` when there are tool calls, else
    ``stop``/``end_turn``. The token counts default to :func:`estimate_tokens` of the
    request's message text and of the reply; they are reported as given, in each provider's
    own terms (OpenAI counts cached tokens inside ``prompt_tokens``, Anthropic does not count
    them in ``input_tokens``). ``chunk_delay_s`` paces a streamed reply; ``delay_s`` holds
    the whole answer back; ``until_released`` holds it until :meth:`ModelServer.release`
    (a client that goes away meanwhile is not answered).
    """

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    finish_reason: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    cached_tokens: int = 0
    chunk_delay_s: float = 0.0
    delay_s: float = 0.0
    until_released: bool = False


@dataclass(frozen=True)
class Fault:
    """A failure in place of a reply; set exactly one of ``status``, ``hang``,
    ``drop_after_chunks`` and ``context_length``.

    ``status``: answer with this HTTP status and an error body in the provider's format.
    ``retry_after_s``: with an error, send ``Retry-After`` (and, to OpenAI, ``x-should-retry:
    true``); fractions of a second are sent as a decimal, which both SDKs accept.
    ``hang``: read the request, then never answer, until the server stops.
    ``drop_after_chunks``: stream that many server-sent events, then close the connection
    mid-body (a non-streaming request gets its headers and half its body).
    ``context_length``: answer 400 with the provider's context-window-exceeded error.
    """

    status: int | None = None
    retry_after_s: float | None = None
    hang: bool = False
    drop_after_chunks: int | None = None
    context_length: bool = False

    def __post_init__(self) -> None:
        kinds = [
            self.status is not None,
            self.hang,
            self.drop_after_chunks is not None,
            self.context_length,
        ]
        if sum(kinds) != 1:
            raise ValueError(
                "a Fault takes exactly one of status, hang, drop_after_chunks, context_length"
            )
        if self.status is not None and not 400 <= self.status <= 599:
            raise ValueError(f"a Fault's status is an HTTP error status, not {self.status}")
        if self.retry_after_s is not None and self.status is None and not self.context_length:
            raise ValueError("retry_after_s goes with an error status")
        if self.drop_after_chunks is not None and self.drop_after_chunks < 0:
            raise ValueError("drop_after_chunks cannot be negative")


@dataclass(frozen=True)
class Request:
    """One request the server received. ``headers`` has lower-case names, as the SDKs
    differ in how they spell them."""

    provider: str
    path: str
    body: dict[str, Any]
    headers: dict[str, str]
    stream: bool
    at: float
    # Answered 429 by the stand-in's own limits (limit_in_flight, limit_requests).
    refused: bool = False


# Plays the model for the requests no script answers; None: the default reply.
Responder = Callable[[Request], Reply | Fault | None]


class ResponderFailed(Exception):
    """The responder raised, or answered something that is not a reply."""


def estimate_tokens(text: str) -> int:
    """The default token count of ``text``: about four characters a token, as the
    providers' rule of thumb has it, and never below one."""
    return max(1, math.ceil(len(text) / 4))
