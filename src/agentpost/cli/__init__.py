"""The command line face. Translates commands to the services and back.

May import the services, the client (a mailbox command given `--url` acts on a remote service),
the domain and `agentpost.config`; never the store or another face (`agentpost mcp` starts the
MCP face's entry points, by import inside the command).
"""
