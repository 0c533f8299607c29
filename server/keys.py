"""Every Redis key Baton uses, built in one place.

Layout (``<ns>`` is the namespace, ``<ref>`` a validated ref such as ``listing/553/assessment``)::

    baton:<ns>:rec:{<ref>}:head          hash  current version, hash, confidence, outcome counts
    baton:<ns>:rec:{<ref>}:v:<n>         hash  one immutable version (plus superseded_by/confidence)
    baton:<ns>:rec:{<ref>}:outcomes      list  the record's hash-chained outcomes log (msgpack)
    baton:<ns>:refs                      zset  every ref (score 0), for listing by prefix
    baton:<ns>:tag:<tag>                 set   refs whose versions carried <tag> (a superset)
    baton:<ns>:agents                    set   agent ids that wrote to the namespace
    baton:<ns>:session:{<sid>}           hash  session metadata
    baton:<ns>:session:{<sid>}:touched   hash  ref -> version the session last read or wrote

The braces are Redis Cluster hash tags: every key of one record hashes to the same slot, so
the record's Lua scripts stay atomic on a cluster too.
"""

from __future__ import annotations

PREFIX = "baton"
DEFAULT_NAMESPACE = "default"


class Keys:
    """Key builder for one namespace."""

    __slots__ = ("base",)

    def __init__(self, namespace: str = DEFAULT_NAMESPACE) -> None:
        self.base = f"{PREFIX}:{namespace}"

    def record(self, ref: str) -> str:
        """The common stem of every key of one record."""
        return f"{self.base}:rec:{{{ref}}}"

    def head(self, ref: str) -> str:
        return f"{self.record(ref)}:head"

    def version(self, ref: str, version: int) -> str:
        return f"{self.record(ref)}:v:{version}"

    def outcomes(self, ref: str) -> str:
        return f"{self.record(ref)}:outcomes"

    @property
    def refs(self) -> str:
        return f"{self.base}:refs"

    def tag(self, tag: str) -> str:
        return f"{self.base}:tag:{tag}"

    @property
    def agents(self) -> str:
        return f"{self.base}:agents"

    def session(self, session_id: str) -> str:
        return f"{self.base}:session:{{{session_id}}}"

    def session_touched(self, session_id: str) -> str:
        return f"{self.session(session_id)}:touched"
