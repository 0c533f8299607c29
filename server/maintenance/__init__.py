"""Whole-namespace work: signed checkpoints, export and import, reindexing, forgetting a
namespace.
"""
