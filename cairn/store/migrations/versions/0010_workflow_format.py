"""The definition format each registered workflow version was compiled under.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01

Format 2 gave tasks a default retry policy and timeout. A version registered before
(format 1) must keep meaning what it meant when its runs were pinned to it: a version
is immutable, and so are its semantics. Rows that exist are format 1.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "workflows", sa.Column("format", sa.Integer(), nullable=False, server_default="1")
    )


def downgrade() -> None:
    op.drop_column("workflows", "format")
