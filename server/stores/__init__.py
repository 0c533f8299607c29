"""The stores of one namespace: records, handoffs, outcomes, memories, sessions, threads,
notices, grants, tokens, the audit and activity logs, and the topology (one Redis or a
cluster) they write through. ``backend.Namespace`` puts them together.
"""
