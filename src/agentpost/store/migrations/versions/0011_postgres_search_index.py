"""PostgreSQL indexes the words of every message, so a search no longer reads them all.

A search computed each message's words anew (`to_tsvector` over its subject and body): on
50,000 messages a word found in few of them took seconds. A GIN index of that very expression
(`store.postgres.document`, which a test keeps the same) answers it in milliseconds. SQLite
has its own index (FTS5, migration 0001): nothing changes there.

Building it reads every message once, and writes of mail wait meanwhile (14 to 20 s for
50,000 messages on a 2-core guest), on other replicas up to their lock timeout, then refused
as `unavailable`. Not CONCURRENTLY: that cannot run inside the migration's transaction, whose
advisory lock keeps two replicas from migrating at once.

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

_DOCUMENT = (
    "to_tsvector('simple'::regconfig, regexp_replace(normalize(regexp_replace("
    "normalize(subject || ' ' || body, NFD),"
    r" E'([A-Za-z])[\\u0300-\\u036f](?![\\u0300-\\u036f])', E'\\1', 'g'), NFC),"
    " '[^[:alnum:]]+', ' ', 'g'))"
)


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"CREATE INDEX ix_messages_search ON messages USING gin ({_DOCUMENT})")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP INDEX ix_messages_search")
