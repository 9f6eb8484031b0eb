"""The Python client: a remote agentpost service's REST API as typed methods (httpx).

`AsyncClient` and `Client` (blocking) have one method per REST operation, named by its OpenAPI
operation id, returning the domain types the services return and raising `AgentpostError` with
the service's stable code. `agentpost.client.desk.RemoteDesk` binds a client to one session, as
the MCP tools and the command line use it.

May import the domain and `agentpost.config`; never the services, the store or a face: the
client speaks to the service only over HTTP.
"""

from agentpost.client.async_client import AsyncClient
from agentpost.client.sync_client import Client

__all__ = ["AsyncClient", "Client"]
