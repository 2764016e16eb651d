"""Keeping a lease alive while a handler runs.

A daemon thread renews the lease every ``interval_s``. When a renewal fails (the token
no longer matches, or Redis cannot be reached until the lease's own deadline has
passed), ``lost`` is set: the step context exposes it as ``ctx.lease_lost`` and the
worker does not commit. The worker also keeps a monotonic deadline of its own, so it
stops believing in a lease it could not renew in time even if Redis never answers.
"""

from __future__ import annotations

import logging
import threading
import time

from cairn.lease.leases import Lease, Leases

log = logging.getLogger(__name__)


class Heartbeat:
    def __init__(self, leases: Leases, lease: Lease, interval_s: float) -> None:
        self.leases = leases
        self.lease = lease
        self.interval_s = interval_s
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._deadline = time.monotonic() + lease.ttl_s
        self._thread = threading.Thread(
            target=self._run, name=f"heartbeat {lease.key}", daemon=True
        )

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=self.interval_s + 1)

    @property
    def valid(self) -> bool:
        """Still the holder, as far as this process can know."""
        return not self.lost.is_set() and time.monotonic() < self._deadline

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            asked_at = time.monotonic()  # the new TTL runs from the request, not the reply
            try:
                renewed = self.leases.renew(self.lease)
            except Exception:  # Redis down: keep trying until our own deadline passes
                log.warning("lease renewal failed for %s", self.lease.key, exc_info=True)
                renewed = False
                if time.monotonic() < self._deadline:
                    continue
            if not renewed:
                self.lost.set()
                return
            self._deadline = asked_at + self.lease.ttl_s
