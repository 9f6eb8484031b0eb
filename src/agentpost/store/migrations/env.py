"""Alembic runs here on a connection the store hands over (never on a URL of its own)."""

from __future__ import annotations

from alembic import context

from agentpost.store.schema import metadata

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
