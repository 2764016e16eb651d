"""A clock a test moves by hand: expiry tested by advancing time, not by sleeping."""

from __future__ import annotations


class FakeClock:
    """A monotonic clock (seconds) that stands still until told to move; pass it where a
    clock is injected (``MemoryLeases(clock=...)``)."""

    def __init__(self, start: float = 1_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> float:
        if seconds < 0:
            raise ValueError("a clock does not go back")
        self.now += seconds
        return self.now
