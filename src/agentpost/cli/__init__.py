"""The command line face. Translates commands to the services and back.

May import the services, the domain and `agentpost.config`; never the store or another face
(`agentpost mcp` starts the MCP face's entry point, by import inside the command).
"""
