"""The embedded default's broker: a queue and worker threads inside this process.

Used when no ``CAIRN_BROKER_URL`` is set (``cairn demo``, laptops, unit tests). It has the
same delivery contract as the real broker — at least once, in any order — because the
same runner executes each message; losing the process loses the queue, which the
scheduler's relay and recovery refill from the database.

It has one set of threads, so it ignores a node's ``queue``: every node runs here,
whatever queue it names (the embedded default is one process, with no GPU worker apart).
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Sequence
from typing import Any

from cairn import clock
from cairn.lease.waits import delivered
from cairn.model.messages import NodeMessage

log = logging.getLogger(__name__)

_STOP = object()


class InProcessBroker:
    def __init__(self, concurrency: int = 2) -> None:
        self.concurrency = concurrency
        self._queue: queue.Queue[Any] = queue.Queue()
        self._threads: list[threading.Thread] = []

    def publish(self, messages: Sequence[NodeMessage]) -> bool:
        """Queue messages for this process's worker threads. A process without worker
        threads (a client) does not take them: the worker's relay will."""
        if not self._threads:
            return False
        for message in messages:  # siblings as messages of their own: nothing to save here
            for each in message.spread():
                self._queue.put((each.to_dict(), clock.wall()))
        return True

    def backlog(self, queue: str | None = None) -> int | None:
        """Every queue's messages: they all wait in the one queue (see the module)."""
        return self._queue.qsize()

    def start(self, handle: Callable[[dict[str, Any]], object]) -> None:
        for index in range(self.concurrency):
            thread = threading.Thread(
                target=self._work, args=(handle,), name=f"cairn-worker-{index}", daemon=True
            )
            thread.start()
            self._threads.append(thread)

    def _work(self, handle: Callable[[dict[str, Any]], object]) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            body, published_at = item
            try:
                with delivered(published_at):
                    handle(body)
            except Exception:  # one bad message must not kill the worker thread
                log.exception("node message failed: %r", body)

    def stop(self) -> None:
        for _ in self._threads:
            self._queue.put(_STOP)
        for thread in self._threads:
            thread.join(timeout=5)
        self._threads.clear()

    @property
    def pending(self) -> int:
        return self._queue.qsize()
