"""Configuration read from ``BATON_*`` environment variables, with sane defaults."""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, TypeVar, get_args

from baton.server.model.endpoint import DEFAULT_HOST, DEFAULT_PORT, base_url, data_dir_of, token_of
from baton.server.model.errors import InvalidInput

# Which requests get an access-log line: every one, failed or slow ones (default), none.
AccessLog = Literal["all", "errors", "off"]
ACCESS_LOG_CHOICES: tuple[AccessLog, ...] = get_args(AccessLog)

APPENDFSYNC_CHOICES = ("always", "everysec", "no")
VECTORS_CHOICES = ("auto", "on", "off")
# Below this cosine similarity a document is not near a query
# (baton.server.retrieval.vectors). Static embeddings of texts about unrelated things reach
# 0.2-0.27 (the retrieval set's memories against queries about cooking, sport, weather); on
# that set's paraphrases 0.25 found 0.78, 0.3 0.67 and 0.35 0.67 (BM25 alone 0.56), MRR
# 0.911 / 0.901 / 0.880 (alone 0.894).
VECTOR_FLOOR = 0.3


def vectors_of(env: Mapping[str, str]) -> str:
    """``BATON_VECTORS``: ``auto`` (vectors beside BM25 when the vectors extra is
    installed), ``on`` (refuse to start without it) or ``off``."""
    value = env.get("BATON_VECTORS", "auto").strip().lower()
    if value not in VECTORS_CHOICES:
        choices = ", ".join(VECTORS_CHOICES)
        raise ValueError(f"BATON_VECTORS must be one of {choices}, got {value!r}")
    return value


def default_vectors() -> str:
    """Settings' default: this environment's ``BATON_VECTORS``, as with the data dir (a
    value it cannot take is :meth:`Settings.from_env`'s error to report, not a default's)."""
    value = os.environ.get("BATON_VECTORS", "auto").strip().lower()
    return value if value in VECTORS_CHOICES else "auto"


def default_data_dir() -> Path:
    """The data dir of this environment (:func:`~baton.server.model.endpoint.data_dir_of`)."""
    return Path(data_dir_of(os.environ))


@dataclass(frozen=True)
class Limits:
    """Size limits enforced on every write; each breach is a clear 413 or 422."""

    max_value_bytes: int = 1024 * 1024
    max_ref_length: int = 512
    max_tags: int = 32
    max_tag_length: int = 64
    max_page_size: int = 500
    max_summary_length: int = 2000
    max_steps: int = 50
    max_step_length: int = 1000
    max_pins: int = 200
    max_versions: int = 10_000  # versions one record keeps
    max_index_terms: int = 5_000_000  # distinct search terms (one key each) per namespace
    max_namespaces: int = 1_000  # namespaces on one server
    max_namespaces_per_token: int = 20  # namespaces one agent token may create
    max_namespace_bytes: int = 2 * 2**30  # bytes of record values one namespace stores
    max_token_bytes: int | None = None  # of values one agent token stores (None: derived)
    search_share: float = 0.4  # of a process's time its searches may take (SearchIndex)

    def check_page(self, limit: int) -> int:
        """A page size within ``max_page_size`` (``BATON_MAX_PAGE_SIZE``), or a 422."""
        if not 1 <= limit <= self.max_page_size:
            raise InvalidInput(
                "limit", f"must be from 1 to {self.max_page_size}", maximum=self.max_page_size
            )
        return limit


@dataclass(frozen=True)
class HandoffPolicy:
    """Leases, redelivery and retries of handoff packets."""

    lease_seconds: float = 15 * 60
    max_deliveries: int = 5
    handler_tries: int = 3
    retry_intervals: tuple[int, ...] = (5, 30)
    sweep_seconds: int = 5


@dataclass(frozen=True)
class Settings:
    """Everything Baton needs to know to start; build it with :meth:`from_env`."""

    redis_url: str | None = None
    data_dir: Path = field(default_factory=default_data_dir)
    appendfsync: str = "everysec"
    maxmemory: int | None = None  # the embedded server's, bytes; None: half of this machine's
    namespace: str = "default"
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    queue_url: str | None = None
    api_url: str | None = None
    agentmemory_secret: str | None = None
    agentmemory_agent: str = "agentmemory"
    token: str | None = None
    allowed_hosts: tuple[str, ...] = ()
    # Proxies whose X-Forwarded-For/-Proto are believed (IPs or networks); none by default,
    # so a client's address (failed-login limits, loopback checks) cannot be claimed.
    trusted_proxies: tuple[str, ...] = ()
    rate_limit: tuple[int, str] | None = (600, "second")
    auth_failure_limit: tuple[int, str] | None = (20, "minute")
    signing_key: str | None = None
    signing_key_file: Path | None = None  # None: signing.key in the data dir
    max_streams: int = 16
    mcp_sessions: int = 32  # open MCP sessions over HTTP per token (open mode: per agent)
    mcp_idle_seconds: float = 1800.0  # an MCP session with no request this long is closed
    access_log: AccessLog = "errors"
    stop_seconds: float = 3.0
    checkpoint_seconds: float | None = 300.0
    session_idle_seconds: float = 24 * 3600
    notices: bool = True  # this process makes notices (baton.server.stores.notices)
    vectors: str = field(default_factory=default_vectors)  # auto | on | off (vectors.py)
    vector_floor: float = VECTOR_FLOOR
    limits: Limits = field(default_factory=Limits)
    handoffs: HandoffPolicy = field(default_factory=HandoffPolicy)

    @property
    def base_url(self) -> str:
        """Where agents reach the API: ``BATON_URL``, else this host and port."""
        return base_url(self.api_url, self.host, self.port)

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> Settings:
        """Read ``BATON_REDIS_URL``, ``BATON_DATA_DIR``, ``BATON_APPENDFSYNC``, ``BATON_NAMESPACE``,
        ``BATON_HOST``, ``BATON_PORT``, ``BATON_URL``, ``BATON_QUEUE_URL``,
        ``BATON_MAX_VALUE_BYTES``, ``BATON_SESSION_IDLE_HOURS``, ``BATON_TOKEN`` (or
        ``BATON_TOKEN_FILE``),
        ``BATON_ALLOWED_HOSTS``, ``BATON_RATE_LIMIT``, ``BATON_AUTH_FAILURES``,
        ``BATON_SIGNING_KEY``, ``BATON_CHECKPOINT_INTERVAL``, ``BATON_MAX_STREAMS``,
        ``BATON_MCP_SESSIONS``, ``BATON_MCP_IDLE_SECONDS``,
        ``BATON_ACCESS_LOG``,
        ``BATON_STOP_SECONDS``, ``BATON_VECTORS``, ``BATON_VECTOR_FLOOR``, ``BATON_NOTICES``,
        ``AGENTMEMORY_SECRET``, ``AGENTMEMORY_AGENT`` and the handoff policy variables."""
        env = os.environ if environ is None else environ
        appendfsync = env.get("BATON_APPENDFSYNC", "everysec")
        if appendfsync not in APPENDFSYNC_CHOICES:
            raise ValueError(
                f"BATON_APPENDFSYNC must be one of {', '.join(APPENDFSYNC_CHOICES)}, "
                f"got {appendfsync!r}"
            )
        return cls(
            redis_url=_redis_url(env.get("BATON_REDIS_URL"), "BATON_REDIS_URL"),
            data_dir=Path(data_dir_of(env)).resolve(),
            appendfsync=appendfsync,
            maxmemory=_bytes(env, "BATON_MAXMEMORY"),
            namespace=env.get("BATON_NAMESPACE", "default"),
            host=env.get("BATON_HOST", DEFAULT_HOST),
            port=_number(env, "BATON_PORT", DEFAULT_PORT, int, highest=65535),
            queue_url=_redis_url(env.get("BATON_QUEUE_URL"), "BATON_QUEUE_URL"),
            agentmemory_secret=env.get("AGENTMEMORY_SECRET") or None,
            agentmemory_agent=env.get("AGENTMEMORY_AGENT") or "agentmemory",
            token=token_of(env),
            allowed_hosts=tuple(
                host.strip().lower()
                for host in env.get("BATON_ALLOWED_HOSTS", "").split(",")
                if host.strip()
            ),
            trusted_proxies=tuple(
                proxy.strip()
                for proxy in env.get("BATON_TRUSTED_PROXIES", "").split(",")
                if proxy.strip()
            ),
            session_idle_seconds=_number(env, "BATON_SESSION_IDLE_HOURS", 24.0, float) * 3600,
            vectors=vectors_of(env),
            vector_floor=_number(env, "BATON_VECTOR_FLOOR", VECTOR_FLOOR, float, highest=1.0),
            api_url=env.get("BATON_URL") or None,
            limits=Limits(
                max_value_bytes=_number(env, "BATON_MAX_VALUE_BYTES", Limits.max_value_bytes, int),
                max_ref_length=_number(env, "BATON_MAX_REF_LENGTH", Limits.max_ref_length, int),
                max_tags=_number(env, "BATON_MAX_TAGS", Limits.max_tags, int),
                max_page_size=_number(env, "BATON_MAX_PAGE_SIZE", Limits.max_page_size, int),
                max_summary_length=_number(
                    env, "BATON_MAX_SUMMARY", Limits.max_summary_length, int
                ),
                max_steps=_number(env, "BATON_MAX_STEPS", Limits.max_steps, int),
                max_pins=_number(env, "BATON_MAX_PINS", Limits.max_pins, int),
                max_versions=_number(env, "BATON_MAX_VERSIONS", Limits.max_versions, int),
                max_index_terms=_number(env, "BATON_MAX_INDEX_TERMS", Limits.max_index_terms, int),
                max_namespaces=_number(env, "BATON_MAX_NAMESPACES", Limits.max_namespaces, int),
                max_namespaces_per_token=_number(
                    env,
                    "BATON_MAX_NAMESPACES_PER_TOKEN",
                    Limits.max_namespaces_per_token,
                    int,
                ),
                max_namespace_bytes=_bytes(env, "BATON_MAX_NAMESPACE_BYTES")
                or Limits.max_namespace_bytes,
                max_token_bytes=_bytes(env, "BATON_MAX_TOKEN_BYTES"),
                search_share=_number(
                    env, "BATON_SEARCH_SHARE", Limits.search_share, float, highest=1.0
                ),
            ),
            rate_limit=_rate(env.get("BATON_RATE_LIMIT", "600/second"), "BATON_RATE_LIMIT"),
            auth_failure_limit=_rate(
                env.get("BATON_AUTH_FAILURES", "20/minute"), "BATON_AUTH_FAILURES"
            ),
            signing_key=env.get("BATON_SIGNING_KEY") or None,
            signing_key_file=Path(env["BATON_SIGNING_KEY_FILE"])
            if env.get("BATON_SIGNING_KEY_FILE")
            else None,
            max_streams=_number(env, "BATON_MAX_STREAMS", 16, int),
            mcp_sessions=_number(env, "BATON_MCP_SESSIONS", 32, int),
            mcp_idle_seconds=_number(env, "BATON_MCP_IDLE_SECONDS", 1800.0, float),
            access_log=_access_log(env.get("BATON_ACCESS_LOG", "errors")),
            stop_seconds=_number(env, "BATON_STOP_SECONDS", 3.0, float),
            notices=_on_off(env.get("BATON_NOTICES", "on"), "BATON_NOTICES"),
            checkpoint_seconds=_seconds(
                env.get("BATON_CHECKPOINT_INTERVAL", "300"), "BATON_CHECKPOINT_INTERVAL"
            ),
            handoffs=HandoffPolicy(
                lease_seconds=_number(
                    env, "BATON_LEASE_SECONDS", HandoffPolicy.lease_seconds, float
                ),
                max_deliveries=_number(
                    env, "BATON_MAX_DELIVERIES", HandoffPolicy.max_deliveries, int
                ),
                handler_tries=_number(env, "BATON_HANDLER_TRIES", HandoffPolicy.handler_tries, int),
                retry_intervals=_intervals(env.get("BATON_RETRY_INTERVALS")),
                sweep_seconds=_number(env, "BATON_SWEEP_SECONDS", HandoffPolicy.sweep_seconds, int),
            ),
        )


NumberT = TypeVar("NumberT", int, float)
RATE_UNITS = {"second": 1, "minute": 60, "hour": 3600, "day": 86400}


def _on_off(value: str, name: str) -> bool:
    if value not in ("on", "off"):
        raise ValueError(f"{name} must be on or off, got {value!r}")
    return value == "on"


def _access_log(value: str) -> AccessLog:
    for choice in ACCESS_LOG_CHOICES:
        if value == choice:
            return choice
    choices = ", ".join(ACCESS_LOG_CHOICES)
    raise ValueError(f"BATON_ACCESS_LOG must be one of {choices}, got {value!r}")


def _rate(raw: str, variable: str) -> tuple[int, str] | None:
    """``"600/second"`` -> (600, "second"); ``"off"`` -> None."""
    if raw.strip().lower() == "off":
        return None
    count, _, unit = raw.partition("/")
    if not count.strip().isdigit() or int(count) < 1 or unit.strip() not in RATE_UNITS:
        raise ValueError(
            f"{variable} must be like 600/second (units: {', '.join(RATE_UNITS)}) or off, "
            f"got {raw!r}"
        )
    return int(count), unit.strip()


REDIS_SCHEMES = ("redis://", "rediss://", "unix://", "redis+cluster://", "rediss+cluster://")


def _redis_url(raw: str | None, variable: str) -> str | None:
    """A Redis URL with a scheme Baton connects with, or None when unset."""
    if not raw:
        return None
    if not raw.startswith(REDIS_SCHEMES):
        raise ValueError(f"{variable} must start with {', '.join(REDIS_SCHEMES)}; got {raw!r}")
    return raw


BYTE_UNITS = {
    "": 1,
    "b": 1,
    "k": 2**10,
    "kb": 2**10,
    "m": 2**20,
    "mb": 2**20,
    "g": 2**30,
    "gb": 2**30,
}


def _bytes(env: Mapping[str, str], variable: str) -> int | None:
    """A size from ``variable``: bytes, or with a unit (``512mb``, ``2gb``); None when it is
    not set; a clear error naming the variable otherwise."""
    raw = env.get(variable)
    if raw is None:
        return None
    match = re.fullmatch(r"\s*(\d+)\s*([kmg]?b?)\s*", raw.lower())
    if match is None or int(match[1]) <= 0:
        raise ValueError(f"{variable} must be a size above 0 such as 512mb or 2gb, got {raw!r}")
    return int(match[1]) * BYTE_UNITS[match[2]]


def _number(
    env: Mapping[str, str],
    variable: str,
    default: NumberT,
    kind: Callable[[str], NumberT],
    *,
    highest: float | None = None,
) -> NumberT:
    """A positive number from ``variable`` (a whole one for ``kind`` int), at most
    ``highest``; a clear error naming the variable otherwise."""
    raw = env.get(variable)
    if raw is None:
        return default
    try:
        value = kind(raw.strip())
    except ValueError:
        value = None
    if value is None or not math.isfinite(value) or value <= 0 or value > (highest or math.inf):
        whole = "a whole number" if kind is int else "a number"
        bound = f" up to {highest:g}" if highest else ""
        raise ValueError(f"{variable} must be {whole} above 0{bound}, got {raw!r}")
    return value


def _seconds(raw: str, variable: str) -> float | None:
    """``"300"`` -> 300.0 seconds; ``"off"`` or ``"0"`` -> None (disabled)."""
    if raw.strip().lower() in ("off", "0"):
        return None
    try:
        seconds = float(raw)
    except ValueError:
        seconds = -1.0
    if not seconds > 0:
        raise ValueError(f"{variable} must be a number of seconds or off, got {raw!r}")
    return seconds


def _intervals(raw: str | None) -> tuple[int, ...]:
    """``"5,30"`` -> (5, 30): seconds to wait before each retry of a failing handler."""
    if not raw:
        return HandoffPolicy.retry_intervals
    try:
        intervals = tuple(int(part) for part in raw.split(","))
    except ValueError:
        intervals = (-1,)
    if min(intervals) < 0:
        raise ValueError(
            f"BATON_RETRY_INTERVALS must be whole seconds (0 or more) separated by commas, "
            f"got {raw!r}"
        )
    return intervals
