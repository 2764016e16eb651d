"""A payment service's stand-in for circuit tests on the embedded runtime: a handler that
fails transiently while the service is ``down``, and the time of every call to it."""

from __future__ import annotations

import threading
import time
from typing import Any

from cairn.model.failures import TransientError

HANDLER = f"{__name__}:call_payments"
down = threading.Event()
calls: list[float] = []
_lock = threading.Lock()


def call_payments(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    with _lock:
        calls.append(time.monotonic())
    if down.is_set():
        raise TransientError("payments: 503")
    return {"charged": True}
