"""A rate bucket and what an operator sees of one (see :mod:`cairn.engine.rates`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from cairn.model.definition import Rate


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
