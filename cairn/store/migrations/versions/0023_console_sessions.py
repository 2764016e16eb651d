"""The console's signed-in sessions (docs/console.md#sessions).

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-03

``console_sessions``: one row per signed-in browser — the SHA-256 of its session token
(the cookie holds the token; the table only its digest, so a copy of the table signs
nobody in), the principal it was started for (a snapshot: name, namespace, role, whether
it reads payloads, the API key it signed in with), and when it ends. Sign-out deletes
the row; an expired row is refused and swept.

``console_logins``: a sign-in through OpenID Connect between leaving for the identity
provider and coming back — the digest of the browser's login cookie, and the login's
secrets (state, nonce, PKCE verifier) kept on the server; taken once by the callback.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None

STAMP = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "console_sessions",
        sa.Column("digest", sa.LargeBinary(), nullable=False),
        sa.Column("namespace", sa.String(100), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("kind", sa.String(20), nullable=False),
        sa.Column("role", sa.String(20), nullable=False),
        sa.Column("payloads", sa.Boolean(), nullable=False),
        sa.Column("key_id", sa.String(40), nullable=True),
        sa.Column("created_at", STAMP, nullable=False),
        sa.Column("expires_at", STAMP, nullable=False),
        sa.CheckConstraint(
            "role IN ('viewer', 'approver', 'operator', 'admin')",
            name=op.f("ck_console_sessions_role"),
        ),
        sa.PrimaryKeyConstraint("digest", name="pk_console_sessions"),
    )
    op.create_index("ix_console_sessions_expires_at", "console_sessions", ["expires_at"])
    op.create_table(
        "console_logins",
        sa.Column("digest", sa.LargeBinary(), nullable=False),
        sa.Column("login", sa.Text(), nullable=False),
        sa.Column("expires_at", STAMP, nullable=False),
        sa.PrimaryKeyConstraint("digest", name="pk_console_logins"),
    )


def downgrade() -> None:
    op.drop_table("console_logins")
    op.drop_index("ix_console_sessions_expires_at", table_name="console_sessions")
    op.drop_table("console_sessions")
