"""A Celery worker that logs as the rest of cairn does (:mod:`cairn.observe.logs`).

``cairn worker`` sets logging up before Celery starts and keeps Celery from taking the
root logger over (``worker_hijack_root_logger=False``). Celery still gives its task
logger and the pool's (billiard's) logger handlers of their own, in its own format: a
line in another format breaks a JSON log. Here they lose those handlers and pass their
lines to the root logger instead, in the parent and in every pool child.
"""

from __future__ import annotations

import logging
from typing import Any

from celery.signals import after_setup_logger, after_setup_task_logger
from celery.utils.log import get_multiprocessing_logger


def log_through_root() -> None:
    """Send Celery's own loggers' lines through the root logger's handler. Idempotent."""
    after_setup_logger.connect(_pool_logger, weak=False, dispatch_uid="cairn.pool_logger")
    after_setup_task_logger.connect(_task_logger, weak=False, dispatch_uid="cairn.task_logger")


def _pool_logger(**_kwargs: Any) -> None:
    pool = get_multiprocessing_logger()
    if pool is not None:
        _to_root(pool)


def _task_logger(logger: logging.Logger, **_kwargs: Any) -> None:
    _to_root(logger)


def _to_root(logger: logging.Logger) -> None:
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
    logger.propagate = True
