"""Indexes for listing a namespace's runs by status, by workflow, or by both.

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-03

``GET /v1/runs`` pages newest first by (created_at, id), and ``GET /v1/runs/counts``
counts runs by status up to a cap. With a status or workflow filter, the index of 0008
(namespace, created_at, id) would read every run of the namespace until a page of
matches was found — at a million runs, a rare status read the whole namespace. Each
filter now has an index whose order is the page's, so a page reads its own rows only,
and a capped count reads at most the cap's index entries.
"""

from __future__ import annotations

from alembic import op

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None

INDEXES = {
    "ix_runs_listing_status": ["namespace", "status", "created_at", "id"],
    "ix_runs_listing_workflow": ["namespace", "workflow", "created_at", "id"],
    "ix_runs_listing_workflow_status": ["namespace", "workflow", "status", "created_at", "id"],
}


def upgrade() -> None:
    for name, columns in INDEXES.items():
        op.create_index(name, "runs", columns)


def downgrade() -> None:
    for name in INDEXES:
        op.drop_index(name, table_name="runs")
