"""Use cases in transactions: presence, mail, channels, keys, administration, the directory,
events and webhooks. Transport-free.

May import the store, the domain and `agentpost.config`; never a face (mcp, http, cli).
"""

from agentpost.services.admin import Admin
from agentpost.services.directory import Directory
from agentpost.services.events import Events
from agentpost.services.keys import Keys
from agentpost.services.mailbox import Mailbox
from agentpost.services.post_office import PostOffice
from agentpost.services.webhooks import Webhooks

__all__ = [
    "Admin",
    "Directory",
    "Events",
    "Keys",
    "Mailbox",
    "PostOffice",
    "Webhooks",
]
