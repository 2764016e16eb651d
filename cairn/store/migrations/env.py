"""Alembic environment: cairn runs migrations programmatically (``cairn db upgrade``)."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

from cairn.store.schema import metadata


def run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("cairn migrations run through cairn.store.database.upgrade()")
run(connection)
