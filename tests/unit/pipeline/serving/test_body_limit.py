"""The request body limit: a body over it gets 413 before the endpoint reads it, whether
its length is declared or it arrives in chunks."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.testclient import TestClient

from pipeline.serving.body_limit import BodyLimit


def client(limit: int) -> tuple[TestClient, list]:
    app, seen = FastAPI(), []

    @app.post("/echo")
    async def echo(request: Request):
        body = await request.body()
        seen.append(len(body))
        return {"bytes": len(body)}

    app.add_middleware(BodyLimit, limit=lambda: limit)
    return TestClient(app), seen


def test_a_body_within_the_limit_passes():
    test_client, seen = client(100)
    assert test_client.post("/echo", content=b"x" * 100).json() == {"bytes": 100}
    assert seen == [100]


def test_a_declared_length_over_the_limit_is_refused_unread():
    test_client, seen = client(100)
    response = test_client.post("/echo", content=b"x" * 101)
    assert response.status_code == 413 and "request body over 100 bytes" in response.json()["detail"]
    assert seen == []


def test_a_chunked_body_is_counted_as_it_arrives():
    test_client, seen = client(100)
    response = test_client.post("/echo", content=(b"x" * 60 for _ in range(3)))  # no Content-Length
    assert response.status_code == 413
    assert seen == []


def test_a_chunked_json_body_over_the_limit_is_a_413_not_the_app_s_400():
    """An endpoint that parses JSON turned the refusal into its own 400 ("error parsing
    the body") when the middleware refused the body as the app read it."""
    from pydantic import BaseModel

    class Sentences(BaseModel):
        sentences: list[str]

    app = FastAPI()

    @app.post("/translate")
    async def translate(request: Sentences):
        return {"n": len(request.sentences)}

    app.add_middleware(BodyLimit, limit=lambda: 100)
    chunks = (b'{"sentences": ["' + b"x" * 40, b"x" * 40, b"x" * 40 + b'"]}')
    response = TestClient(app).post("/translate", content=iter(chunks), headers={"content-type": "application/json"})
    assert response.status_code == 413 and "over 100 bytes" in response.json()["detail"]


def test_a_body_that_does_not_arrive_within_the_deadline_is_cut_with_a_408():
    """A client sending its body a byte at a time: the request ends at the deadline,
    without the app ever seeing it."""
    import asyncio
    import time

    seen, sent = [], []

    async def app(scope, receive, send):
        seen.append(await receive())

    async def slow_receive():
        await asyncio.sleep(0.05)
        return {"type": "http.request", "body": b"x", "more_body": True}

    async def send(message):
        sent.append(message)

    middleware = BodyLimit(app, limit=lambda: 10_000, deadline_s=lambda: 0.3)
    started = time.monotonic()
    asyncio.run(middleware({"type": "http", "headers": []}, slow_receive, send))
    assert 0.3 <= time.monotonic() - started < 2
    assert sent[0]["status"] == 408 and b"within 0.3 s" in sent[1]["body"] and seen == []
