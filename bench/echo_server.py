"""The reference for figure 3: the SDK's own high-level server with one async echo tool, on stdio.

    python bench/echo_server.py

It is the floor any stdio MCP server on `mcp` 2.x can reach on this machine: one JSON-RPC
round trip, argument validation and a structured result, and nothing else.
"""

from __future__ import annotations

from mcp.server import MCPServer

server = MCPServer("echo")


@server.tool()
async def echo(text: str) -> str:
    """Repeat text back."""
    return text


if __name__ == "__main__":
    server.run()
