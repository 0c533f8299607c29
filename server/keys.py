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
    baton:<ns>:session:{<sid>}:files     set   files the session's observations named
    baton:<ns>:handoffs                  zset  every packet id, scored by creation time (µs)
    baton:<ns>:handoff-inbox             hash  packet id -> receiving agent (ids are unique here)
    baton:<ns>:inboxes                   set   agents that have ever been handed a packet
    baton:<ns>:inbox:{<agent>}:packet:<id>       hash  the packet (msgpack list fields)
    baton:<ns>:inbox:{<agent>}:packet:<id>:log   list  its transitions (msgpack)
    baton:<ns>:inbox:{<agent>}:queued    zset  queued packet ids by creation time (FIFO)
    baton:<ns>:inbox:{<agent>}:claimed   zset  claimed packet ids by lease deadline
    baton:<ns>:inbox:{<agent>}:expiring  zset  packet ids with an expiry, by expiry time
    baton:<ns>:inbox:{<agent>}:failed    zset  failed packet ids by failure time
    baton:<ns>:inbox:{<agent>}:expired   zset  expired packet ids by expiry time
    baton:<ns>:events                    stream  recent writes, handoffs and outcomes (capped)
    baton:<ns>:inbox:{<agent>}:all       zset  every packet for the agent, by creation time
    baton:<ns>:sessions                  zset  session ids by start time
    baton:<ns>:sessions:active           zset  active session ids by last activity
    baton:<ns>:session:{<sid>}:obs       list  the session's observation ids, oldest first
    baton:<ns>:session:{<sid>}:obs:<oid> hash  one observation
    baton:<ns>:obs-seen:<hash>           string  dedupe marker (5 minutes) -> observation id
    baton:<ns>:obs-session               hash  observation id -> session id
    baton:<ns>:memory-expiry             zset  memory ids by expiry time (ttl_days)
    baton:<ns>:audit                     stream  append-only audit log (forget, expiry)
    baton:<ns>:{idx:<ns>}:docs           hash  search index: doc id -> msgpack entry
    baton:<ns>:{idx:<ns>}:meta           hash  search index: doc id -> "kind\tproject\tagent"
    baton:<ns>:{idx:<ns>}:t:<term>       zset  search postings: doc id -> normalised tf part of BM25
    baton:<ns>:{idx:<ns>}:scratch        zset  the search script's scratch space (always deleted)
    baton:<ns>:{idx:<ns>}:stats          hash  search index totals
    baton:<ns>:{ckpt:<ns>}:heads         list  signed checkpoint heads (json), oldest first
    baton:<ns>:{ckpt:<ns>}:leaves:<seq>  list  a checkpoint's leaves (msgpack chunks; latest 3)
    baton:<ns>:{ckpt:<ns>}:lock          string  held while a checkpoint is being taken

Global keys (not per namespace)::

    baton:namespaces                     set   namespaces with sessions, handoffs or memories
    baton:{tokens}:index                 hash  token id -> sha256 of its secret
    baton:{tokens}:token:<sha256>        hash  a token's record (json) and last_used_at
    baton:{tokens}:login:<sha256>        string  a dashboard login (sha256 of its cookie) ->
                                                 the token's sha256; expires with the login
    baton:ratelimit:<...>                Litestar's rate-limit store (per token)
    baton:auth-failures:<address>        string  failed logins from one client address (expires)
    baton:sweep-lock                     string  held by the one process sweeping right now
    baton:ready-probe                    string  written by /readyz (expires in a minute)

The braces are Redis Cluster hash tags: every key of one record hashes to the same slot, and
so does everything in one agent's inbox (its queues and its packets), so each Lua script
stays atomic on a cluster too.
"""

from __future__ import annotations

PREFIX = "baton"
DEFAULT_NAMESPACE = "default"


class Keys:
    """Key builder for one namespace."""

    __slots__ = ("base", "checkpoint_base", "index")

    def __init__(self, namespace: str = DEFAULT_NAMESPACE) -> None:
        self.base = f"{PREFIX}:{namespace}"
        self.index = f"{self.base}:{{idx:{namespace}}}"
        self.checkpoint_base = f"{self.base}:{{ckpt:{namespace}}}"

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

    def session_files(self, session_id: str) -> str:
        return f"{self.session(session_id)}:files"

    # -- handoffs -----------------------------------------------------------------------------

    @property
    def handoffs(self) -> str:
        return f"{self.base}:handoffs"

    @property
    def handoff_inbox(self) -> str:
        return f"{self.base}:handoff-inbox"

    @property
    def inboxes(self) -> str:
        return f"{self.base}:inboxes"

    def inbox(self, agent: str) -> str:
        """The common stem of every key of one agent's inbox."""
        return f"{self.base}:inbox:{{{agent}}}"

    def packet_prefix(self, agent: str) -> str:
        return f"{self.inbox(agent)}:packet:"

    def packet(self, agent: str, packet_id: str) -> str:
        return f"{self.packet_prefix(agent)}{packet_id}"

    def packet_log(self, agent: str, packet_id: str) -> str:
        return f"{self.packet(agent, packet_id)}:log"

    def queued(self, agent: str) -> str:
        return f"{self.inbox(agent)}:queued"

    def claimed(self, agent: str) -> str:
        return f"{self.inbox(agent)}:claimed"

    def expiring(self, agent: str) -> str:
        return f"{self.inbox(agent)}:expiring"

    def failed(self, agent: str) -> str:
        return f"{self.inbox(agent)}:failed"

    def expired(self, agent: str) -> str:
        return f"{self.inbox(agent)}:expired"

    @property
    def events(self) -> str:
        return f"{self.base}:events"

    def inbox_all(self, agent: str) -> str:
        return f"{self.inbox(agent)}:all"

    # -- sessions, observations, memories -----------------------------------------------------

    @property
    def sessions(self) -> str:
        return f"{self.base}:sessions"

    @property
    def active_sessions(self) -> str:
        return f"{self.base}:sessions:active"

    def observations(self, session_id: str) -> str:
        return f"{self.session(session_id)}:obs"

    def observation(self, session_id: str, observation_id: str) -> str:
        return f"{self.session(session_id)}:obs:{observation_id}"

    @property
    def observation_sessions(self) -> str:
        return f"{self.base}:obs-session"

    def observation_seen(self, digest: str) -> str:
        return f"{self.base}:obs-seen:{digest}"

    @property
    def memory_expiry(self) -> str:
        return f"{self.base}:memory-expiry"

    @property
    def audit(self) -> str:
        return f"{self.base}:audit"

    # -- search index (one hash tag per namespace) -------------------------------------------

    @property
    def search_docs(self) -> str:
        return f"{self.index}:docs"

    @property
    def search_scratch(self) -> str:
        return f"{self.index}:scratch"

    @property
    def search_meta(self) -> str:
        return f"{self.index}:meta"

    @property
    def search_stats(self) -> str:
        return f"{self.index}:stats"

    @property
    def search_term_prefix(self) -> str:
        return f"{self.index}:t:"

    # -- checkpoints (one hash tag: one slot for a namespace's checkpoints) ------------------

    @property
    def checkpoints(self) -> str:
        return f"{self.checkpoint_base}:heads"

    def checkpoint_leaves(self, seq: int) -> str:
        """A checkpoint's leaves (msgpack chunks), written before its head is appended."""
        return f"{self.checkpoint_base}:leaves:{seq}"

    @property
    def checkpoint_lock(self) -> str:
        return f"{self.checkpoint_base}:lock"


NAMESPACES = f"{PREFIX}:namespaces"
# One hash tag for every token key: adding and revoking stay single-slot transactions.
TOKENS = f"{PREFIX}:{{tokens}}:index"
RATE_LIMIT_NAMESPACE = f"{PREFIX}:ratelimit"
SWEEP_LOCK = f"{PREFIX}:sweep-lock"
READY_PROBE = f"{PREFIX}:ready-probe"


def token_key(sha: str) -> str:
    return f"{PREFIX}:{{tokens}}:token:{sha}"


def login_key(sha: str) -> str:
    return f"{PREFIX}:{{tokens}}:login:{sha}"


def auth_failures_key(address: str) -> str:
    return f"{PREFIX}:auth-failures:{address}"
