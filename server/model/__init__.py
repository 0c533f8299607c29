"""The vocabulary every floor shares, the Python client included: the wire types, errors,
bounds and validation, key names, the clock, identities and grants, the canonical encoding
that is hashed. Nothing here talks to Redis.
"""
