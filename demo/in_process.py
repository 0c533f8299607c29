"""How the in-process stories (``baton demo --amfs``, ``--langgraph``) run: Baton's API in a
thread of this process, on the embedded Valkey unless ``BATON_REDIS_URL`` names a Redis, a
fresh namespace deleted once every check passed, and the checks printed last."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

from baton.demo import namespace as demo_namespace
from baton.demo.transcript import bullet, section
from baton.server.api.app import create_app
from baton.server.runtime.connection import embedded_server
from baton.server.runtime.serving import served_in_thread
from baton.server.runtime.settings import Settings

Checks = list[tuple[bool, str]]


def run_story(prefix: str, title: str, story: Callable[[str, str], Checks]) -> int:
    """Run ``story(url, namespace)`` against Baton in this process; 0 when every check it
    returns passes. ``title`` is printed first, with the namespace."""
    namespace = demo_namespace.fresh(prefix)
    started = time.monotonic()
    settings = Settings.from_env()
    embedded = None if settings.redis_url else embedded_server(settings)
    started_redis = embedded is not None and not embedded.ping()
    redis_url = embedded.ensure_running() if embedded else str(settings.redis_url)
    # A 404 is how a store learns a key is new: the access log would print one per first write.
    quiet = dataclasses.replace(settings, redis_url=redis_url, access_log="off")
    try:
        with served_in_thread(create_app(quiet)) as url:
            print(f"{title} ({namespace})")
            results = story(url, namespace)
        demo_namespace.leave(redis_url, namespace, passed=all(ok for ok, _ in results))
    finally:
        if started_redis and embedded is not None:
            embedded.stop()
    section("checks")
    for ok, text in results:
        bullet(("ok: " if ok else "FAILED: ") + text, tone="good" if ok else "bad")
    passed = all(ok for ok, _ in results)
    print(
        f"\n{'all checks passed' if passed else 'some checks FAILED'} in "
        f"{time.monotonic() - started:.1f}s"
    )
    return 0 if passed else 1
