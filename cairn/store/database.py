"""Engines and migrations."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, inspect, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError
from sqlalchemy.pool import QueuePool, SingletonThreadPool

from cairn.errors import SchemaOutOfDate

log = logging.getLogger(__name__)

MIGRATIONS = Path(__file__).parent / "migrations"
# A constant key for pg_advisory_xact_lock: concurrent `cairn db upgrade` runs queue up
# behind each other instead of racing to create the same tables.
MIGRATION_LOCK_KEY = 0x6361_6972_6E  # "cairn"


def normalise_url(url: str) -> str:
    """``postgresql://`` means psycopg 3 here (SQLAlchemy would pick psycopg2)."""
    parsed = make_url(url)
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed.render_as_string(hide_password=False)


def make_engine(url: str, *, pool_size: int = 5, pre_ping: bool = False) -> Engine:
    """An engine for ``url``. ``pre_ping``: test each pooled connection as it is taken
    (one round trip), for processes that serve people — the API, a client — whose
    first request after a database restart must not fail on a connection that died
    with it. Workers and schedulers do without: every step would pay the round trip,
    and they retry through outages anyway (:mod:`cairn.reconnect`). Either way, the
    first dead connection found invalidates the whole pool (SQLAlchemy's rule)."""
    url = normalise_url(url)
    if url.startswith("sqlite"):
        return _sqlite_engine(url, pool_size)
    engine = create_engine(
        url,
        pool_size=pool_size,
        max_overflow=pool_size,
        pool_recycle=1800,
        pool_pre_ping=pre_ping,
    )
    close_late_returns(engine)
    return engine


# Connections an SQLite engine keeps open beyond its pool size, for a burst of threads
# (worker threads, the scheduler's, the API's); those past the pool are closed on return.
SQLITE_OVERFLOW = 32


def _sqlite_engine(url: str, pool_size: int) -> Engine:
    """An engine on an SQLite file that keeps its connections: each is opened (and its
    PRAGMAs run) once, and the write-ahead log stays — SQLite checkpoints and deletes it
    when the last connection to the file closes, an fsync each time, which a pool that
    closed every connection after use (NullPool) paid on every transaction. The
    connections move between threads, one thread at a time (the pool hands each to one
    holder): ``check_same_thread`` off is safe for that."""
    database = make_url(url).database
    in_memory = not database or database == ":memory:"
    if database and not in_memory:
        Path(database).parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(
        url,
        # In memory, each connection would be a database of its own: one, kept per thread.
        poolclass=SingletonThreadPool if in_memory else QueuePool,
        **({} if in_memory else {"pool_size": pool_size, "max_overflow": SQLITE_OVERFLOW}),
        connect_args={"check_same_thread": False, "timeout": 30},
    )
    event.listen(engine, "connect", _sqlite_pragmas)
    return engine


# The hot path's statements are prepared and found by key (cairn.store.fastpath). On
# its own, PostgreSQL plans a prepared statement anew at each of its first five runs on
# a connection, and for good if it guesses the generic plan dearer: measured, half a
# fan-out's join steps spent a millisecond or more planning at bind.
GENERIC_PLANS = "SET plan_cache_mode = force_generic_plan"


def autocommit_twin(engine: Engine) -> Engine:
    """An engine on the same PostgreSQL database whose connections are autocommit from
    the start, and plan their prepared statements once (:data:`GENERIC_PLANS`).

    Switching a pooled connection to autocommit and back on every checkout costs more
    Python than the one statement it is for; a pool of its own costs a connection or two.
    """
    pool_size = engine.pool.size()  # type: ignore[attr-defined]
    twin = create_engine(
        engine.url,
        isolation_level="AUTOCOMMIT",
        pool_size=pool_size,
        max_overflow=pool_size,
        pool_recycle=1800,
    )
    # Set once a connection is made, not as a startup option: a connection pooler such as
    # PgBouncer refuses startup options it does not track.
    event.listen(twin, "connect", _generic_plans)
    close_late_returns(twin)
    return twin


def _generic_plans(dbapi_connection: Any, _record: object) -> None:
    dbapi_connection.execute(GENERIC_PLANS)
    if not dbapi_connection.autocommit:  # not yet switched: keep it past its transaction
        dbapi_connection.commit()


def close_late_returns(engine: Engine) -> None:
    """Close a connection that is handed back after :meth:`Engine.dispose` instead of
    keeping it. ``dispose()`` closes the pooled connections and starts a new pool; one
    checked out at that moment (a thread still finishing a request while its process
    shuts down) goes back into the pool dispose let go of, and stays open until the
    garbage collector finds it — a connection the server keeps meanwhile, and a
    ``ResourceWarning`` wherever that happens to be."""
    generation = [0]

    @event.listens_for(engine, "engine_disposed")
    def disposed(_engine: Engine) -> None:
        generation[0] += 1

    @event.listens_for(engine, "connect")
    def born(_dbapi_connection: Any, record: Any) -> None:
        record.info["cairn_generation"] = generation[0]

    @event.listens_for(engine, "checkin")
    def returned(dbapi_connection: Any, record: Any) -> None:
        if dbapi_connection is not None and record.info.get("cairn_generation") != generation[0]:
            dbapi_connection.close()


def _sqlite_pragmas(dbapi_connection: object, _record: object) -> None:
    cursor = dbapi_connection.cursor()  # type: ignore[attr-defined]
    # WAL lets readers run beside the single writer; busy_timeout waits out the writer.
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.close()


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Migrate to ``revision``. Safe to run twice, and concurrently on PostgreSQL."""
    # Alembic is imported when migrating only: every worker, scheduler and CLI process
    # would otherwise pay for it at start (a fifth of a second).
    from alembic import command  # noqa: PLC0415
    from alembic.config import Config  # noqa: PLC0415

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    with engine.begin() as connection:
        if connection.dialect.name == "postgresql":
            connection.execute(
                text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK_KEY}
            )
        config.attributes["connection"] = connection
        command.upgrade(config, revision)


def upgrade_if_behind(engine: Engine) -> None:
    """Migrate when the schema is older than this cairn's, or absent — the embedded
    mode on a server database, which has no ``cairn db upgrade`` step of its own. The
    check is one query; Alembic is imported only when there is something to do."""
    try:
        require_schema(engine)
    except SchemaOutOfDate:
        log.info("migrating the database to this cairn's schema (embedded mode)")
        upgrade(engine)


def current_revision(engine: Engine) -> str | None:
    from alembic.runtime.migration import MigrationContext  # noqa: PLC0415

    with engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def shipped_revision() -> str:
    """The newest migration this cairn ships (its files are numbered in order)."""
    versions = (MIGRATIONS / "versions").glob("[0-9][0-9][0-9][0-9]_*.py")
    return max(path.name[:4] for path in versions)


def require_schema(engine: Engine) -> None:
    """Refuse (:class:`~cairn.errors.SchemaOutOfDate`) to run on a database whose schema
    is older than this cairn's migrations, or has none: every statement would fail, each
    pass of every loop, with a traceback saying a table is missing. A newer schema (a
    later release migrated first, in a rolling deploy) is used: migrations only add. A
    database that cannot be reached is not judged here; the process retries as ever."""
    wanted = shipped_revision()
    try:
        with engine.connect() as connection:
            found = None
            if inspect(connection).has_table("alembic_version"):
                found = connection.execute(text("SELECT version_num FROM alembic_version")).scalar()
    except OperationalError as error:
        log.warning("could not check the database's schema (%s); going on", error.orig)
        return
    if found is None:
        raise SchemaOutOfDate(
            "the database has no cairn schema: run `cairn db upgrade` (once, before the "
            "workers, schedulers and API start)"
        )
    if str(found) < wanted:
        raise SchemaOutOfDate(
            f"the database's schema is at revision {found} and this cairn needs {wanted}: "
            "run `cairn db upgrade` (migrations only add: processes of the older release "
            "keep working on the upgraded database)"
        )
