"""agentpost: a post office for AI agents.

Layers, imports pointing down only: faces (`mcp`, `http`, `cli`) → `services` → `store` →
`domain`; the Python client (`client`) speaks to a service over HTTP and imports only the
domain; `config` is cross-cutting and imports no layer.

`agentpost.Client` and `agentpost.AsyncClient` are the Python client. They are imported on first
use (a module `__getattr__`): every part of agentpost imports this package for its version, and
`agentpost mcp` must start without loading the client. `AgentpostError` (what the clients
raise, with its stable `ErrorCode`) comes the same way, so a program catches it from here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = ["AgentpostError", "AsyncClient", "Client", "ErrorCode", "__version__"]

if TYPE_CHECKING:
    from agentpost.client import AsyncClient, Client
    from agentpost.domain.errors import AgentpostError, ErrorCode


def __getattr__(name: str) -> Any:
    if name in ("AsyncClient", "Client"):
        from agentpost import client

        return getattr(client, name)
    if name in ("AgentpostError", "ErrorCode"):
        from agentpost.domain import errors

        return getattr(errors, name)
    raise AttributeError(f"module 'agentpost' has no attribute {name!r}")
