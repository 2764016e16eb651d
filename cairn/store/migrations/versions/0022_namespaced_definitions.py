"""Namespaced workflow definitions (docs/access.md#namespaces).

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-04

``workflows`` gains ``namespace``, part of its key: the same name and version may be
registered in two namespaces with different definitions. ``runs`` gains
``workflow_namespace``: whose definition a run executes — its own namespace's, or the
one that shared the workflow with it. ``workflow_shares``: which workflow (every
version, ``version`` 0, or one) a namespace's admin shared with which other namespace.

Every definition and run there was goes to ``default``. Both new columns keep that as
their server default, so a process of the previous release still running during a
rolling deploy registers and starts what it always did, in ``default``.

The downgrade keeps ``default``'s definitions only (the old key cannot hold the same
name and version twice) and forgets every share.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None

STAMP = sa.DateTime(timezone=True)


def upgrade() -> None:
    with op.batch_alter_table("workflows") as table:
        table.add_column(
            sa.Column("namespace", sa.String(100), nullable=False, server_default="default")
        )
        table.drop_constraint("pk_workflows", type_="primary")
        table.create_primary_key("pk_workflows", ["namespace", "name", "version"])
    with op.batch_alter_table("runs") as table:
        table.add_column(
            sa.Column(
                "workflow_namespace", sa.String(100), nullable=False, server_default="default"
            )
        )
    op.create_table(
        "workflow_shares",
        sa.Column("namespace", sa.String(100), nullable=False),
        sa.Column("workflow", sa.String(200), nullable=False),
        sa.Column("grantee", sa.String(100), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("created_at", STAMP, nullable=False),
        sa.Column("created_by", sa.String(300), nullable=False),
        sa.PrimaryKeyConstraint(
            "namespace", "workflow", "grantee", "version", name="pk_workflow_shares"
        ),
    )
    op.create_index(
        "ix_workflow_shares_grantee_workflow", "workflow_shares", ["grantee", "workflow"]
    )


def downgrade() -> None:
    op.drop_index("ix_workflow_shares_grantee_workflow", table_name="workflow_shares")
    op.drop_table("workflow_shares")
    with op.batch_alter_table("runs") as table:
        table.drop_column("workflow_namespace")
    op.execute("DELETE FROM workflows WHERE namespace <> 'default'")
    with op.batch_alter_table("workflows") as table:
        table.drop_constraint("pk_workflows", type_="primary")
        table.create_primary_key("pk_workflows", ["name", "version"])
        table.drop_column("namespace")
