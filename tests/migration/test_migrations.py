"""The migrations are the schema: from an empty database, on SQLite and PostgreSQL, they
create exactly the tables ``cairn.store.schema`` declares (compared by alembic's
autogenerate); upgrading again changes nothing; upgrades racing on PostgreSQL queue behind
one advisory lock and leave one schema; and every migration's downgrade takes the schema
back to what it was before it, down to an empty database, which migrates up again."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import psycopg
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, inspect

from cairn.store.database import MIGRATIONS, current_revision, make_engine, upgrade
from cairn.store.schema import metadata
from tests.support.services import ROOT

TABLES = {
    "workflows",
    "workflow_shares",
    "runs",
    "builds",
    "events",
    "snapshots",
    "node_executions",
    "node_checkpoints",
    "model_messages",
    "model_calls",
    "slot_waits",
    "outbox",
    "timers",
    "inbox",
    "effects",
    "artifacts",
    "notifications",
    "schedules",
    "debounces",
    "singletons",
    "principals",
    "api_keys",
    "audit_log",
    "pauses",
    "held_starts",
    "console_sessions",
    "console_logins",
    "code_faults",
}
SCRIPTS = ScriptDirectory(str(MIGRATIONS))
HEAD = SCRIPTS.get_current_head()
# Oldest first.
REVISIONS = [script.revision for script in reversed(list(SCRIPTS.walk_revisions()))]


def _drift(engine: Engine) -> list[Any]:
    with engine.connect() as connection:
        context = MigrationContext.configure(
            connection, opts={"compare_type": True, "compare_server_default": True}
        )
        return list(compare_metadata(context, metadata))


def _schema(engine: Engine) -> dict[str, Any]:
    """Tables, columns, indexes and constraints as the database reports them."""
    inspector = inspect(engine)
    return {
        table: (
            [(c["name"], str(c["type"]), c["nullable"]) for c in inspector.get_columns(table)],
            sorted(i["name"] or "" for i in inspector.get_indexes(table)),
            sorted(u["name"] or "" for u in inspector.get_unique_constraints(table)),
            inspector.get_pk_constraint(table)["name"],
        )
        for table in sorted(inspector.get_table_names())
    }


def _downgrade(engine: Engine, revision: str) -> None:
    """``alembic downgrade``, as :func:`cairn.store.database.upgrade` runs an upgrade (cairn
    itself never downgrades: this is for an operator backing a release out)."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.downgrade(config, revision)


def test_the_migrations_create_exactly_the_models(empty_engine: Engine) -> None:
    upgrade(empty_engine)
    assert current_revision(empty_engine) == HEAD
    assert set(inspect(empty_engine).get_table_names()) == TABLES | {"alembic_version"}
    assert _drift(empty_engine) == []
    # The comparison does see the database: an index gone missing is drift.
    with empty_engine.begin() as connection:
        connection.exec_driver_sql("DROP INDEX ix_timers_due")
    assert [d[0] for d in _drift(empty_engine)] == ["add_index"]


def test_upgrade_twice_is_a_no_op(empty_engine: Engine) -> None:
    upgrade(empty_engine)
    before = _schema(empty_engine)
    with empty_engine.begin() as connection:
        connection.exec_driver_sql(
            "INSERT INTO timers (run_id, timer_id, due_at) "
            "VALUES ('r', 't', '2030-01-01 00:00:00+00:00')"
        )
    upgrade(empty_engine)
    upgrade(empty_engine)
    assert current_revision(empty_engine) == HEAD
    assert _schema(empty_engine) == before
    with empty_engine.connect() as connection:
        assert connection.exec_driver_sql("SELECT count(*) FROM timers").scalar_one() == 1


def test_each_downgrade_undoes_its_upgrade_down_to_an_empty_database(
    empty_engine: Engine,
) -> None:
    schemas = [_tables(empty_engine)]  # schemas[i]: after the first i migrations
    for revision in REVISIONS:
        upgrade(empty_engine, revision)
        schemas.append(_tables(empty_engine))
    for undone in range(len(REVISIONS), 0, -1):
        _downgrade(empty_engine, "-1")
        before = REVISIONS[undone - 2] if undone >= 2 else None
        assert current_revision(empty_engine) == before
        assert _tables(empty_engine) == schemas[undone - 1], (
            f"downgrading {REVISIONS[undone - 1]} does not restore the schema before it"
        )
    assert _tables(empty_engine) == {}
    upgrade(empty_engine)
    assert current_revision(empty_engine) == HEAD
    assert _drift(empty_engine) == []


def test_definitions_and_runs_there_were_go_to_the_default_namespace(
    empty_engine: Engine,
) -> None:
    """0022 keys definitions by namespace: what was registered and started before it is
    the default namespace's, and the same name may then be registered elsewhere."""
    upgrade(empty_engine, "0020")
    with empty_engine.begin() as connection:
        connection.exec_driver_sql(
            "INSERT INTO workflows (name, version, digest, spec, registered_at, format) "
            "VALUES ('checkout', 1, 'd', '{}', '2026-01-01 00:00:00+00:00', 2)"
        )
        connection.exec_driver_sql(
            "INSERT INTO runs (id, workflow, version, status, input, current, created_at, "
            "updated_at) VALUES ('r1', 'checkout', 1, 'running', '{}', '[]', "
            "'2026-01-01 00:00:00+00:00', '2026-01-01 00:00:00+00:00')"
        )
    upgrade(empty_engine)
    with empty_engine.begin() as connection:
        found = connection.exec_driver_sql("SELECT namespace, name, version FROM workflows")
        assert found.all() == [("default", "checkout", 1)]
        run = connection.exec_driver_sql("SELECT namespace, workflow_namespace FROM runs")
        assert run.all() == [("default", "default")]
        connection.exec_driver_sql(
            "INSERT INTO workflows (namespace, name, version, digest, spec, registered_at, "
            "format) VALUES ('acme', 'checkout', 1, 'e', '{}', '2026-01-01 00:00:00+00:00', 2)"
        )
    _downgrade(empty_engine, "0020")  # the old key holds one of them: the default's
    with empty_engine.connect() as connection:
        kept = connection.exec_driver_sql("SELECT name, version, digest FROM workflows")
        assert kept.all() == [("checkout", 1, "d")]


def _tables(engine: Engine) -> dict[str, Any]:
    """The schema without alembic's own table (which stays, empty, once all is undone)."""
    return {name: table for name, table in _schema(engine).items() if name != "alembic_version"}


# Connect, say so, wait for the word, then migrate: the parent releases all at once.
_UPGRADER = """
import sys
from cairn.store.database import MIGRATIONS, current_revision, make_engine, upgrade
engine = make_engine(sys.argv[1])
with engine.connect():
    pass
print("ready", flush=True)
sys.stdin.readline()
upgrade(engine)
print("at", current_revision(engine), flush=True)
"""


def test_concurrent_upgrades_of_an_empty_database_all_succeed(empty_postgres: str) -> None:
    with psycopg.connect(empty_postgres) as conn:  # really empty to begin with
        tables = conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'")
        assert tables.fetchone() == (0,)
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", _UPGRADER, empty_postgres],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for _ in range(4)
    ]
    outputs = []
    try:
        for process in processes:
            assert process.stdout is not None
            assert process.stdout.readline().strip() == "ready"
        for process in processes:  # go
            assert process.stdin is not None
            process.stdin.write("go\n")
            process.stdin.flush()
        for process in processes:
            outputs.append(process.communicate(timeout=60)[0])
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.communicate()
    assert [p.returncode for p in processes] == [0] * 4, "\n".join(outputs)
    assert [out.strip().splitlines()[-1] for out in outputs] == [f"at {HEAD}"] * 4
    engine = make_engine(empty_postgres)
    try:
        assert current_revision(engine) == HEAD
        with engine.connect() as connection:
            versions = connection.exec_driver_sql("SELECT version_num FROM alembic_version")
            assert versions.scalars().all() == [HEAD]
        assert set(inspect(engine).get_table_names()) == TABLES | {"alembic_version"}
        assert _drift(engine) == []
    finally:
        engine.dispose()
