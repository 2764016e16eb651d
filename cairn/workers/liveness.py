"""Noticing a deaf worker: one that lives but no longer takes messages from the broker.

Celery workers on Redis have been seen to stop consuming after a reconnect, without an
error, while still answering ``celery inspect ping``: control messages arrive on another
channel than tasks. So this check goes through the consumer that takes node messages:

- Every ``CAIRN_LIVENESS_INTERVAL`` seconds the worker's main process publishes a small
  JSON ping (task ``cairn.ping``) to a queue of its own, which its task consumer
  consumes beside the node queues: same connection, channel and prefetch window.
- The ping never reaches the pool: its strategy, which the consumer runs on receipt,
  acks it and records the time in the liveness file. No result, no task event, and
  JSON like every message (the consumer's accept list refuses anything else).
- ``cairn probe worker`` reads the file: older than its max age means deaf.

A worker whose prefetch slots all hold running nodes does not fetch (prefetch 1, late
acks), so its ping waits in the queue. That is work, not deafness: the file then says
"busy", and the nodes' leases and heartbeats watch whether the work progresses. A worker
that cannot reach the broker stops refreshing the file as well; the probe's max age
decides how long an outage it rides out before Kubernetes restarts it.

The ping queue expires (kombu's ``x-expires``, on Redis since kombu 5.7) once nothing
publishes to it, so a worker that died deaf leaves its pings behind only briefly.
"""

from __future__ import annotations

import json
import logging
import math
import os
import secrets
import socket
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from celery import bootsteps
from celery.worker import state as worker_state
from kombu.entity import Exchange, Queue

from cairn.config import Settings

log = logging.getLogger(__name__)

PING_TASK = "cairn.ping"
# A ping not consumed after this many intervals (while the worker is free) is presumed
# lost, e.g. with a Redis that restarted empty, and sent again.
RESEND_PERIODS = 3
MAX_AGE_PERIODS = 3  # the probe's default max age, in intervals
QUEUE_EXPIRES_MIN_S = 60.0


def default_path() -> Path:
    return Path(tempfile.gettempdir()) / f"cairn-worker-{socket.gethostname()}-{os.getpid()}.alive"


def default_files() -> tuple[Path, list[Path]]:
    """The pattern of this host's workers' default files, and the files it matches."""
    pattern = f"cairn-worker-{socket.gethostname()}-*.alive"
    folder = Path(tempfile.gettempdir())
    return folder / pattern, sorted(folder.glob(pattern))


def liveness_path(settings: Settings) -> Path:
    return settings.liveness_file or default_path()


def default_max_age(settings: Settings) -> float:
    return MAX_AGE_PERIODS * settings.liveness_interval


class Liveness(bootsteps.StartStopStep):  # type: ignore[misc]
    """A consumer bootstep: the ping timer, the ping queue, the liveness file."""

    label = "cairn liveness"
    requires = ("celery.worker.consumer.tasks:Tasks",)

    def __init__(self, c: Any, **kwargs: Any) -> None:
        super().__init__(c, **kwargs)
        settings: Settings = c.app.cairn_settings
        self.interval_s = settings.liveness_interval
        self.path = liveness_path(settings)
        self.nonce = secrets.token_hex(8)
        self.node = str(c.hostname)
        name = f"cairn.ping.{self.node}.{os.getpid()}.{self.nonce}"
        self.queue = Queue(  # type: ignore[no-untyped-call]
            name,
            Exchange(name, type="direct"),  # type: ignore[no-untyped-call]
            routing_key=name,
            expires=max(QUEUE_EXPIRES_MIN_S, 10 * self.interval_s),
        )
        # Part of the worker's own queue set, so the task consumer takes it up again
        # whenever Celery rebuilds the consumer after a reconnect.
        c.app.amqp.queues.select_add(self.queue)
        c.cairn_liveness = self
        self._sent_at: float | None = None  # monotonic: the ping in flight, if any
        self._last_ping_at: float | None = None
        self._timer: Any = None
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # A file left by an earlier process at the same path must not vouch for this one.
        self.path.unlink(missing_ok=True)
        log.info("liveness: ping every %ss via %s; file %s", self.interval_s, name, self.path)

    def start(self, c: Any) -> None:
        self._sent_at = None  # a ping sent over the previous connection may be gone
        self._timer = c.timer.call_repeatedly(self.interval_s, self._tick, (c,))
        self._tick(c)

    def stop(self, c: Any) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def shutdown(self, c: Any) -> None:
        self.stop(c)
        self.path.unlink(missing_ok=True)

    def _tick(self, c: Any) -> None:
        try:
            window = c.qos.value if c.qos is not None else 0
            reserved = len(worker_state.reserved_requests)
            if window and reserved >= window:
                if self._sent_at is not None:  # it cannot arrive before a slot frees
                    self._sent_at = time.monotonic()
                self._write(f"busy: running nodes hold all {window} prefetch slots")
                return
            if self._sent_at is not None:
                waited = time.monotonic() - self._sent_at
                if waited < RESEND_PERIODS * self.interval_s:
                    return
                log.warning(
                    "liveness: the ping sent %.1f s ago was not consumed; this worker may "
                    "have stopped consuming (deaf)",
                    waited,
                )
            self._publish(c)
        except Exception:  # a timer callback that raises would stop the worker's loop
            log.warning("liveness: tick failed", exc_info=True)

    def _publish(self, c: Any) -> None:
        try:
            c.app.send_task(
                PING_TASK,
                kwargs={"nonce": self.nonce, "sent_at": time.time()},
                queue=self.queue,
                ignore_result=True,
                retry=False,  # the next tick tries again; this one must not block the loop
            )
        except Exception as exc:
            log.warning("liveness: could not send a ping: %s", exc)
            return
        self._sent_at = time.monotonic()

    def consumed(self, body: Any) -> None:
        """The consumer took one of this worker's pings off the broker."""
        kwargs = body[1] if isinstance(body, list | tuple) and len(body) == 3 else None
        if not isinstance(kwargs, dict) or kwargs.get("nonce") != self.nonce:
            log.warning("liveness: ignored a ping that is not this worker's: %r", body)
            return
        now = time.time()
        self._sent_at = None
        self._last_ping_at = now
        sent_at = kwargs.get("sent_at")
        round_trip = now - sent_at if isinstance(sent_at, int | float) else None
        self._write("ping consumed", round_trip)

    def _write(self, reason: str, round_trip_s: float | None = None) -> None:
        record = {
            "alive_at": time.time(),
            "reason": reason,
            "last_ping_at": self._last_ping_at,
            "round_trip_s": round_trip_s,
            "node": self.node,
            "pid": os.getpid(),
            "queue": self.queue.name,
        }
        temporary = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
        try:
            temporary.write_text(json.dumps(record), encoding="utf-8")
            os.replace(temporary, self.path)  # the probe never reads half a file
        except OSError:
            log.warning("liveness: could not write %s", self.path, exc_info=True)


def ping_strategy(task: Any, app: Any, consumer: Any, **kwargs: Any) -> Any:
    """Handle a ping in the consumer itself: ack it and record it, never run it."""

    def handle(message: Any, body: Any, *args: Any, **kw: Any) -> None:
        payload = message.decode() if body is None else body  # refuses all but JSON
        # Acked directly, not through Celery's ack promise, which after a reconnect also
        # widens the prefetch window as if a node had finished.
        message.ack_log_error(log, consumer.connection_errors)
        liveness = getattr(consumer, "cairn_liveness", None)
        if liveness is not None:
            try:
                liveness.consumed(payload)
            except Exception:  # an error here would reach the consumer's event loop
                log.warning("liveness: recording a ping failed", exc_info=True)

    return handle


# -- the probe side: judges the file, from another process -----------------------------


@dataclass(frozen=True)
class Verdict:
    live: bool
    message: str


def check(path: Path, max_age_s: float, now: float | None = None) -> Verdict:
    """Judge a worker by its liveness file: live if it proved itself within max_age_s."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return Verdict(
            False,
            f"no liveness file at {path}: the worker has not consumed its first ping yet, "
            "or it records elsewhere (CAIRN_LIVENESS_FILE, --liveness-file)",
        )
    except (OSError, ValueError) as exc:
        return Verdict(False, f"unreadable liveness file {path}: {exc}")
    alive_at = record.get("alive_at") if isinstance(record, dict) else None
    if not isinstance(alive_at, int | float) or not math.isfinite(alive_at):
        return Verdict(False, f"liveness file {path} has no valid alive_at")
    age = (time.time() if now is None else now) - alive_at
    who = f"worker {record.get('node', '?')} (pid {record.get('pid', '?')})"
    last = record.get("reason", "?")
    if age > max_age_s:
        return Verdict(
            False,
            f"deaf: {who} has not consumed its own ping for {age:.1f} s "
            f"(max {max_age_s:g} s); last sign of life: {last}",
        )
    return Verdict(True, f"live: {who}, {last} {max(age, 0.0):.1f} s ago")
