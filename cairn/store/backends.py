"""The store for a database: the one place that names the backends."""

from __future__ import annotations

from sqlalchemy import Engine

from cairn.errors import StoreError
from cairn.store.postgres import PostgresStore
from cairn.store.sql import Store
from cairn.store.sqlite import SqliteStore

BACKENDS: dict[str, type[Store]] = {"postgresql": PostgresStore, "sqlite": SqliteStore}


def store_for(engine: Engine) -> Store:
    """The backend for the engine's database: PostgreSQL, or SQLite (the embedded
    default)."""
    backend = BACKENDS.get(engine.dialect.name)
    if backend is None:
        raise StoreError(f"no store for {engine.dialect.name}: PostgreSQL or SQLite")
    return backend(engine)
