"""Rate limits: ``rate: {key, requests: 600/min, tokens: 200000/min}`` on a task or a
workflow. Every model call a handler makes through ``ctx.model`` under a limit first
takes one request and a reservation of tokens from each bucket that applies (the bucket
is per key value, per namespace, shared by the fleet), waiting — asleep in the handler,
its lease kept by its heartbeat — until they allow it. Once the call is answered, its
bucket is charged what the provider reported it used instead of the reservation, so the
limit tracks the provider's own count. A replayed (recorded) call takes nothing.

A bucket holds ``amount`` per period: a unit taken comes back one period after it was
taken — never more than ``amount`` in any window of the period (a bucket refilled at a
steady pace from full would let twice that through some windows, which a provider
that counts by window refuses). A caller that finds the bucket empty is given the
earliest time its units are free and the units at that time, in the order callers came
(FIFO, no polling); when its time comes it confirms them with one more call.

A provider counts a call when it arrives, not when its units were taken: a unit comes
back one period and a guard after it was taken, and a call must leave within half that
guard of its units' time — it confirms them again at the moment its request leaves (the
HTTP libraries' send), and one confirming later than that (a cold client building its
machinery, a paused process) has its units taken again, in the order callers come. So a
window at the provider never holds more than the limit, however late a call is sent.

A provider's 429 pauses each of the call's buckets fleet-wide until its ``Retry-After``:
a caller holding units for a time within the pause is given a later time when it
confirms, and new callers queue after the pause.

The backends: :mod:`cairn.limits.rate_buckets` (Redis, Lua; the memory twin). One
contract suite holds them together (:class:`cairn.testing.rates_contract.RatesContract`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from cairn.limits.concurrency import pool_name
from cairn.model.definition import Rate, TaskNode, WorkflowDefinition


@dataclass(frozen=True)
class Bucket:
    """One rate key's bucket (``<namespace>/<key>[=<value>]``) and its limits."""

    name: str
    requests: Rate | None = None
    tokens: Rate | None = None


@dataclass(frozen=True)
class BucketReport:
    """A bucket as an operator sees it, now: what the window holds and has free."""

    bucket: str
    requests_limit: int | None
    requests_period_s: float | None
    requests_used: int  # taken within the last period
    tokens_limit: int | None
    tokens_period_s: float | None
    tokens_used: int
    waiting: int  # callers holding units for a time still to come (asleep until then)
    paused_for_s: float  # a provider's 429 holds the key this much longer (0: not paused)

    @property
    def requests_available(self) -> int | None:
        if self.requests_limit is None:
            return None
        return max(0, self.requests_limit - self.requests_used)

    @property
    def tokens_available(self) -> int | None:
        if self.tokens_limit is None:
            return None
        return max(0, self.tokens_limit - self.tokens_used)

    def to_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "requests_available": self.requests_available,
            "tokens_available": self.tokens_available,
        }


def reservation(estimated_prompt: int, kwargs: Mapping[str, Any], default_output: int) -> int:
    """The tokens a call takes before it is sent: its prompt's estimate plus the most it
    may answer (``max_tokens``, ``max_completion_tokens``, ``max_output_tokens``), or
    ``default_output`` when it does not say — as providers count a request against a
    token limit when it arrives."""
    for name in ("max_tokens", "max_completion_tokens", "max_output_tokens"):
        value = kwargs.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return estimated_prompt + value
    return estimated_prompt + default_output


class Rates(Protocol):
    """Rate buckets, fleet-wide, by the backend's own clock (Redis's)."""

    def take(self, buckets: Sequence[Bucket], call: str, tokens: int) -> float:
        """A request and ``tokens`` of each bucket for ``call`` (an id unique to the
        call's try). 0: taken, go now. Else the seconds to wait: the units are held for
        ``call`` at that time — take again with the same ``call`` then, to confirm them
        (0), or be given a later time (a pause came meanwhile). Taking again once the
        units' time is past by more than half their guard (:func:`cairn.limits.rate_buckets.
        leave_within_ms`) is too late to count for then: they are taken anew. A
        reservation over a bucket's whole limit waits for an empty window and takes its
        limit."""
        ...

    def settle(self, buckets: Sequence[str], call: str, tokens: int) -> None:
        """``call`` used ``tokens`` (what the provider reported): its reservation in each
        bucket becomes that — a refund, or an extra charge the next callers wait for."""
        ...

    def give_back(self, buckets: Sequence[str], call: str) -> None:
        """``call`` was never sent: its units are free again."""
        ...

    def pause(self, buckets: Sequence[str], seconds: float) -> None:
        """A provider refused a call (429): nobody takes from these buckets for
        ``seconds`` (a pause already longer stays)."""
        ...

    def report(self, names: Sequence[str] | None = None) -> list[BucketReport]:
        """These buckets (None: every bucket in use), as they stand."""
        ...


def buckets_for(
    definition: WorkflowDefinition,
    node: TaskNode,
    *,
    namespace: str,
    state: Mapping[str, Any],
    run_input: Mapping[str, Any],
    owner: str | None = None,
) -> list[Bucket]:
    """The buckets each model call of ``node``'s handler takes from: its own limits, and
    its workflow's (a key both name: the node's limit of each kind, else the workflow's).
    Each bucket is in ``owner``'s namespace, the definition's (None: the run's), as
    :func:`~cairn.limits.concurrency.pools_for` says why."""
    found: dict[str, Bucket] = {}
    for limit in (*node.rate, *definition.rate):
        name = pool_name(owner or namespace, limit, state, run_input)
        known = found.get(name)
        found[name] = (
            Bucket(name, limit.requests, limit.tokens)
            if known is None
            else Bucket(name, known.requests or limit.requests, known.tokens or limit.tokens)
        )
    return sorted(found.values(), key=lambda bucket: bucket.name)


__all__ = ["Bucket", "BucketReport", "Rates", "buckets_for", "reservation"]
