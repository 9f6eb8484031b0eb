"""Use cases in transactions: presence, mail, channels, keys, administration, the directory,
events and webhooks, leadership, tasks, requests and reservations. Transport-free.

May import the store, the domain and `agentpost.config`; never a face (mcp, http, cli).

The services are imported on first use (a module `__getattr__`): `agentpost mcp --url` needs
only `local_identity` from here, and must start without loading the store and SQLAlchemy.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

__all__ = ["Admin", "Directory", "Events", "Keys", "Mailbox", "PostOffice", "Webhooks"]

_HOMES = {
    "Admin": "agentpost.services.admin",
    "Directory": "agentpost.services.directory",
    "Events": "agentpost.services.events",
    "Keys": "agentpost.services.keys",
    "Mailbox": "agentpost.services.mailbox",
    "PostOffice": "agentpost.services.post_office",
    "Webhooks": "agentpost.services.webhooks",
}

if TYPE_CHECKING:
    from agentpost.services.admin import Admin
    from agentpost.services.directory import Directory
    from agentpost.services.events import Events
    from agentpost.services.keys import Keys
    from agentpost.services.mailbox import Mailbox
    from agentpost.services.post_office import PostOffice
    from agentpost.services.webhooks import Webhooks


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        return getattr(import_module(_HOMES[name]), name)
    raise AttributeError(f"module 'agentpost.services' has no attribute {name!r}")
