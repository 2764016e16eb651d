"""A stand-in for the OpenAI and Anthropic model APIs, for tests and the demo.

:class:`ModelServer` is a small local HTTP server that speaks enough of the OpenAI
chat-completions (and Responses) wire format and of the Anthropic messages wire format for
the providers' official SDKs to work against it unchanged: plain replies, tool calls, usage,
server-sent-event streaming, and the failures a real provider produces — rate limits, server
errors, an exceeded context window, a request that never gets an answer, a stream cut off
half way. Tests script what the "model" answers, and read back what it was asked.

Point each SDK at it through ``base_url``; ``max_retries=0`` keeps a scripted fault from
being retried behind the test's back::

    from anthropic import Anthropic
    from openai import OpenAI

    from cairn.testing.model_server import Fault, ModelServer, Reply, ToolCall

    with ModelServer() as server:
        gpt = OpenAI(base_url=server.openai_base_url, api_key="test", max_retries=0)
        claude = Anthropic(base_url=server.anthropic_base_url, api_key="test", max_retries=0)

        # The model first asks for a tool, then answers once it has seen the result.
        server.script(
            Reply(tool_calls=(ToolCall("get_weather", {"city": "Oslo"}),)),
            Reply(text="It is raining in Oslo.", input_tokens=120, output_tokens=8),
        )
        first = gpt.chat.completions.create(model="gpt-test", messages=[...], tools=[...])
        first.choices[0].message.tool_calls[0].function.arguments  # '{"city": "Oslo"}'
        final = gpt.chat.completions.create(model="gpt-test", messages=[...])
        final.choices[0].message.content  # 'It is raining in Oslo.'

        server.script(Fault(status=429, retry_after_s=2))  # the next request is rate limited
        claude.messages.create(model="claude-test", max_tokens=64, messages=[...])  # RateLimitError
        server.requests[0].body["messages"]  # what the model was sent, exactly

Endpoints: ``POST /v1/chat/completions`` and ``POST /v1/responses`` (OpenAI; the SDK's
``base_url`` is ``<url>/v1``) and ``POST /v1/messages`` (Anthropic; ``base_url`` is ``<url>``).
Scripted replies and faults are consumed in order by the next requests, whichever provider
they are for. When none is queued, the server's *responder* is asked, if it has one: a
callable ``(Request) -> Reply | Fault | None`` that plays the model from what the request
says (``ModelServer(responder=...)``; ``examples/calculator_model.py`` is one). Failing
that (no responder, or it answered ``None``) a request gets the default reply
``"reply <n>"``, ``n`` counting the default replies given so far, so that a test can tell
turns apart. A responder that raises is answered as a 500 naming the exception. A reply's
finish reason may be given in either provider's words (``"tool_calls"`` or ``"tool_use"``):
it is translated for the provider asked.

Run ``python -m cairn.testing.model_server --port 8765 [--responder module:function]`` to
serve until interrupted.

The package is a server: it imports neither SDK, nor anything else from cairn.
"""

from cairn.testing.model_server.server import ModelServer
from cairn.testing.model_server.values import (
    Fault,
    Reply,
    Request,
    Responder,
    ToolCall,
    estimate_tokens,
)

__all__ = [
    "Fault",
    "ModelServer",
    "Reply",
    "Request",
    "Responder",
    "ToolCall",
    "estimate_tokens",
]
