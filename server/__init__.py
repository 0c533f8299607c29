"""Baton's server side, in floors, lowest first: ``model`` (the vocabulary), ``runtime``
(Redis and the embedded Valkey), ``retrieval`` (search), ``stores``, the operation table
(``operation``, ``operations``), ``maintenance``, the transports (``api``, ``mcp``) and the
CLI. A module imports from its own floor or lower ones (docs/architecture.md)."""
