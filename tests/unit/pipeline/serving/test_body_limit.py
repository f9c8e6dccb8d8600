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
