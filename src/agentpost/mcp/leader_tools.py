"""Leadership tools (group `coord`): who leads a project, claiming and releasing the seat."""

from __future__ import annotations

from agentpost.domain.desk import Desk
from agentpost.mcp.adapter import MailboxServer


def register_leader_tools(server: MailboxServer, desk: Desk) -> None:
    """Registers nothing yet."""
