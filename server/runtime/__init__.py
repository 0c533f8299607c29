"""The runtime: settings, the connection to Redis (or the embedded Valkey it starts), commands
sent together, Lua scripts, how Redis replies decode, logs, the installation's signing key,
how HTTP apps are served.
"""
