"""Long-running processes: worker, scheduler; and the database."""

from __future__ import annotations

import logging
import signal
import threading
from typing import Annotated

import typer

from cairn.cli.main import _cwd_importable, app, out
from cairn.config import Settings
from cairn.runtime import Runtime
from cairn.store.database import current_revision, make_engine, upgrade

db = typer.Typer(help="The database schema.", no_args_is_help=True)
app.add_typer(db, name="db")


@db.command("upgrade")
def db_upgrade(revision: Annotated[str, typer.Argument()] = "head") -> None:
    """Migrate the database (safe to run twice, and from several processes at once)."""
    settings = Settings.from_env()
    engine = make_engine(settings.effective_database_url)
    upgrade(engine, revision)
    out.print(f"database at revision {current_revision(engine)}")


@app.command()
def worker(
    concurrency: Annotated[int, typer.Option(help="Parallel node executions.")] = 2,
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
) -> None:
    """Run a worker: a Celery worker (CAIRN_BROKER_URL set) or, embedded, worker threads
    plus the scheduler in this process."""
    _cwd_importable()
    settings = Settings.from_env()
    _logging(settings)
    if settings.broker_url is not None:
        from cairn.workers.app import make_celery  # noqa: PLC0415

        celery_app = make_celery(settings)
        argv = [
            "worker",
            f"--concurrency={concurrency}",
            f"--pool={pool}",
            f"--loglevel={settings.log_level}",
            f"--queues={queues or settings.queue}",
            "--without-gossip",
            "--without-mingle",
            *(["--task-events"] if events or settings.task_events else []),
        ]
        celery_app.worker_main(argv)
        return
    runtime = Runtime.build(settings, concurrency=concurrency)
    runtime.start_workers()
    _serve(runtime)


@app.command()
def scheduler() -> None:
    """Run the scheduler: outbox relay, durable timers, recovery, compaction."""
    _cwd_importable()
    settings = Settings.from_env()
    _logging(settings)
    _serve(Runtime.build(settings))


def _serve(runtime: Runtime) -> None:
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    runtime.start_scheduler()
    out.print("cairn running; Ctrl-C to stop")
    stop.wait()
    runtime.close()


def _logging(settings: Settings) -> None:
    logging.basicConfig(
        level=settings.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
