"""Status columns hold only the statuses their state machines know, and the step's
one-statement writes can refuse a stale transition.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-01

A CHECK constraint on each status column (runs, node_executions, effects): a bug that
writes a status no state machine has fails loudly instead of leaving a row that nothing
reads right. Before 0011 an execution cut short by its node's timeout while the node
would retry was recorded ``retrying`` (a node's status, not an execution's); it is
``timed_out``, which is what that attempt did.

On PostgreSQL, ``cairn_refuse(message)`` raises SQLSTATE CRN01: the step's writes are
one statement (or one pipeline with its COMMIT), so a guard that finds nothing to move
must fail the statement itself — it is too late to look at a row count afterwards.
"""

from __future__ import annotations

from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

# The statuses as of this revision (a migration does not follow later enums).
RUN_STATUSES = (
    "pending",
    "running",
    "waiting",
    "cancelling",
    "compensating",
    "succeeded",
    "failed",
    "cancelled",
    "compensated",
    "rolled_back",
)
EXECUTION_STATUSES = (
    "scheduled",
    "running",
    "succeeded",
    "failed",
    "cancelled",
    "timed_out",
    "skipped",
    "held",
)
EFFECT_STATUSES = ("intent", "applied", "failed", "unknown", "absent", "flagged", "compensated")

CHECKS = {
    "runs": RUN_STATUSES,
    "node_executions": EXECUTION_STATUSES,
    "effects": EFFECT_STATUSES,
}

REFUSE = """
CREATE OR REPLACE FUNCTION cairn_refuse(message text) RETURNS integer
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
  RAISE EXCEPTION USING ERRCODE = 'CRN01', MESSAGE = message;
END
$$
"""


def _condition(statuses: tuple[str, ...]) -> str:
    return "status IN (" + ", ".join(f"'{status}'" for status in statuses) + ")"


def upgrade() -> None:
    op.execute("UPDATE node_executions SET status = 'timed_out' WHERE status = 'retrying'")
    for table, statuses in CHECKS.items():
        with op.batch_alter_table(table) as batch:
            batch.create_check_constraint(op.f(f"ck_{table}_status"), _condition(statuses))
    if op.get_context().dialect.name == "postgresql":
        op.execute(REFUSE)


def downgrade() -> None:
    if op.get_context().dialect.name == "postgresql":
        op.execute("DROP FUNCTION IF EXISTS cairn_refuse(text)")
    for table in CHECKS:
        with op.batch_alter_table(table) as batch:
            batch.drop_constraint(op.f(f"ck_{table}_status"), type_="check")
