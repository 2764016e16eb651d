"""A model call's operation holds 200 characters: a generic client's call is named by its
function's qualified name (``ctx.model(fn, provider=...)``), which 80 did not always hold.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("model_calls") as table:
        table.alter_column(
            "operation", existing_type=sa.String(80), type_=sa.String(200), existing_nullable=False
        )


def downgrade() -> None:
    with op.batch_alter_table("model_calls") as table:
        table.alter_column(
            "operation", existing_type=sa.String(200), type_=sa.String(80), existing_nullable=False
        )
