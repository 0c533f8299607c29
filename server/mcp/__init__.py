"""The MCP transports: the SDK's low-level server built from the operation table, on stdio
(``baton mcp``) and mounted on the REST app at ``/mcp``.
"""
