"""File reservations (group `coord`): reserve, renew, release and list advisory claims on paths."""

from __future__ import annotations

from agentpost.domain.desk import Desk
from agentpost.mcp.adapter import MailboxServer


def register_reservation_tools(server: MailboxServer, desk: Desk) -> None:
    """Registers nothing yet."""
