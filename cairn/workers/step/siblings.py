"""The siblings a message carried (:mod:`cairn.workers.step.grouping`), while its worker
runs them: taken one at a time as it goes, or published — spilled — all at once, each a
message of its own, by whoever comes first of

- the spill timer, when the group has run for ``CAIRN_BRANCH_SPILL_AFTER`` (a slow
  branch, a model call, does not hold its siblings back: they run elsewhere meanwhile);
- the worker, once it will run no more of them (the continuation's bounds, an error, a
  worker stopping).

A sibling is taken or spilled under one lock: never both. One spill timer thread per
process, started with the first group it is given.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import ClassVar

from cairn.model.messages import NodeMessage

log = logging.getLogger(__name__)

Publish = Callable[[Sequence[NodeMessage]], None]


class Siblings:
    """The siblings of one delivered message still to run here."""

    def __init__(self, lead: NodeMessage, publish: Publish) -> None:
        self.lead = lead
        self._waiting = deque(sibling.of(lead) for sibling in lead.siblings)
        self._publish = publish
        self._lock = threading.Lock()
        self.spilled = 0  # published on their own: never taken, or taken and not run here
        self.ran = 0  # taken and run here

    def take(self) -> NodeMessage | None:
        """The next sibling to run here; None once none is left (run, or spilled)."""
        with self._lock:
            if not self._waiting:
                return None
            self.ran += 1
            return self._waiting.popleft()

    def alone(self, sibling: NodeMessage) -> None:
        """Publish one sibling taken, not to be run here, on its own."""
        with self._lock:
            self.ran -= 1
            self.spilled += 1
        self._publish([sibling])

    def counts(self) -> dict[str, int]:
        """What became of them, for the fleet's counters: run here (``carried``), or
        published each on its own (``spilled``: not begun in time, or not to run here)."""
        with self._lock:
            return {"branches_carried": self.ran, "branches_spilled": self.spilled}

    def spill(self) -> int:
        """Publish every sibling not taken yet, each a message of its own; how many. A
        publish that fails leaves their rows to the relay (the outbox logs it)."""
        with self._lock:
            waiting, self._waiting = list(self._waiting), deque()
            self.spilled += len(waiting)
        if waiting:
            self._publish(waiting)
        return len(waiting)


class SpillTimer:
    """Spills each group it is given once its time is up, on a thread of its own."""

    _process: ClassVar[tuple[int, SpillTimer] | None] = None
    _process_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self) -> None:
        self._due: list[tuple[float, int, Siblings]] = []
        self._order = itertools.count()
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None

    @classmethod
    def of_process(cls) -> SpillTimer:
        """This process's timer (a forked child makes its own: threads do not fork)."""
        with cls._process_lock:
            mine = cls._process
            if mine is None or mine[0] != os.getpid():
                mine = cls._process = (os.getpid(), cls())
            return mine[1]

    def arm(self, siblings: Siblings, after_s: float) -> None:
        """Spill ``siblings`` ``after_s`` from now (what is left of them by then)."""
        with self._changed:
            heapq.heappush(self._due, (time.monotonic() + after_s, next(self._order), siblings))
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._spill_when_due, name="cairn-spill", daemon=True
                )
                self._thread.start()
            if self._due[0][2] is siblings:  # due before whatever the thread waits for
                self._changed.notify()

    def _spill_when_due(self) -> None:
        while True:
            with self._changed:
                while True:
                    wait = self._due[0][0] - time.monotonic() if self._due else None
                    if wait is not None and wait <= 0:
                        break
                    self._changed.wait(wait)
                _due, _order, siblings = heapq.heappop(self._due)
            try:
                spilled = siblings.spill()
            except Exception:  # the rows stay unsent: the relay publishes them
                log.warning("spilling a group's siblings failed", exc_info=True)
                continue
            if spilled:
                log.debug("%d sibling(s) spilled: their group ran past its time", spilled)
