"""A handler's side of rate limits (see :mod:`cairn.limits.rates`): before a model call
goes out, its request and tokens are taken from each bucket of its node — asleep in the
handler meanwhile, its lease kept alive by the heartbeat; once answered, the buckets are
charged what the provider reported; a 429 pauses the call's buckets fleet-wide for the
server's ``Retry-After`` and the call waits its turn again (up to ``max_refusals``
times, then it fails as before: transient, retried by the node's policy)."""

from __future__ import annotations

import asyncio
import email.utils
import logging
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from cairn.limits.departures import Departure

if TYPE_CHECKING:
    from cairn.limits.rates import Rates  # the port, handed in by the runner
from cairn.limits.rates import Bucket
from cairn.model.failures import Cancelled, StaleClaim
from cairn.model.usage import usage_counts
from cairn.reconnect import store_through_outages

log = logging.getLogger(__name__)

# A waiting call looks this often whether its node was cancelled or its lease lost.
LOOK_EVERY_S = 0.25


@dataclass(frozen=True)
class Ticket:
    """One try of a call: its units in the buckets."""

    call: str
    tokens: int
    waited_s: float


@dataclass
class RateLimiter:
    """The rate buckets of one execution's model calls."""

    rates: Rates
    buckets: Sequence[Bucket]
    default_output_tokens: int = 1024
    max_refusals: int = 5
    default_pause_s: float = 1.0
    reconnect_within: float = 30.0
    # Whether to stop waiting: the node was cancelled, or its lease lost (None: never).
    cancelled: Callable[[], bool] | None = None
    lease_lost: Callable[[], bool] | None = None
    names: list[str] = field(init=False)

    def __post_init__(self) -> None:
        self.names = [bucket.name for bucket in self.buckets]

    def _through(self, what: str, call: Callable[[], Any]) -> Any:
        return store_through_outages(self.reconnect_within, what, call)

    def _take(self, call: str, tokens: int) -> float:
        return float(
            self._through(
                f"taking from the rate buckets {', '.join(self.names)}",
                lambda: self.rates.take(self.buckets, call, tokens),
            )
        )

    def _stop(self, call: str) -> None:
        """Give the units back and raise, if the node should stop waiting."""
        why: Exception | None = None
        if self.lease_lost is not None and self.lease_lost():
            why = StaleClaim("the claim was lost while a model call waited for its rate limit")
        elif self.cancelled is not None and self.cancelled():
            why = Cancelled("cancelled while a model call waited for its rate limit")
        if why is not None:
            self.give_back(call)
            raise why

    def admit(self, tokens: int) -> Ticket:
        """Wait until the buckets allow a call of ``tokens``; its ticket."""
        call, began = uuid.uuid4().hex, time.monotonic()
        self._turn(call, tokens)
        return Ticket(call, tokens, time.monotonic() - began)

    async def admit_async(self, tokens: int) -> Ticket:
        call, began = uuid.uuid4().hex, time.monotonic()
        await self._turn_async(call, tokens)
        return Ticket(call, tokens, time.monotonic() - began)

    def confirm(self, ticket: Ticket) -> None:
        """The call's request leaves now: its units confirmed — or, their time too long
        past (:func:`cairn.limits.rate_buckets.leave_within_ms`), taken anew, waiting its turn."""
        self._turn(ticket.call, ticket.tokens)

    async def confirm_async(self, ticket: Ticket) -> None:
        await self._turn_async(ticket.call, ticket.tokens)

    def departure(self, ticket: Ticket) -> Departure:
        """What confirms ``ticket`` as its request leaves (:mod:`cairn.limits.departures`)."""
        return Departure(partial(self.confirm, ticket), partial(self.confirm_async, ticket))

    def _turn(self, call: str, tokens: int) -> None:
        """Take (or confirm) ``call``'s units, sleeping until their time as told."""
        while (wait := self._take(call, tokens)) > 0:
            deadline = time.monotonic() + wait
            while (left := deadline - time.monotonic()) > 0:
                self._stop(call)
                time.sleep(min(left, LOOK_EVERY_S))
            self._stop(call)

    async def _turn_async(self, call: str, tokens: int) -> None:
        while (wait := await asyncio.to_thread(self._take, call, tokens)) > 0:
            deadline = time.monotonic() + wait
            while (left := deadline - time.monotonic()) > 0:
                self._stop(call)
                await asyncio.sleep(min(left, LOOK_EVERY_S))
            self._stop(call)

    def settle(self, ticket: Ticket, usage: Mapping[str, Any] | None) -> None:
        """Charge what the provider reported (no usage reported: the reservation stays)."""
        if not usage:
            return
        spent_in, spent_out, _cached = usage_counts(usage)
        self._settle(ticket, spent_in + spent_out)

    def _settle(self, ticket: Ticket, tokens: int) -> None:
        if not any(bucket.tokens is not None for bucket in self.buckets):
            return
        try:
            self.rates.settle(self.names, ticket.call, tokens)
        except Exception:  # its reservation stands: the limit errs on the safe side
            log.warning(
                "charging %s's usage to its rate buckets failed", ticket.call, exc_info=True
            )

    def give_back(self, call: str) -> None:
        try:
            self.rates.give_back(self.names, call)
        except Exception:  # it frees itself one period later
            log.warning("giving back the rate units of %s failed", call, exc_info=True)

    def refused(self, ticket: Ticket, exc: Exception, refusals: int) -> bool:
        """The provider answered 429: pause the buckets fleet-wide for its
        ``Retry-After`` (else a default, doubled at each refusal of this call) and free
        the call's tokens — its request counted, the provider saw it. True: wait and
        send it again; False: it was refused too often."""
        after = retry_after(exc)
        pause = after if after is not None else self.default_pause_s * 2 ** (refusals - 1)
        log.warning(
            "a model call was refused (429): rate buckets %s paused for %.1fs",
            ", ".join(self.names),
            pause,
        )
        try:
            self.rates.pause(self.names, pause)
        except Exception:
            log.warning("pausing the rate buckets %s failed", self.names, exc_info=True)
        self._settle(ticket, 0)
        return refusals <= self.max_refusals

    def failed(self, ticket: Ticket, answered: bool) -> None:
        """The call failed otherwise: answered with an error, it used no tokens (freed);
        broken off, the provider may have worked on it (the reservation stays)."""
        if answered:
            self._settle(ticket, 0)


def status_of(exc: BaseException) -> int | None:
    status = getattr(exc, "status_code", None)
    return status if isinstance(status, int) else None


def retry_after(exc: BaseException) -> float | None:
    """A refusal's ``Retry-After`` (``retry-after-ms``; seconds, or an HTTP date), in
    seconds from now; None if it gave none."""
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None) or {}
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            return max(0.0, float(value) * scale)
        except ValueError:
            pass
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            continue
        return max(0.0, when.timestamp() - time.time())
    return None
