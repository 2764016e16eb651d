"""What a definition last declared of each schedule (docs/flow-control.md#schedules).

Revision ID: 0028
Revises: 0027
Create Date: 2026-12-03

``schedules.declared``: the schedule's definition columns as the last registration of a
definition declaring it wrote them; None for a schedule added by hand. Registering a
definition again (every process does at start) changes a schedule only where the file's
declaration changed since, so an operator's change to a declared schedule, and its pause,
stand until the next deploy changes that declaration.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0028"
down_revision = "0027"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("schedules") as batch:
        batch.add_column(sa.Column("declared", JSON))


def downgrade() -> None:
    with op.batch_alter_table("schedules") as batch:
        batch.drop_column("declared")
