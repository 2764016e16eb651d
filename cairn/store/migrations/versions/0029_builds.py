"""Builds: which build of the code each worker runs, and the build each run started on
(docs/versions.md#pinned-builds-and-auto-upgrade).

Revision ID: 0029
Revises: 0028
Create Date: 2026-12-04

``builds``: one row per build a worker announced — the workflow versions it runs, the
earlier builds it declares itself compatible with, when it was first and last announced
(the database's clock). A build announced within the last few announce periods is live.
``runs.build``: the build a run started on; None for the runs before this migration and
for the runs of workflows that do not route by build.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0029"
down_revision = "0028"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
STAMP = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "builds",
        sa.Column("build", sa.String(64), primary_key=True),
        sa.Column("workflows", JSON, nullable=False),
        sa.Column("compatible", JSON, nullable=False),
        sa.Column("first_at", STAMP, nullable=False),
        sa.Column("last_at", STAMP, nullable=False),
    )
    op.create_index("ix_builds_last_at", "builds", ["last_at"])
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("build", sa.String(64)))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("build")
    op.drop_table("builds")
