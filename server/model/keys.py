"""Every Redis key Baton uses, built in one place.

docs/data-model.md lists each key shape with its type and contents (a test keeps the two
equal). The braces are Redis Cluster hash tags: every key of one record hashes to the same
slot, and so does everything in one agent's inbox (its queues and its packets), so each Lua
script stays atomic on a cluster too.
"""

from __future__ import annotations

import re

PREFIX = "baton"
DEFAULT_NAMESPACE = "default"


class Inbox:
    """The keys of one agent's inbox, all in that agent's hash slot: each packet's hash and
    log, a sorted set of packet ids per state (``done`` has none: it is ``all`` less the
    others), and the packets by expiry time (``expiring``)."""

    __slots__ = ("stem",)
    # The states whose packets have a set of their own, in the order the dashboard shows.
    STATES = ("held", "queued", "claimed", "failed", "expired")

    def __init__(self, stem: str) -> None:
        self.stem = stem

    def of(self, state: str) -> str:
        """The set of the packets in ``state`` (one of :data:`STATES`)."""
        if state not in self.STATES:
            raise ValueError(f"packets {state} have no set of their own")
        return f"{self.stem}:{state}"

    @property
    def sets(self) -> tuple[str, ...]:
        """Every sorted set of the inbox: one per state, ``expiring`` and ``all``."""
        return (*(self.of(state) for state in self.STATES), self.expiring, self.all)

    def packet(self, packet_id: str) -> str:
        return f"{self.stem}:packet:{packet_id}"

    def log(self, packet_id: str) -> str:
        return f"{self.packet(packet_id)}:log"

    @property
    def held(self) -> str:
        """Packets held until their sender's session ends (``deliver: session_end``)."""
        return self.of("held")

    @property
    def queued(self) -> str:
        return self.of("queued")

    @property
    def claimed(self) -> str:
        return self.of("claimed")

    @property
    def failed(self) -> str:
        return self.of("failed")

    @property
    def expired(self) -> str:
        return self.of("expired")

    @property
    def expiring(self) -> str:
        return f"{self.stem}:expiring"

    @property
    def all(self) -> str:
        return f"{self.stem}:all"


class Thread:
    """The keys of one LangGraph thread (``baton.server.stores.threads``), all in the thread's hash
    slot: its checkpoints in order, each checkpoint's entry, the pending writes and their
    index, the runs that wrote checkpoints and the checkpoints of a ``DeltaChannel``.
    Members and fields join a checkpoint's namespace, id, task and index with NUL, which
    none of them may hold."""

    __slots__ = ("stem",)

    def __init__(self, stem: str) -> None:
        self.stem = stem

    @property
    def checkpoints(self) -> str:
        return f"{self.stem}:checkpoints"

    @property
    def entries(self) -> str:
        return f"{self.stem}:entries"

    @property
    def writes(self) -> str:
        return f"{self.stem}:writes"

    @property
    def write_index(self) -> str:
        return f"{self.stem}:write-index"

    @property
    def runs(self) -> str:
        return f"{self.stem}:runs"

    @property
    def deltas(self) -> str:
        return f"{self.stem}:deltas"

    @property
    def all(self) -> tuple[str, ...]:
        """Every key of the thread, in the order its scripts take them."""
        return (
            self.checkpoints,
            self.entries,
            self.writes,
            self.write_index,
            self.runs,
            self.deltas,
        )


class Keys:
    """Key builder for one namespace."""

    __slots__ = ("base", "checkpoint_base", "index", "item_expiry_base")

    def __init__(self, namespace: str = DEFAULT_NAMESPACE) -> None:
        self.base = f"{PREFIX}:{namespace}"
        self.index = f"{self.base}:{{idx:{namespace}}}"
        self.checkpoint_base = f"{self.base}:{{ckpt:{namespace}}}"
        self.item_expiry_base = f"{self.base}:lg:{{expiry:{namespace}}}"

    @property
    def everything(self) -> str:
        """A SCAN pattern matching every key of the namespace."""
        return f"{self.base}:*"

    def record(self, ref: str) -> str:
        """The common stem of every key of one record."""
        return f"{self.base}:rec:{{{ref}}}"

    def head(self, ref: str) -> str:
        return f"{self.record(ref)}:head"

    @property
    def heads(self) -> str:
        """A SCAN pattern matching every record's head key."""
        return f"{self.base}:rec:{{*}}:head"

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

    def session_notices(self, session_id: str) -> str:
        """The id of the last notice an MCP session over HTTP was given with a tool result."""
        return f"{self.session(session_id)}:notices-after"

    def session_seen(self, session_id: str) -> str:
        """The session's reads and writes in order, ``time TAB ref TAB version`` each."""
        return f"{self.session(session_id)}:seen"

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

    def inbox(self, agent: str) -> Inbox:
        """One agent's inbox: its packets and the sets that order them."""
        return Inbox(f"{self.base}:inbox:{{{agent}}}")

    @property
    def events(self) -> str:
        return f"{self.base}:events"

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

    def observation_memories(self, observation_id: str) -> str:
        return f"{self.base}:obs-memories:{observation_id}"

    def observation_seen(self, digest: str) -> str:
        return f"{self.base}:obs-seen:{digest}"

    @property
    def memory_expiry(self) -> str:
        return f"{self.base}:memory-expiry"

    @property
    def audit(self) -> str:
        return f"{self.base}:audit"

    @property
    def grants(self) -> str:
        """Each confined agent's grants (``baton.server.model.grants``)."""
        return f"{self.base}:grants"

    @property
    def pinned(self) -> str:
        """Every pin of the namespace's live packets, ``ref NUL packet id`` (score 0): a
        ref's packets are one lexical range (:func:`pinned_member`)."""
        return f"{self.base}:pinned"

    def notices(self, agent: str) -> str:
        """The agent's notices (a stream): pins of its packets that moved on."""
        return f"{self.base}:notices:{{{agent}}}"

    def webhook(self, agent: str) -> str:
        """The agent's webhook: ``url``, ``secret``, ``created_at``."""
        return f"{self.webhooks_stem}{{{agent}}}"

    def webhook_deliveries(self, agent: str) -> str:
        """The agent's newest webhook delivery attempts (a list, newest last)."""
        return f"{self.webhook(agent)}:deliveries"

    @property
    def webhooks_stem(self) -> str:
        """What every webhook key starts with (settings: an import that replaces the
        namespace keeps them)."""
        return f"{self.base}:webhook:"

    def denial(self, digest: str) -> str:
        """A refusal recently audited (agent and target digested), so a loop adds one entry."""
        return f"{self.base}:denied:{digest}"

    # -- LangGraph threads (one hash tag per thread) ----------------------------------------

    def thread(self, digest: str) -> Thread:
        """One LangGraph thread's keys (``digest``: its id's, ``baton.server.stores.threads``)."""
        return Thread(f"{self.base}:lg:{{{digest}}}")

    @property
    def threads(self) -> str:
        """A SCAN pattern matching every key of the namespace's LangGraph threads."""
        return f"{self.base}:lg:*"

    @property
    def item_deadlines(self) -> str:
        """When each LangGraph store item with a ttl expires
        (``baton.server.stores.item_expiry``)."""
        return f"{self.item_expiry_base}:deadlines"

    @property
    def item_ttls(self) -> str:
        return f"{self.item_expiry_base}:ttls"

    @property
    def thread_runs(self) -> str:
        """Which threads each LangGraph run wrote checkpoints in (``delete_for_runs``)."""
        return f"{self.base}:lg:runs"

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
    def search_vectors(self) -> str:
        return f"{self.index}:vectors"

    @property
    def search_changes(self) -> str:
        return f"{self.index}:changes"

    def search_term(self, term: str) -> str:
        return f"{self.index}:t:{term}"

    @property
    def search_terms(self) -> str:
        """A SCAN pattern matching every term's postings."""
        return f"{self.index}:t:*"

    @property
    def recount_lock(self) -> str:
        """Held while one process recounts the namespace's quota counts."""
        return f"{self.base}:recount-lock"

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


def is_version(keys: Keys, key: bytes) -> bool:
    """Whether ``key`` (as SCAN names it) is a version hash of ``keys``'s namespace."""
    base = re.escape(keys.base.encode())
    return re.fullmatch(base + rb":rec:\{.*\}:v:\d+", key, re.DOTALL) is not None


NAMESPACES = f"{PREFIX}:namespaces"


def pinned_member(ref: str, packet_id: str = "") -> str:
    """A pin's member of :attr:`Keys.pinned`; with no packet id, where ``ref``'s start."""
    return f"{ref}\0{packet_id}"


def token_namespaces_key(token_id: str) -> str:
    """The namespaces an agent token created (``BATON_MAX_NAMESPACES_PER_TOKEN``): tagged
    with :data:`NAMESPACES`'s whole name, so both are in one slot (one script admits)."""
    return f"{PREFIX}:token-namespaces:{{{NAMESPACES}}}:{token_id}"


# Each agent token's stored value bytes (field: the token id; BATON_MAX_TOKEN_BYTES).
TOKEN_BYTES = f"{PREFIX}:token-bytes"

# One hash tag for every token key: adding and revoking stay single-slot transactions.
TOKENS = f"{PREFIX}:{{tokens}}:index"
RATE_LIMIT_NAMESPACE = f"{PREFIX}:ratelimit"
SWEEP_LOCK = f"{PREFIX}:sweep-lock"
READY_PROBE = f"{PREFIX}:ready-probe"


def token_key(sha: str) -> str:
    return f"{PREFIX}:{{tokens}}:token:{sha}"


def login_key(sha: str) -> str:
    return f"{PREFIX}:{{tokens}}:login:{sha}"


# Names no namespace may take: its keys (``baton:<name>:…``) would mix with these global
# ones, and forgetting it would delete them.
RESERVED_NAMESPACES = frozenset({"token-namespaces", "ratelimit", "mcp-sessions", "auth-failures"})


def mcp_sessions_key(owner: str) -> str:
    """One owner's open MCP sessions over HTTP (``owner``: the digest heading their ids)."""
    return f"{PREFIX}:mcp-sessions:{{{owner}}}"


def auth_failures_key(address: str) -> str:
    return f"{PREFIX}:auth-failures:{address}"


def queue_name(namespace: str, agent: str) -> str:
    """The RQ queue of one agent, e.g. ``baton:default:executor`` (RQ keeps it under
    ``rq:queue:<name>``)."""
    return f"{PREFIX}:{namespace}:{agent}"


JOB_ID_PREFIX = f"{PREFIX}-"  # every delivery job's id starts so


def job_id(namespace: str, packet_id: str, seq: int | str) -> str:
    """The RQ job id of one delivery attempt of a packet (letters, digits, '-', '_')."""
    return f"{JOB_ID_PREFIX}{namespace}-{packet_id}-{seq}"


def ref_of(head: str) -> str:
    """The ref of a record's head key (:meth:`Keys.head`'s inverse)."""
    return head.partition(":rec:{")[2].removesuffix("}:head")
