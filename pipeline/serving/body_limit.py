"""A request body's size and time limits, enforced before the app sees the body.

Neither Starlette nor Ray Serve's proxy limits a body: without this, a client can send
tens of megabytes that are buffered, parsed as JSON and validated before any limit of
the service is checked, or hold a request open by sending its body a byte a minute,
holding one of the replica's slots for as long as it likes. Here the body is read
whole first, by the middleware:

- a declared ``Content-Length`` over the limit is refused at once, and a body sent
  without one (chunked) is counted as it arrives and refused once it passes the limit:
  413, naming the limit (answered here, where the app reading it would have turned the
  refusal into its own 400);
- a body that has not arrived whole within ``deadline_s`` of the request's start is cut:
  408, naming the deadline.

The app then reads the body from memory, at most ``limit`` bytes a request.
"""

from __future__ import annotations

import asyncio
import json
from typing import Callable


class BodyLimit:
    """ASGI middleware: ``limit()`` is the most bytes a request body may have, and
    ``deadline_s()`` the seconds it may take to arrive (callables, so that a service can
    set them after the app is built)."""

    def __init__(self, app, limit: Callable[[], int], deadline_s: Callable[[], float] = lambda: 10.0):
        self.app, self.limit, self.deadline_s = app, limit, deadline_s

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        limit, deadline_s = self.limit(), self.deadline_s()
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            return await _answer(send, 413, f"request body over {limit} bytes: send fewer or shorter sentences")
        try:
            body = await asyncio.wait_for(_read_body(receive, limit), deadline_s)
        except BodyTooLarge:
            return await _answer(send, 413, f"request body over {limit} bytes: send fewer or shorter sentences")
        except TimeoutError:
            return await _answer(send, 408, f"the request body did not arrive within {deadline_s:g} s")
        if body is None:  # the client went before its body was whole: nobody to answer
            return None
        replayed = False

        async def receive_from_memory():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # after the body: the disconnect, when it comes

        return await self.app(scope, receive_from_memory, send)


class BodyTooLarge(Exception):
    pass


async def _read_body(receive, limit: int) -> bytes | None:
    """The whole body, or None if the client disconnected first."""
    chunks, received = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk = message.get("body", b"")
        received += len(chunk)
        if received > limit:
            raise BodyTooLarge()
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def _answer(send, status: int, detail: str) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})
