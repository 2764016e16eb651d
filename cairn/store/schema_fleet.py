"""What the fleet reports about itself, as stored: the definitions a worker could not
load (migration 0026), and the builds workers announce (0029). Declared on
:data:`~cairn.store.schema.metadata`; that module imports this one last."""

from __future__ import annotations

from sqlalchemy import Column, DateTime, Index, Integer, String, Table, Text

from cairn.store.schema import Json, metadata

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

# The builds workers announce (migration 0029): the workflow versions each runs
# (``acme/checkout@2``), the builds it can take over, when first and last announced.
builds = Table(
    "builds",
    metadata,
    Column("build", String(64), primary_key=True),
    Column("workflows", Json, nullable=False),
    Column("compatible", Json, nullable=False),
    Column("first_at", DateTime(timezone=True), nullable=False),
    Column("last_at", DateTime(timezone=True), nullable=False),
    Index("ix_builds_last_at", "last_at"),
)
