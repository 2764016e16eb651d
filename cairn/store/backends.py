"""The store for a database: the one place that names the backends."""

from __future__ import annotations

import importlib

from sqlalchemy import Engine

from cairn.errors import StoreError
from cairn.store.sql import Store

# Each backend's module and class, imported for the database in use only: the embedded
# default (SQLite) does not load psycopg and PostgreSQL's hot path.
BACKENDS: dict[str, tuple[str, str]] = {
    "postgresql": ("cairn.store.postgres", "PostgresStore"),
    "sqlite": ("cairn.store.sqlite", "SqliteStore"),
}


def store_for(engine: Engine) -> Store:
    """The backend for the engine's database: PostgreSQL, or SQLite (the embedded
    default)."""
    backend = BACKENDS.get(engine.dialect.name)
    if backend is None:
        raise StoreError(f"no store for {engine.dialect.name}: PostgreSQL or SQLite")
    module, name = backend
    store_class: type[Store] = getattr(importlib.import_module(module), name)
    return store_class(engine)
