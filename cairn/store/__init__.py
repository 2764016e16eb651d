"""The store: the PostgreSQL (or embedded SQLite) schema, migrations and repositories.

Empty until durable execution lands; see ``docs/architecture.md``.
"""
