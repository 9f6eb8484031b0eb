"""A task's due lies between 1970 and the end of year 9999, as `delegate` now requires.

`delegate` took any finite number as a due. One far enough before 1970 or after year 9999
cannot be spelt as a date: the sweep's overdue notice failed on it and stopped the post office,
at each start again, and `task` could not show it.
Such dues are brought to the nearest end of the range (`agentpost.domain.tasks.check_due`):
one long past stays past, one far off stays far off. A downgrade leaves them so.

Revision ID: 0020
Revises: 0019
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None

# As agentpost.domain.tasks has them; a migration keeps its own copy, as it ran.
EARLIEST_DUE = 0.0
LATEST_DUE = 253402300799.0


def upgrade() -> None:
    op.get_bind().execute(
        sa.text(
            "UPDATE tasks SET due = CASE WHEN due < :earliest THEN :earliest ELSE :latest END "
            "WHERE due < :earliest OR due > :latest"
        ),
        {"earliest": EARLIEST_DUE, "latest": LATEST_DUE},
    )


def downgrade() -> None:
    pass
