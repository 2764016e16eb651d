"""The wall clock of this process, and the rule for using it.

No liveness decision compares timestamps written by two different clocks: a lease
expires by Redis's clock (``PX``), a worker stops trusting its lease by its own
monotonic clock, and everything PostgreSQL compares (dispatch times, timers, outbox and
ledger ages) is stamped and compared by PostgreSQL's clock. What remains on this
process's wall clock is for people and for one-host measurements: log lines, the
publish header of the lease-wait histogram, webhook signature times, CLI views.

Every wall-clock read in cairn goes through :func:`wall` so that a test can shift it
(``CAIRN_CLOCK_SKEW_S``, tests only: libfaketime also freezes timed waits, so the skew
is injected here instead) and prove that a worker whose clock is minutes off neither
steals a live lease nor loses its own.
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime

log = logging.getLogger(__name__)

_skew_s = 0.0


def skew(seconds: float) -> None:
    """Shift this process's wall clock by ``seconds`` (tests only)."""
    global _skew_s  # noqa: PLW0603 - process-wide, set once from settings
    if seconds:
        log.warning("this process's wall clock is shifted by %+.3f s (CAIRN_CLOCK_SKEW_S)", seconds)
    _skew_s = float(seconds)


def wall() -> float:
    """Seconds since the epoch by this process's wall clock."""
    return time.time() + _skew_s


def utcnow() -> datetime:
    return datetime.fromtimestamp(wall(), UTC)
