"""Logging a failure that repeats, once: the first time in full, then a line a minute.

A process that loops — a scheduler's pass, a schedule's tick, a refresh of a view — meets
the same fault on every turn until someone fixes it: the database not migrated, the
handlers' package not installed. Logged each time, it buries everything else (a
traceback twice a second); logged once, a reader tailing the log later never sees it.
:class:`Repeats` logs the first occurrence of a fault (per key) with its traceback, then
at most one line per :data:`EVERY_S` saying it still happens and how often, and a line
when it stops.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Hashable

EVERY_S = 60.0


class Repeats:
    """One logger's throttle, by key (what failed: a schedule, a pass, a view)."""

    def __init__(self, log: logging.Logger, every_s: float = EVERY_S) -> None:
        self.log = log
        self.every_s = every_s
        self._seen: dict[Hashable, tuple[float, int]] = {}  # key → (last logged, since then)
        self._lock = threading.Lock()

    def failed(
        self,
        key: Hashable,
        message: str,
        error: BaseException,
        *,
        level: int = logging.ERROR,
        traceback: bool = True,
    ) -> bool:
        """Log ``message: error`` if it is ``key``'s first failure or the last line is
        older than ``every_s``; True if it was logged. ``traceback``: on the first line
        only (a fault whose message says it all, such as a definition's, goes without)."""
        now = time.monotonic()
        with self._lock:
            seen = self._seen.get(key)
            if seen is not None and now - seen[0] < self.every_s:
                self._seen[key] = (seen[0], seen[1] + 1)
                return False
            self._seen[key] = (now, 0)
        if seen is None:
            self.log.log(level, "%s: %s", message, error, exc_info=error if traceback else None)
        else:
            self.log.log(
                level,
                "%s: %s (still failing: %d more time(s) in the last %.0f s)",
                message,
                error,
                seen[1] + 1,
                now - seen[0],
            )
        return True

    def recovered(self, key: Hashable, message: str) -> None:
        """``key`` succeeded: say so if it had failed, and forget it."""
        with self._lock:
            seen = self._seen.pop(key, None)
        if seen is not None:
            self.log.info("%s", message)

    def failing(self, key: Hashable) -> bool:
        with self._lock:
            return key in self._seen
