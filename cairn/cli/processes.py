"""Long-running processes: worker, scheduler; their probes; and the database."""

from __future__ import annotations

import logging
import signal
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from cairn.cli import remote
from cairn.cli._app import EXIT_INVALID, app, cwd_importable, err, out

if TYPE_CHECKING:
    from prometheus_client.registry import Collector

    from cairn.config import Settings
    from cairn.lease.port import Leases
    from cairn.runtime import Runtime

db = typer.Typer(help="The database schema.", no_args_is_help=True)
app.add_typer(db, name="db")
probe = typer.Typer(
    help="Health checks for Kubernetes exec probes: exit 0 healthy, 1 not.",
    no_args_is_help=True,
)
app.add_typer(probe, name="probe")
# A long-running process's lines go to its log, in its format (CAIRN_LOG_FORMAT).
log = logging.getLogger("cairn")
CELERY_CONCURRENCY = 2  # a Celery worker's slots unless --concurrency says otherwise

MetricsPort = Annotated[
    int | None,
    typer.Option(
        min=1,
        max=65535,
        help="Serve the lease metrics for Prometheus on this port (CAIRN_METRICS_PORT).",
    ),
]


@db.command("upgrade")
def db_upgrade(revision: Annotated[str, typer.Argument()] = "head") -> None:
    """Migrate the database (safe to run twice, and from several processes at once)."""
    from cairn.config import Settings
    from cairn.store.database import current_revision, make_engine, upgrade

    remote.process_note("db upgrade")
    settings = Settings.from_env()
    engine = make_engine(settings.effective_database_url)
    upgrade(engine, revision)
    out.print(f"database at revision {current_revision(engine)}")


@app.command()
def worker(  # noqa: PLR0917 - typer passes options by name
    concurrency: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Parallel node executions (default 2; embedded: CAIRN_WORKER_THREADS).",
        ),
    ] = None,
    queues: Annotated[str | None, typer.Option(help="Comma-separated queues.")] = None,
    pool: Annotated[
        str,
        typer.Option(
            help="Celery pool: prefork (a process per slot; "
            "isolates crashes) or threads (for I/O-bound "
            "handlers)."
        ),
    ] = "prefork",
    events: Annotated[
        bool,
        typer.Option(
            "--events", "-E", help="Send Celery task events for Flower (CAIRN_TASK_EVENTS)."
        ),
    ] = False,
    liveness_file: Annotated[
        Path | None,
        typer.Option(
            help="Where a Celery worker records that it still consumes, for "
            "`cairn probe worker` (CAIRN_LIVENESS_FILE)."
        ),
    ] = None,
    metrics_port: MetricsPort = None,
) -> None:
    """Run a worker: a Celery worker (CAIRN_BROKER_URL set) or, embedded, worker threads
    plus the scheduler in this process."""
    from cairn.config import Settings
    from cairn.runtime import Runtime

    remote.process_note("worker")
    cwd_importable()
    settings = _with(Settings.from_env(), liveness_file=liveness_file, metrics_port=metrics_port)
    _logging(settings, "worker")
    if settings.broker_url is not None:
        _celery_worker(settings, concurrency, queues, pool, events=events)
        return
    if liveness_file is not None:
        err.print("--liveness-file is for Celery workers: an embedded worker has no broker")
    if queues is not None:
        err.print("--queues is for Celery workers: an embedded worker runs every node")
    runtime = Runtime.build(settings, concurrency=concurrency)
    runtime.start_workers()
    _serve(runtime)


def _celery_worker(
    settings: Settings, concurrency: int | None, queues: str | None, pool: str, *, events: bool
) -> None:
    """A Celery worker: the definitions registered once, then Celery's own loop."""
    from cairn.lease.redis import RedisLeases
    from cairn.model.builds import build_queue
    from cairn.runtime import announce_build, register_definitions, worker_app
    from cairn.workers.logs import log_through_root

    if settings.metrics_port is not None:
        if settings.redis_url is None:
            raise typer.BadParameter(
                "lease metrics of a Celery worker need CAIRN_REDIS_URL: without it "
                "every worker process keeps leases of its own",
                param_hint="--metrics-port",
            )
        # The parent serves: its children come and go, the counters are in Redis.
        _serve_metrics(RedisLeases.from_url(settings.redis_url), settings.metrics_port)
    consumed = _consumed_queues(settings, queues)
    announcer = announce_build(settings, register_definitions(settings))
    # Its children record the build in what they run; it consumes each queue's messages
    # routed to its build besides the queue's own (docs/versions.md).
    settings = settings.model_copy(update={"build": announcer.build})
    consumed += [build_queue(queue, announcer.build) for queue in consumed]
    log.info("build %s", announcer.build)
    celery_app = worker_app(settings)
    log_through_root()
    argv = [
        # Celery's banner (its settings, its tasks) is for debugging; the quiet
        # default keeps a terminal's commands readable.
        *([] if settings.log_level == "DEBUG" else ["--quiet"]),
        "worker",
        f"--concurrency={concurrency or CELERY_CONCURRENCY}",
        f"--pool={pool}",
        f"--loglevel={settings.log_level}",
        f"--queues={','.join(consumed)}",
        "--without-gossip",
        "--without-mingle",
        *(["--task-events"] if events or settings.task_events else []),
    ]
    celery_app.worker_main(argv)


def _consumed_queues(settings: Settings, queues: str | None) -> list[str]:
    """The queues a Celery worker consumes (``--queues``, else CAIRN_QUEUE), each a
    queue name and, when the deployment declares its queues, one of them: a worker on a
    queue nothing is sent to would sit idle while its nodes wait elsewhere."""
    from cairn.definitions.queues import known_queues
    from cairn.model.queues import queue_name_problem

    if queues is None:
        return [settings.queue]
    names = [name.strip() for name in queues.split(",") if name.strip()]
    if not names:
        raise typer.BadParameter("name at least one queue", param_hint="--queues")
    for name in names:
        problem = queue_name_problem(name)
        if problem is not None:
            raise typer.BadParameter(problem, param_hint="--queues")
    known = known_queues(settings.queues, settings.queue)
    unknown = [name for name in names if settings.queues and name not in known]
    if unknown:
        raise typer.BadParameter(
            f"{', '.join(map(repr, unknown))}: not a queue of this deployment "
            f"(CAIRN_QUEUES and the default queue: {', '.join(known)})",
            param_hint="--queues",
        )
    return names


@app.command()
def scheduler(metrics_port: MetricsPort = None) -> None:
    """Run the scheduler: outbox relay, durable timers, recovery, compaction."""
    from cairn.config import Settings
    from cairn.runtime import Runtime

    remote.process_note("scheduler")
    cwd_importable()
    settings = _with(Settings.from_env(), metrics_port=metrics_port)
    _logging(settings, "scheduler")
    _serve(Runtime.build(settings, resolve=False))


@probe.command("worker")
def probe_worker(
    file: Annotated[
        Path | None,
        typer.Option(
            help="The worker's liveness file (default: CAIRN_LIVENESS_FILE, else the one "
            "default file of a worker on this host)."
        ),
    ] = None,
    max_age: Annotated[
        float | None,
        typer.Option(
            min=0.0,
            help="Seconds since the worker last consumed its own ping before it counts "
            "as deaf (default: 3 x CAIRN_LIVENESS_INTERVAL).",
        ),
    ] = None,
) -> None:
    """Is a Celery worker still consuming? Exit 0 if it consumed its own ping through the
    broker (or was busy with nodes) within the max age, 1 if it is deaf."""
    from cairn.config import Settings
    from cairn.workers.liveness import check, default_max_age

    settings = Settings.from_env()
    path = file or settings.liveness_file or _only_default_file()
    verdict = check(path, default_max_age(settings) if max_age is None else max_age)
    (out if verdict.live else err).print(verdict.message, markup=False)
    raise typer.Exit(0 if verdict.live else 1)


def _only_default_file() -> Path:
    """A worker's default file is keyed by its pid, unknown here: take the only one."""
    from cairn.workers.liveness import default_files

    pattern, candidates = default_files()
    if len(candidates) != 1:
        err.print(
            f"{len(candidates)} worker liveness files match {pattern}: "
            "give --file or set CAIRN_LIVENESS_FILE",
            markup=False,
        )
        raise typer.Exit(EXIT_INVALID if not candidates else 1)
    return candidates[0]


def _with(settings: Settings, **options: Any) -> Settings:
    """Settings with the command line's options over the environment's."""
    given = {name: value for name, value in options.items() if value is not None}
    return settings.model_validate({**settings.model_dump(), **given}) if given else settings


def _serve_metrics(leases: Leases, port: int, *more: Collector) -> None:
    from cairn.observe.metrics.leases import serve_metrics

    serve_metrics(leases, port, more=more)
    log.info("metrics on :%d/metrics", port)


def _serve(runtime: Runtime) -> None:
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    runtime.start_scheduler()
    if runtime.settings.metrics_port is not None:
        from cairn.observe.metrics.fleet import FleetCollector

        _serve_metrics(
            runtime.leases,
            runtime.settings.metrics_port,
            FleetCollector(
                runtime.store,
                runtime.slots,
                circuits=runtime.circuits,
                rates=runtime.rates,
                builds=runtime.orchestrator.builds,
            ),
            runtime.scheduler.metrics.registry,
        )
    log.info("cairn running; Ctrl-C to stop")
    stop.wait()
    runtime.close()


def _logging(settings: Settings, role: str) -> None:
    from cairn.observe.logs import configure_logging

    configure_logging(settings.log_level, settings.log_format, role, tasks=settings.log_tasks)
