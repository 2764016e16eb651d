"""Server-Sent Events, read as the HTML standard's event-stream parser reads them, and a
run's stream as the clients follow it across reconnects.

The decoder takes one line at a time (without its line ending: httpx's line iterators
split on ``\\r\\n``, ``\\n`` and ``\\r``, as the format allows). A blank line dispatches
the event gathered so far; ``data`` lines join with ``\\n``; a line starting with ``:``
is a comment (the API's keep-alive); one space after the colon is dropped; the last
event id persists until another one replaces it, so a reconnect resumes after the
newest event that had one (the API's ``progress`` messages carry none on purpose).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from cairn.http.errors import ApiError

END = "end"  # the API's last message on a run's stream: the run has ended


@dataclass(frozen=True)
class ServerSentEvent:
    event: str
    data: str
    id: str | None  # the last event id in force when this one was dispatched
    retry_ms: int | None = None


@dataclass(frozen=True)
class StreamEvent:
    """One message of a run's stream: ``type`` is the event's type (``node_succeeded``,
    ...), ``progress``, ``chunk`` or ``end``; ``data`` its JSON; ``id`` what a reconnect
    resumes after."""

    type: str
    data: dict[str, Any]
    id: str | None

    @property
    def seq(self) -> int | None:
        """The event's place in the run's log (None for progress and chunks)."""
        seq = self.data.get("seq")
        return seq if isinstance(seq, int) and self.type not in ("progress", END) else None


@dataclass
class SSEDecoder:
    last_id: str | None = None
    retry_ms: int | None = None
    _event: str = ""
    _data: list[str] = field(default_factory=list)

    def feed(self, line: str) -> ServerSentEvent | None:
        """Take one line; the event it completes, if it is the blank line ending one."""
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            return None
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        elif name == "id" and "\0" not in value:  # the standard ignores an id with NUL
            self.last_id = value
        elif name == "retry" and value.isascii() and value.isdigit():
            self.retry_ms = int(value)
        return None  # other fields, and malformed ids and retries, are ignored

    def _dispatch(self) -> ServerSentEvent | None:
        event, data = self._event or "message", self._data
        self._event, self._data = "", []
        if not data:  # an id or retry alone dispatches nothing
            return None
        return ServerSentEvent(event, "\n".join(data), self.last_id, self.retry_ms)


@dataclass
class RunStream:
    """Where a client is in one run's stream — what to ask for on (re)connecting, and
    when to give up — so that the sync and async clients follow it alike."""

    run_id: str
    after: int | None = None
    max_drops: int = 5  # reconnects in a row with no event between them
    decoder: SSEDecoder = field(default_factory=SSEDecoder)
    ended: bool = False
    drops: int = 0

    def headers(self) -> dict[str, str]:
        last = self.decoder.last_id
        return {"Accept": "text/event-stream", **({"Last-Event-ID": last} if last else {})}

    def params(self) -> dict[str, int]:
        # After the first event, Last-Event-ID says where to resume (and wins on the server).
        return {"after": self.after} if self.after is not None else {}

    def feed(self, line: str) -> StreamEvent | None:
        message = self.decoder.feed(line)
        if message is None:
            return None
        self.drops = 0
        self.ended = message.event == END
        return StreamEvent(message.event, json.loads(message.data), message.id)

    def dropped(self, cause: BaseException | None) -> float:
        """The connection ended before the run's ``end``: seconds to wait before the
        reconnect, or raise once reconnecting no longer helps."""
        self.drops += 1
        if self.drops > self.max_drops:
            raise ApiError(
                f"the stream of run {self.run_id} dropped {self.drops} times in a row "
                f"without an event ({cause or 'closed by the server'})",
                status=None,
                code="unreachable",
            ) from cause
        delay_s = (self.decoder.retry_ms or 1000) / 1000
        return float(min(delay_s * 2 ** (self.drops - 1), 30.0))
