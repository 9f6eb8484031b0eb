"""Use cases in transactions: presence, mailbox, channels. Transport-free.

May import the store, the domain and `agentpost.config`; never a face (mcp, http, cli).
"""

from agentpost.services.mailbox import Inbox, Mailbox, Notices
from agentpost.services.post_office import PostOffice

__all__ = ["Inbox", "Mailbox", "Notices", "PostOffice"]
