"""The MCP face: tools, the inbox resource and push. Translates MCP to the services and back.

May import the services, the domain and `agentpost.config`; never the store or another face.
Only `adapter` imports the `mcp` SDK.
"""
