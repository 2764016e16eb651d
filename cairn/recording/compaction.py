"""Context that fits: a node's ``context: {max_tokens, summarize, keep, pin}`` keeps its
model calls within a budget by compacting older messages before a call is sent.

The handler goes on passing its whole conversation; when the messages of a call come to
more than ``max_tokens`` (estimated, four characters a token), the ones between the
pinned (system and developer messages, the first user message — the task — and those
``pin`` says) and the last ``keep`` are handed to ``summarize``, whose messages are sent
in their place. Within an execution, a summary stands for what it covered: the next
call reuses it and summarizes again — the summary and what came since — only when the
budget is exceeded again. The kept tail never starts with a tool's result, which a
provider refuses without the call that asked for it.

What was sent is recorded as the call's messages; the whole conversation the handler
passed is recorded beside it (``history``), so the full history stays readable for
audit. A summary a model writes through ``ctx.model`` is a recorded call of its own: a
replay answers it from the record, and compacts the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cairn.model.definition import ContextPolicy

if TYPE_CHECKING:
    from cairn.workers.context import StepContext

log = logging.getLogger(__name__)

PINNED_ROLES = frozenset({"system", "developer"})


def estimated_tokens(messages: Sequence[Any]) -> int:
    """A rough count of the tokens of ``messages`` (four characters each)."""
    return len(json.dumps(list(messages), default=str)) // 4


@dataclass(frozen=True)
class Split:
    """A conversation cut for compaction: the pinned messages before the kept tail,
    the older ones to summarize (by position), and the tail."""

    pinned: list[Any]
    older: list[int]
    tail: list[Any]


@dataclass(frozen=True)
class Summary:
    """A summary made in this execution: the older messages it covered (as sent to
    ``summarize``, by digest) and the messages that stand for them."""

    covered: tuple[str, ...]
    messages: list[Any]


class Compactor:
    """The compaction of one execution's model calls, under its node's policy."""

    def __init__(self, policy: ContextPolicy, digest: Callable[[Any], str]) -> None:
        self.policy = policy
        self._digest = digest
        self._summary: Summary | None = None
        self._busy = False  # summarizing: the summarizer's own model calls are not compacted

    def compact(self, ctx: StepContext, messages: Sequence[Any]) -> list[Any] | None:
        """The messages to send in place of ``messages`` (None: send them as they are)."""
        planned = self._planned(messages)
        if planned is None or isinstance(planned, list):
            return planned
        summarize = self.policy.summarize.resolve()
        if inspect.iscoroutinefunction(summarize):
            raise TypeError(
                f"{ctx.node}: context.summarize {self.policy.summarize.path} is async; a "
                "sync client's calls need a sync summarize"
            )
        with self._summarizing():
            made = summarize(ctx, list(planned.given))
        return self._applied(planned, made)

    async def compact_async(self, ctx: StepContext, messages: Sequence[Any]) -> list[Any] | None:
        """:meth:`compact` for an async client: an async ``summarize`` is awaited (a sync
        one runs on a thread, so that its own calls may block)."""
        planned = self._planned(messages)
        if planned is None or isinstance(planned, list):
            return planned
        summarize = self.policy.summarize.resolve()
        with self._summarizing():
            if inspect.iscoroutinefunction(summarize):
                made = await summarize(ctx, list(planned.given))
            else:
                made = await asyncio.to_thread(summarize, ctx, list(planned.given))
        return self._applied(planned, made)

    def _planned(self, messages: Sequence[Any]) -> list[Any] | _Pending | None:
        # The summarizer's own model calls are not compacted.
        return None if self._busy else self._plan(messages)

    @contextlib.contextmanager
    def _summarizing(self) -> Iterator[None]:
        self._busy = True
        try:
            yield
        finally:
            self._busy = False

    def _plan(self, messages: Sequence[Any]) -> list[Any] | _Pending | None:
        """None if ``messages`` fit; the messages to send if an earlier summary makes them
        fit; else what to summarize."""
        budget = self.policy.max_tokens
        if estimated_tokens(messages) <= budget:
            return None
        split = split_for_compaction(messages, self.policy.keep, self._pinned)
        older = [messages[i] for i in split.older]
        if not older:
            log.warning("messages over the context budget with nothing to compact: sent")
            return None
        digests = tuple(self._digest(m) for m in older)
        known = self._summary
        if known is not None and digests[: len(known.covered)] == known.covered:
            since = older[len(known.covered) :]
            reused = [*split.pinned, *known.messages, *since, *split.tail]
            if estimated_tokens(reused) <= budget:
                return reused
            return _Pending(split, digests, [*known.messages, *since])
        return _Pending(split, digests, older)

    def _applied(self, planned: _Pending, made: object) -> list[Any]:
        summary = _as_messages(made, self.policy.summarize.path)
        self._summary = Summary(planned.covered, summary)
        sent = [*planned.split.pinned, *summary, *planned.split.tail]
        if estimated_tokens(sent) > self.policy.max_tokens:
            log.warning(
                "compacted messages still over the context budget of %d tokens: sent",
                self.policy.max_tokens,
            )
        return sent

    def _pinned(self, message: Any) -> bool:
        pin = self.policy.pin
        return pin is not None and bool(pin.resolve()(message))


@dataclass(frozen=True)
class _Pending:
    split: Split
    covered: tuple[str, ...]  # the digests of the older messages the summary covers
    given: list[Any]  # what summarize is handed


def split_for_compaction(
    messages: Sequence[Any], keep: int, pinned: Callable[[Any], bool] = lambda _: False
) -> Split:
    """Cut ``messages`` into the pinned ones before the tail, the older ones (by
    position) and the last ``keep`` — the tail moved back past any tool result it
    would start with, so that a result keeps the call that asked for it."""
    start = max(0, len(messages) - keep)
    while 0 < start < len(messages) and is_tool_result(messages[start]):
        start -= 1
    first_user = next(
        (i for i, m in enumerate(messages) if _field(m, "role") == "user"),
        None,
    )
    pins, older = [], []
    for position in range(start):
        message = messages[position]
        if _field(message, "role") in PINNED_ROLES or position == first_user or pinned(message):
            pins.append(message)
        else:
            older.append(position)
    return Split(pins, older, list(messages[start:]))


def is_tool_result(message: Any) -> bool:
    """A tool's answer: OpenAI chat's ``tool`` role, a Responses ``function_call_output``
    item, or an Anthropic user turn made of ``tool_result`` blocks."""
    if _field(message, "role") == "tool" or _field(message, "type") == "function_call_output":
        return True
    content = _field(message, "content")
    return (
        _field(message, "role") == "user"
        and isinstance(content, list)
        and any(_field(block, "type") == "tool_result" for block in content)
    )


def _field(message: Any, name: str) -> Any:
    if isinstance(message, Mapping):
        return message.get(name)
    return getattr(message, name, None)


def _as_messages(made: object, path: str) -> list[Any]:
    """What ``summarize`` returned, as messages: a list of them, one, or a text (sent as
    a user message saying it summarizes the conversation so far)."""
    if isinstance(made, str):
        return [{"role": "user", "content": f"Summary of the conversation so far:\n{made}"}]
    if isinstance(made, Mapping):
        return [dict(made)]
    if isinstance(made, list | tuple):
        return list(made)
    raise TypeError(
        f"context.summarize {path} returned {type(made).__name__}: it returns the messages "
        "that stand for the ones it was given (a list, one message, or a text)"
    )
