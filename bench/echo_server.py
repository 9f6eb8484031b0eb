"""The reference for the MCP figures: the SDK's own high-level server with one async echo tool.

    python bench/echo_server.py           # on stdio (figure 3)
    python bench/echo_server.py --http    # Streamable HTTP at /mcp, uvicorn on a free loopback port

It is the floor any MCP server on `mcp` 2.x can reach on this machine: one JSON-RPC round trip,
argument validation and a structured result, and nothing else. Over HTTP it is served the way
`agentpost serve` serves `/mcp`: one uvicorn worker with the same defaults (access log on),
Host and Origin checks for loopback; it prints uvicorn's "running on" line with the port the
kernel chose.
"""

from __future__ import annotations

import sys

from mcp.server import MCPServer

server = MCPServer("echo")


@server.tool()
async def echo(text: str) -> str:
    """Repeat text back."""
    return text


def serve_http() -> None:
    import uvicorn
    from mcp.server.transport_security import TransportSecuritySettings

    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"],
        allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"],
    )
    app = server.streamable_http_app(transport_security=security)
    uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="info")).run()


if __name__ == "__main__":
    if "--http" in sys.argv[1:]:
        serve_http()
    else:
        server.run()
