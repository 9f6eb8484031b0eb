"""The MCP face: tools, the inbox resource and push. Translates MCP to a desk and back.

The tools call a `Desk` (agentpost.domain.desk): the local services bound to a caller (`desk`),
or, for `agentpost mcp --url`, the Python client bound to a remote session (`remote`). May import
the services, the client, the domain and `agentpost.config`; never the store or another face.
Only `adapter` imports the `mcp` SDK.
"""
