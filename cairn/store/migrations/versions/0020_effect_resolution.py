"""What a person recorded about an effect the reconciler could not settle
(docs/effects.md#resolving-what-needs-a-person): the outcome they saw at the external
system, their note, who and when — and the status it had before. Null for every effect
before this revision, and for any nobody resolved.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    json = sa.JSON().with_variant(JSONB(), "postgresql")
    with op.batch_alter_table("effects") as table:
        table.add_column(sa.Column("resolution", json, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("effects") as table:
        table.drop_column("resolution")
