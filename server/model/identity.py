"""Who is calling: one :class:`Caller` per request or connection, by one set of rules.

Every surface (REST, the agentmemory routes and their ``mcp/call`` shim, MCP over HTTP and
stdio, the dashboard and its event stream, the CLI) turns what it knows into a
:class:`Credential` (what proved who the caller is) and :class:`Claims` (what the request
asks for: an agent, a namespace, a session), and calls :func:`resolve`. Handlers receive the
resulting :class:`Caller` and never read identity headers or body fields themselves.

The rules (the table in docs/operations.md says the same per surface):

- An agent token always acts as its own agent. Naming another agent (``X-Baton-Agent``, a
  body ``agentId``) is refused with 403, never silently rewritten; admin tokens may name any.
- A token scoped to namespaces never touches another: with no namespace asked for, the
  token's first namespace is used, not the server default.
- A namespace, agent or session asked for twice (a repeated header, or a header and a query
  parameter that differ) is a 400 for everybody.
- Open mode (no tokens at start-up, loopback) and local processes holding the Redis URL
  (``baton mcp`` on stdio, the CLI) are trusted as operators: headers only attribute.
- A session belongs to the agent that first used it: using, ending or forgetting another
  agent's session is 403 unless the caller is an operator (admin token, open mode, local).
"""

from __future__ import annotations

import functools
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Literal

from redis.asyncio import Redis

from baton.server.model.errors import Ambiguous, Forbidden
from baton.server.model.keys import Keys
from baton.server.model.validation import ANONYMOUS, check_agent, check_namespace, check_session_id

AGENT_HEADER = "x-baton-agent"
NAMESPACE_HEADER = "x-baton-namespace"
SESSION_HEADER = "x-baton-session"
CALLER = "baton_caller"  # where the HTTP gate leaves the resolved caller in the ASGI state

CredentialKind = Literal["open", "token", "agentmemory-secret", "local"]


@dataclass(frozen=True)
class Credential:
    """What proved who the caller is. ``agent`` is None in open mode (headers decide);
    ``scopes`` are the namespaces it may use (``*``: any)."""

    kind: CredentialKind
    agent: str | None = None
    admin: bool = False
    scopes: tuple[str, ...] = ("*",)
    token_id: str | None = None

    def allows(self, namespace: str) -> bool:
        return "*" in self.scopes or namespace in self.scopes


OPEN = Credential("open", admin=True)


def local(agent: str) -> Credential:
    """A process holding the Redis URL itself (``baton mcp`` on stdio, the CLI, workers):
    it could change anything directly, so it is an operator; ``agent`` attributes its writes."""
    return Credential("local", agent=check_agent(agent, field="agent"), admin=True)


# The caller the current request or tool call acts for: set where identity is resolved (the
# HTTP gate, an MCP tool call), in the task that serves it, so each sees its own; read by
# the dependency providers and by what counts per token (the namespaces a token created).
REQUEST_CALLER: ContextVar[Caller] = ContextVar("baton_request_caller")


def token_of_acting() -> str | None:
    """The token the current request acts with, when it is an agent's (not an operator's:
    admin tokens, open mode and local processes count against no token's quota)."""
    caller = REQUEST_CALLER.get(None)
    if caller is None or caller.admin:
        return None
    return caller.credential.token_id


def sweeper(namespace: str) -> Caller:
    """Baton's own periodic work (expiry, idle sessions), attributed to ``baton``."""
    return Caller(agent="baton", namespace=namespace, session=None, credential=local("baton"))


@dataclass(frozen=True)
class Claims:
    """What a request asks for, every value as given (a repeated header gives two)."""

    agents: tuple[str, ...] = ()
    namespaces: tuple[str, ...] = ()
    query_namespaces: tuple[str, ...] = ()
    sessions: tuple[str, ...] = ()


@dataclass(frozen=True)
class Caller:
    """The resolved identity a handler acts with."""

    agent: str
    namespace: str
    session: str | None
    credential: Credential

    @property
    def admin(self) -> bool:
        """Operators (admin tokens, open mode, local processes) may act for anyone."""
        return self.credential.admin

    def acting_as(self, agent: object, field: str = "agentId") -> Caller:
        """This caller acting as ``agent`` (a body ``agentId``, a tool argument): the same
        agent, or any agent for operators; anyone else is a 403."""
        if agent is None or agent == "":
            return self
        name = check_agent(agent, field=field)
        if name == self.agent:
            return self
        if not self.admin:
            raise Forbidden(
                f"{field}: this token acts as {self.agent} and may not act as {name}",
                field=field,
                agent=name,
            )
        return Caller(name, self.namespace, self.session, self.credential)

    def in_session(self, session: object, field: str = "sessionId") -> Caller:
        """This caller working in ``session`` (a body ``sessionId``)."""
        if session is None or session == "":
            return self
        session_id = check_session_id(session, field=field)
        return Caller(self.agent, self.namespace, session_id, self.credential)

    def require_admin(self, action: str) -> None:
        """Operator actions (requeue, checkpoints) need an admin token once tokens exist."""
        if not self.admin:
            raise Forbidden(
                f"{action} needs an admin token; {self.agent}'s is not one", agent=self.agent
            )

    def require_owner(self, owner: str | None, what: str) -> None:
        """Refuse acting on something ``owner`` holds unless it is this caller's (or an
        operator asks). ``None`` means shared: anyone in the namespace may."""
        if owner is not None and owner != self.agent and not self.admin:
            raise Forbidden(f"{what} belongs to {owner}, not {self.agent}", owner=owner)


def _one(values: tuple[str, ...], field: str) -> str | None:
    if len(values) > 1:
        raise Ambiguous(field, "given more than once; send it once")
    return values[0] if values else None


@functools.lru_cache(maxsize=4096)
def resolve(credential: Credential, claims: Claims, default_namespace: str) -> Caller:
    """Apply the rules of the module docstring: the caller, or a 400/403. A pure function
    of frozen values, asked the same question on nearly every request of a client: its
    answers are kept (refusals are raised anew each time)."""
    namespace = _one(claims.namespaces, NAMESPACE_HEADER)
    queried = _one(claims.query_namespaces, "namespace")
    if namespace is not None and queried is not None and queried != namespace:
        raise Ambiguous("namespace", f"the header says {namespace}, the query {queried}")
    namespace = namespace or queried
    if namespace is None:
        scoped = [scope for scope in credential.scopes if scope != "*"]
        namespace = scoped[0] if scoped else default_namespace
    namespace = check_namespace(namespace, field=NAMESPACE_HEADER)
    if not credential.allows(namespace):
        raise Forbidden(f"this token may not use namespace {namespace}", namespace=namespace)

    asked = _one(claims.agents, AGENT_HEADER)
    session = _one(claims.sessions, SESSION_HEADER)
    agent = credential.agent or ANONYMOUS
    caller = Caller(
        agent=agent,
        namespace=namespace,
        credential=credential,
        session=None if session is None else check_session_id(session, field=SESSION_HEADER),
    )
    return caller.acting_as(asked, field=AGENT_HEADER) if asked else caller


async def session_owner(redis: Redis, keys: Keys, session_id: str) -> str | None:
    """The agent a session belongs to (the first to use it); None for an unknown id."""
    owner: bytes | None = await redis.hget(keys.session(session_id), "agent")  # type: ignore[assignment]
    return None if owner is None else owner.decode()


async def check_session_owner(redis: Redis, keys: Keys, session_id: str, caller: Caller) -> None:
    """Refuse ``caller`` working in another agent's session (a new id becomes its own)."""
    if not caller.admin:
        owner = await session_owner(redis, keys, session_id)
        caller.require_owner(owner, f"session {session_id}")


async def check_session(redis: Redis, caller: Caller) -> None:
    """Refuse a caller whose ``X-Baton-Session`` is another agent's session."""
    if caller.session is not None:
        await check_session_owner(redis, Keys(caller.namespace), caller.session, caller)
