"""The REST API (Litestar). Build it with :func:`baton.server.api.app.create_app`."""
