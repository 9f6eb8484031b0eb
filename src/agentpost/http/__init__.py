"""The HTTP face: the REST API under /v1, its OpenAPI, server-sent events and authentication.

Translates HTTP to the services and back, nothing more. It never imports another face; the
service module (`agentpost.service`) mounts the MCP face beside it.
"""
