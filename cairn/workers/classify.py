"""Which error class a handler's exception belongs to."""

from __future__ import annotations

import socket

from cairn.orchestrator.definition import ErrorClass

TRANSIENT_TYPES: tuple[type[BaseException], ...] = (
    TimeoutError,
    ConnectionError,  # includes resets, refusals, broken pipes
    socket.timeout,
)


def classify(error: BaseException) -> ErrorClass:
    """An exception may say its class itself (``error_class`` attribute); timeouts and
    connection failures are transient; anything else unknown is permanent."""
    declared = getattr(error, "error_class", None)
    if declared is not None:
        try:
            return ErrorClass(declared)
        except ValueError:
            pass
    if isinstance(error, TRANSIENT_TYPES):
        return ErrorClass.TRANSIENT
    return ErrorClass.PERMANENT
