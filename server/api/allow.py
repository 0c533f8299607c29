"""The ``Allow`` header of an OPTIONS answer, listing every method of its path.

Litestar 2 makes a path's OPTIONS handler when the path's first handler is registered: on a
path whose GET and POST come from separate handlers it lists only the first one
(litestar-org/litestar#4169, fixed in v3). The app's route table is complete, so the header
is rewritten from it before the answer goes out.
"""

from __future__ import annotations

from litestar import Litestar
from litestar.routes import HTTPRoute
from litestar.types import Message, Scope

ALLOW = b"allow"


class AllowEveryMethod:
    """A ``before_send`` hook: the start of an OPTIONS answer with an ``Allow`` header gets
    the route's every method (read from the app's routes on first use)."""

    def __init__(self) -> None:
        self.allowed: dict[str, bytes] = {}

    def learn(self, app: Litestar) -> None:
        for route in app.routes:
            if isinstance(route, HTTPRoute):  # path_format is what scope["path_template"] holds
                self.allowed[route.path_format] = ", ".join(sorted(route.methods)).encode()

    async def __call__(self, message: Message, scope: Scope) -> None:
        if message["type"] != "http.response.start" or scope.get("method") != "OPTIONS":
            return
        headers = message["headers"]
        if not any(name.lower() == ALLOW for name, _ in headers):
            return
        if not self.allowed:
            self.learn(scope["app"])
        allowed = self.allowed.get(scope.get("path_template", ""))
        if allowed is not None:
            kept = [(name, value) for name, value in headers if name.lower() != ALLOW]
            message["headers"] = [*kept, (ALLOW, allowed)]
