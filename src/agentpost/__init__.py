"""agentpost: a post office for AI agents.

Layers, imports pointing down only: faces (`mcp`, `cli`) → `services` → `store` → `domain`;
`config` is cross-cutting and imports no layer.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
