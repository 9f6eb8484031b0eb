"""Delegated tasks and blocking questions (group `coord`): delegate, tasks, update_task,
request, respond, check_request."""

from __future__ import annotations

from agentpost.domain.desk import Desk
from agentpost.mcp.adapter import MailboxServer


def register_task_tools(server: MailboxServer, desk: Desk) -> None:
    """Registers nothing yet."""
