"""One process of ``cairn dev``: ``python -m cairn.dev.child worker|scheduler|api``.

Started by the supervisor in a process group of its own, with its settings in the
environment (:mod:`cairn.dev.plan`). It logs JSON lines for the supervisor to render,
each naming the part of the process that wrote it (a worker without a broker hosts the
scheduler's threads too), and it ends itself when the supervisor is gone — even killed
with SIGKILL, which no signal handler sees — so that nothing outlives ``cairn dev``.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from cairn.config import Settings
from cairn.dev import DEV_BUILD
from cairn.errors import CairnError
from cairn.observe.logs import configure_logging

if TYPE_CHECKING:
    from cairn.runtime import Runtime

log = logging.getLogger(__name__)

ORPHAN_CHECK_S: Final = 0.5
ORPHAN_GRACE_S: Final = 5.0
# Threads of the scheduler's: their lines are the scheduler's, whichever process runs them.
SCHEDULER_THREADS: Final = ("cairn-scheduler", "cairn-notifier")
# Loggers of the HTTP API and console: their lines are the api's, in whichever process.
API_LOGGERS: Final = ("uvicorn", "cairn.api", "cairn.console")


def main(argv: list[str] | None = None) -> None:
    role, *options = argv if argv is not None else sys.argv[1:]
    _end_with_parent(os.getppid())
    cwd = str(Path.cwd())  # handlers are named relative to the project, as for python -m
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    settings = Settings.from_env()
    configure_logging(settings.log_level, "json", role, tasks=settings.log_tasks)
    _tag_scheduler_threads()
    try:
        _run(role, options, settings)
    except CairnError as exc:  # a handler that does not import: one line, not a traceback
        log.error("cannot start: %s", exc)
        raise SystemExit(1) from None


def _run(role: str, options: list[str], settings: Settings) -> None:
    if role == "worker" and settings.broker_url is None:
        (listener,) = options
        _embedded(settings, int(listener))
    elif role == "worker":
        _worker(settings)
    elif role == "scheduler":
        _schedule(settings)
    elif role == "api":
        (listener,) = options
        _api(settings, int(listener))
    else:
        raise SystemExit(f"cairn.dev.child: unknown role {role!r}")


def worker_name() -> str:
    return f"{DEV_BUILD}@{socket.gethostname()}:{os.getpid()}"


def _runtime(settings: Settings, **options: Any) -> Runtime:
    from cairn.runtime import Runtime  # noqa: PLC0415 - after logging is set up

    # The supervisor migrated the database, once, before starting any child.
    return Runtime.build(settings, migrate=False, **options)


def _embedded(settings: Settings, listener: int) -> None:
    """Without a broker: worker threads, the scheduler (its relay feeds their queue) and
    the API with the console, on one runtime — one process's memory holds the leases
    and heartbeats that the API shows."""
    try:
        runtime = _runtime(settings, worker=worker_name())
    except CairnError as exc:  # handlers that do not import: the console stays up
        log.error("cannot start: %s", exc)
        log.warning("no worker and no scheduler until the next change; the API serves on")
        runtime = _runtime(settings, pre_ping=True, resolve=False, register=False)
    else:
        runtime.start_workers()
        runtime.start_scheduler()
        log.info("started, as %s", runtime.runner.worker)
    _serve_api(settings, runtime, listener)


def _worker(settings: Settings) -> None:
    """A Celery worker, quiet, on threads — no pool to fork, so a reload's restart is
    quick; a development worker needs no crash isolation between slots."""
    from cairn.runtime import register_definitions  # noqa: PLC0415
    from cairn.workers.app import make_celery  # noqa: PLC0415 - Celery, for this role only
    from cairn.workers.logs import log_through_root  # noqa: PLC0415

    register_definitions(settings)
    celery_app = make_celery(settings, _celery_runtime)
    log_through_root()
    celery_app.worker_main(
        [
            *([] if settings.log_level == "DEBUG" else ["--quiet"]),
            "worker",
            "--concurrency=4",
            "--pool=threads",
            f"--loglevel={settings.log_level}",
            f"--queues={settings.queue}",
            "--without-gossip",
            "--without-mingle",
        ]
    )


def _celery_runtime(app: Any) -> Runtime:
    return _runtime(app.cairn_settings, celery_app=app, worker=worker_name(), register=False)


def _schedule(settings: Settings) -> None:
    """With a broker: the scheduler, until SIGINT or SIGTERM."""
    runtime = _runtime(settings, resolve=False, register=False)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    runtime.start_scheduler()
    log.info("started, as pid %d", os.getpid())
    stop.wait()
    runtime.close()


def _api(settings: Settings, listener: int) -> None:
    """With a broker: the API and console on a runtime of this process's that runs no
    node (the Celery worker child does)."""
    runtime = _runtime(settings, pre_ping=True, resolve=False, register=False)
    _serve_api(settings, runtime, listener)


def _serve_api(settings: Settings, runtime: Runtime, listener: int) -> None:
    """Serve the API and console on ``runtime`` until SIGINT or SIGTERM, then close it;
    on the supervisor's socket ``listener`` (a file descriptor), which outlives this
    process."""
    import uvicorn  # noqa: PLC0415

    from cairn.api.app import create_app  # noqa: PLC0415

    try:
        config = uvicorn.Config(
            create_app(settings, runtime),
            log_level=settings.log_level.lower(),
            log_config=None,  # cairn's JSON lines (configure_logging), not uvicorn's
            access_log=False,
            timeout_graceful_shutdown=2,  # an open event stream must not hold a reload
        )
        uvicorn.Server(config).run(sockets=[socket.socket(fileno=listener)])
    finally:
        runtime.close()


def _tag_scheduler_threads() -> None:
    """Every record gets ``dev_process``: "scheduler" on the scheduler's threads."""
    make = logging.getLogRecordFactory()

    def record(*args: Any, **kwargs: Any) -> logging.LogRecord:
        made = make(*args, **kwargs)
        if (made.threadName or "").startswith(SCHEDULER_THREADS):
            made.dev_process = "scheduler"
        elif made.name.startswith(API_LOGGERS):
            made.dev_process = "api"
        return made

    logging.setLogRecordFactory(record)


def _end_with_parent(parent: int) -> None:
    """When the supervisor is gone (this process re-parented), stop this process group
    as the supervisor would have: SIGTERM, then SIGKILL after a grace period."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(ORPHAN_CHECK_S)
        os.killpg(os.getpgrp(), signal.SIGTERM)
        time.sleep(ORPHAN_GRACE_S)
        os.killpg(os.getpgrp(), signal.SIGKILL)

    threading.Thread(target=watch, name="cairn-dev-orphan", daemon=True).start()


if __name__ == "__main__":
    main()
