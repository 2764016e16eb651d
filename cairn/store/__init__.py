"""The store: its port (:mod:`~cairn.store.sql`), its backends (PostgreSQL, SQLite; only
:mod:`~cairn.store.backends` names them), the schema and its migrations; see
``docs/architecture.md``.
"""
