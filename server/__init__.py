"""Baton's server side: the Redis store, the REST API, the embedded Redis and the CLI."""
