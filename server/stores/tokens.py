"""Agent tokens: 32 random bytes shown once; Baton keeps only their sha256.

Looking a token up is one ``HGET`` by its hash: no scan over all tokens, and comparing
secrets is left to the hash function (then confirmed with a constant-time compare). A
dashboard login trades a token for an opaque cookie secret (also kept only as its sha256)
that points at the token: revoking the token ends its logins too. Keys: see ``keys.py``.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import time
from datetime import UTC, datetime

import msgspec
import redis.exceptions
import structlog
from redis.asyncio import Redis

from baton.server.model.clock import iso, utc_now
from baton.server.model.errors import InvalidInput, NotFound
from baton.server.model.keys import TOKENS, login_key, token_key
from baton.server.model.validation import check_agent, check_namespace
from baton.server.runtime import codec
from baton.server.runtime.connection import write_refused
from baton.server.runtime.scripts import lua_source

log = structlog.get_logger("baton.tokens")

LOGIN_SECONDS = 12 * 3600
DURATION = re.compile(r"^(\d+)([smhd])$")
UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
MAX_LIFETIME = 10 * 365 * 86_400  # ten years, as every other expiry


class Token(msgspec.Struct, kw_only=True):
    """A token's record; the secret itself is never stored."""

    id: str
    agent: str
    admin: bool
    scopes: list[str]
    created_at: str
    expires_at: str | None
    last_used_at: str | None = None

    def expired(self) -> bool:
        """Past its expiry; a token whose expiry cannot be read (one made, before lifetimes
        were bounded, to expire past year 9999) counts as expired, never as a 500."""
        if self.expires_at is None:
            return False
        try:
            return datetime.fromisoformat(self.expires_at) <= datetime.now(UTC)
        except ValueError:
            return True

    def allows(self, namespace: str) -> bool:
        return "*" in self.scopes or namespace in self.scopes


class Issued(msgspec.Struct, kw_only=True):
    token: Token
    secret: str


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def parse_duration(text: str) -> int:
    """``30d``, ``12h``, ``15m``, ``90s`` -> seconds."""
    match = DURATION.match(text.strip())
    if not match or int(match.group(1)) == 0:
        raise InvalidInput("expires", "give a duration like 30d, 12h, 15m or 90s")
    seconds = int(match.group(1)) * UNITS[match.group(2)]
    if seconds > MAX_LIFETIME:
        raise InvalidInput("expires", "a token lives at most ten years (3650d)")
    return seconds


# What a token secret looks like: ours are bt_ + 43 characters of secrets.token_urlsafe(32).
SECRET_PATTERN = re.compile(r"bt_[A-Za-z0-9_-]{32,200}")


def new_secret() -> str:
    """A new token's secret."""
    return "bt_" + secrets.token_urlsafe(32)


class TokenStore:
    def __init__(self, redis: Redis) -> None:
        self.redis = redis
        self.note_use_script = redis.register_script(lua_source("note_token_use"))

    async def add(
        self,
        agent: str,
        *,
        admin: bool = False,
        expires_in: int | None = None,
        scopes: list[str] | None = None,
        secret: str | None = None,
    ) -> Issued:
        """Create a token; the returned secret is shown once and never stored. ``secret``
        registers one made elsewhere (a deployment's bootstrap token) instead of a new one."""
        agent = check_agent(agent, field="agent")
        for scope in scopes or []:
            if scope != "*":
                check_namespace(scope, field="scope")
        if secret is not None and not SECRET_PATTERN.fullmatch(secret):
            raise InvalidInput("secret", "must be bt_ and at least 32 URL-safe characters")
        secret = secret or new_secret()
        token = Token(
            id=f"tok_{secrets.token_hex(4)}",
            agent=agent,
            admin=admin,
            scopes=scopes or ["*"],
            created_at=utc_now(),
            expires_at=None if expires_in is None else iso((time.time() + expires_in) * 1e6),
        )
        sha = digest(secret)
        pipe = self.redis.pipeline(transaction=True)
        pipe.hset(token_key(sha), mapping={"record": msgspec.json.encode(token)})
        pipe.hset(TOKENS, token.id, sha)
        await pipe.execute()
        return Issued(token=token, secret=secret)

    async def any(self) -> bool:
        """Whether any token exists: with none, the server is in open (loopback) mode."""
        return bool(await self.redis.hlen(TOKENS))

    async def check(self, secret: str) -> Token | None:
        """The live token for ``secret``, or None (unknown, revoked or expired)."""
        return await self._live(digest(secret))

    async def login(self, token: Token) -> str:
        """A dashboard login for ``token``: an opaque secret for a cookie, valid for
        ``LOGIN_SECONDS`` or until the token is revoked."""
        secret = secrets.token_urlsafe(32)
        sha = await self.redis.hget(TOKENS, token.id)
        if sha is None:
            raise NotFound(f"no token {token.id}", token=token.id)
        await self.redis.set(login_key(digest(secret)), sha, ex=LOGIN_SECONDS)
        return secret

    async def check_login(self, secret: str) -> Token | None:
        """The live token behind a dashboard login, or None."""
        sha = await self.redis.get(login_key(digest(secret)))
        return None if sha is None else await self._live(codec.text(sha))

    async def logout(self, secret: str) -> None:
        await self.redis.delete(login_key(digest(secret)))

    async def _live(self, sha: str) -> Token | None:
        raw = await self.redis.hget(token_key(sha), "record")
        if raw is None:
            return None
        token = msgspec.json.decode(raw, type=Token)
        stored = await self.redis.hget(TOKENS, token.id)  # gone once revoked
        if stored is None or not hmac.compare_digest(codec.text(stored), sha) or token.expired():
            return None
        return token if await self.note_use(sha) else None  # revoked a moment ago

    async def note_use(self, sha: str) -> bool:
        """Stamp the token's ``last_used_at``, unless it was revoked meanwhile (False).
        Bookkeeping only: when Redis refuses writes (a full disk, out of memory) the stamp is
        skipped and the request goes on, so reads keep working."""
        try:
            return bool(await self.note_use_script(keys=[token_key(sha)], args=[utc_now()]))
        except redis.exceptions.ResponseError as error:
            if write_refused(error) is None:
                raise
            log.debug("last_used_at not stamped: Redis refuses writes", error=str(error))
            return True

    async def list(self) -> list[Token]:
        shas = await self.redis.hgetall(TOKENS)
        pipe = self.redis.pipeline(transaction=False)
        for sha in shas.values():
            pipe.hmget(token_key(codec.text(sha)), "record", "last_used_at")
        tokens = []
        for raw, last_used in await pipe.execute():
            if raw is not None:
                token = msgspec.json.decode(raw, type=Token)
                token.last_used_at = last_used.decode() if last_used else None
                tokens.append(token)
        return sorted(tokens, key=lambda token: token.created_at)

    async def revoke(self, token_id: str) -> None:
        sha = await self.redis.hget(TOKENS, token_id)
        if sha is None:
            raise NotFound(f"no token {token_id}", token=token_id)
        pipe = self.redis.pipeline(transaction=True)
        pipe.delete(token_key(codec.text(sha)))
        pipe.hdel(TOKENS, token_id)
        await pipe.execute()
