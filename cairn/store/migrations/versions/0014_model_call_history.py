"""A model call's whole conversation, when what it sent was compacted: ``history`` holds
the digests of every message the handler passed (its messages stored once each, as for
``messages``), beside ``messages`` — what was sent in the end.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-02

A node with a context budget (``context: {max_tokens, summarize}``) sends a summary in
place of its older messages; the full history stays in the record for audit. Null for a
call sent as the handler gave it.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("model_calls") as table:
        table.add_column(sa.Column("history", JSON, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("model_calls") as table:
        table.drop_column("history")
