"""What a long-running process makes while it starts is kept out of the garbage collector.

A started `agentpost serve` holds some 200,000 objects that live as long as it does (SQLAlchemy's
tables and compiled statements, pydantic's models, FastAPI's routes, the MCP SDK). Each full
collection walked every one of them, about 130 ms on a 2-core guest and 16 times in one run of
`bench mcp_http`: some 0.1 ms of server CPU per MCP call, a cost the SDK's echo server, with a
tenth of the objects, hardly pays (docs/BENCHMARKS.md). Once started, a process moves them to
the permanent generation (`gc.freeze`); what it makes afterwards is collected as ever.
"""

from __future__ import annotations

import gc


def settle() -> None:
    """Collect what starting left behind, then freeze the rest: it is never garbage."""
    gc.collect()  # garbage is collected first, never kept frozen for the process's life
    gc.freeze()
