"""The moment a rate-limited model call leaves: its request's units are confirmed as the
request is handed to the HTTP library's transport (httpx and the SDKs' httpx2, sync and
async; requests; urllib; aiohttp), not when the handler asked — a cold client builds
its machinery first, and a provider counts a call when it arrives. A call that would
leave too long after its units' time takes them anew and waits its turn there
(:meth:`cairn.limits.limiter.RateLimiter.confirm`). A context variable: each thread and
each task sees its own departure; a call whose request goes out some other way is
counted when it took its units, as before."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass


@dataclass
class Departure:
    """One call's confirmation, made once, by its first request to leave."""

    confirm: Callable[[], None]
    confirm_async: Callable[[], Awaitable[None]]
    done: bool = False

    def leave(self) -> None:
        if not self.done:
            self.done = True
            self.confirm()

    async def leave_async(self) -> None:
        if not self.done:
            self.done = True
            await self.confirm_async()


_departing: ContextVar[Departure | None] = ContextVar("cairn_departing", default=None)


@contextmanager
def departing(departure: Departure) -> Iterator[None]:
    """The call sent in this block confirms its units as its request leaves (once the
    HTTP libraries are patched to say so: :func:`cairn.recording.http.install`)."""
    token = _departing.set(departure)
    try:
        yield
    finally:
        _departing.reset(token)


def leave() -> None:
    """A request leaves now (the patched libraries call this just before sending)."""
    departure = _departing.get()
    if departure is not None:
        departure.leave()


async def leave_async() -> None:
    departure = _departing.get()
    if departure is not None:
        await departure.leave_async()
