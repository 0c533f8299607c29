"""One log format for every Baton process: structlog renders Baton's own events and, through
structlog's standard-library bridge, those of uvicorn, RQ, Litestar and the MCP SDK, as JSON
lines or as readable console lines."""

from __future__ import annotations

import logging
import os
import sys
from typing import Literal, get_args

import structlog

LogFormat = Literal["auto", "json", "console"]
LOG_FORMATS: tuple[LogFormat, ...] = get_args(LogFormat)
LOG_FORMAT_VARIABLE = "BATON_LOG_FORMAT"


def log_format_of(value: str | None) -> LogFormat:
    """``value`` (``BATON_LOG_FORMAT``) checked; ``auto`` when unset."""
    for known in LOG_FORMATS:
        if (value or "auto") == known:
            return known
    raise ValueError(
        f"{LOG_FORMAT_VARIABLE} must be one of {', '.join(LOG_FORMATS)}, not {value!r}"
    )


def configure_logging(level: int = logging.INFO) -> None:
    """Configure logging once per process, in the format ``BATON_LOG_FORMAT`` names: ``json``,
    ``console``, or ``auto`` (console lines on a terminal, JSON lines otherwise), on stderr.
    A process (an application embedding Baton's app, the test suite) that configured
    structlog already keeps its set-up, and one whose root logger has handlers keeps them."""
    if structlog.is_configured():
        return
    chosen = log_format_of(os.environ.get(LOG_FORMAT_VARIABLE))
    console = chosen == "console" or (chosen == "auto" and sys.stderr.isatty())
    renderer: structlog.types.Processor = (
        structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
        if console
        else structlog.processors.JSONRenderer()
    )
    shared: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    structlog.configure(
        processors=[*shared, structlog.processors.format_exc_info, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
    root = logging.getLogger()
    if root.handlers:
        return
    bridge = logging.StreamHandler(sys.stderr)
    bridge.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[*shared, structlog.stdlib.add_logger_name],
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                structlog.processors.format_exc_info,
                renderer,
            ],
        )
    )
    root.addHandler(bridge)
    root.setLevel(level)
    # The MCP SDK logs each stateless request's transport at info ("Terminating session:
    # None"): one line per MCP call says nothing an operator needs.
    logging.getLogger("mcp.server.streamable_http").setLevel(max(level, logging.WARNING))
    # httpx logs each request's full URL at INFO: a webhook's may carry a token
    logging.getLogger("httpx").setLevel(max(level, logging.WARNING))
