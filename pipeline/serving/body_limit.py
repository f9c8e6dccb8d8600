"""A request body limit, enforced before the body is read whole.

Neither Starlette nor Ray Serve's proxy limits a body: without this, a client can send
tens of megabytes that are buffered, parsed as JSON and validated before any limit of
the service is checked, holding the event loop for everyone meanwhile. A declared
``Content-Length`` over the limit is refused at once; a body sent without one (chunked)
is counted as it arrives and refused once it passes the limit. Either way the answer is
413, naming the limit.
"""

from __future__ import annotations

import json
from typing import Callable


class BodyLimit:
    """ASGI middleware: ``limit()`` is the most bytes a request body may have (a callable,
    so that a service can set it after the app is built)."""

    def __init__(self, app, limit: Callable[[], int]):
        self.app, self.limit = app, limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        limit = self.limit()
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            return await _too_large(send, limit)
        received = 0
        refused = False

        async def counted_receive():
            nonlocal received, refused
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    refused = True
                    raise BodyTooLarge()
            return message

        try:
            await self.app(scope, counted_receive, send)
        except BodyTooLarge:
            if refused:
                await _too_large(send, limit)


class BodyTooLarge(Exception):
    pass


async def _too_large(send, limit: int) -> None:
    body = json.dumps({"detail": f"request body over {limit} bytes: send fewer or shorter sentences"}).encode()
    await send({"type": "http.response.start", "status": 413,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
