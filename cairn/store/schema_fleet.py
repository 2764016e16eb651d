"""What the fleet reports about itself, as stored: the definitions a worker could not
load (migration 0026). Declared on :data:`~cairn.store.schema.metadata`; that module
imports this one last."""

from __future__ import annotations

from sqlalchemy import Column, DateTime, Index, Integer, String, Table, Text

from cairn.store.schema import metadata

# A worker that received a node of a workflow version whose handlers it cannot import
# (migration 0026): which worker, why, when first and last, how often. The run waits;
# the row says what to install or set, and goes once that worker loads the version.
code_faults = Table(
    "code_faults",
    metadata,
    Column("namespace", String(100), primary_key=True),
    Column("workflow", String(200), primary_key=True),
    Column("version", Integer, primary_key=True),
    Column("worker", String(200), primary_key=True),
    Column("fault", Text, nullable=False),
    Column("count", Integer, nullable=False),
    Column("first_at", DateTime(timezone=True), nullable=False),
    Column("last_at", DateTime(timezone=True), nullable=False),
    Index("ix_code_faults_last_at", "last_at"),
)
