"""The run's current state, cached on its row.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30

Restoring a run from its latest snapshot plus the events after it costs two queries and
a replay through the decider on every step; the row is updated on every step anyway, so
it also carries the state as of ``last_seq`` (written in the same transaction, so never
out of date). Snapshots and the event log stay the record; the cache is skipped for
states larger than CAIRN_STATE_CACHE_BYTES.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

Json = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("state", Json, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("state")
