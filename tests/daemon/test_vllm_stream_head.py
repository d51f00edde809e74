"""The engine stream's head (superinfer.daemon.backends.vllm_stream): how a shed or abandoned request lets its
engine stream go, against a real loopback server through real httpx: a deadline already past sends nothing, an
engine that never answers is let go after ABANDON_OPEN_S, and a response whose client left before its first
byte still closes the engine stream and counts the request."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from superinfer.daemon.backends import vllm_stream
from superinfer.daemon.backends.vllm_stream import Head, Relayed, Shed


async def silent_engine() -> tuple[asyncio.AbstractServer, str, list[int]]:
    """A loopback server that accepts connections and never answers: (server, url, connections accepted)."""
    accepted: list[int] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(1)
        try:
            await reader.read(-1)  # until the client closes
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, f"http://127.0.0.1:{port}", accepted


def test_a_deadline_already_past_sheds_without_sending_anything() -> None:
    async def go() -> tuple[list[int], bool]:
        server, url, accepted = await silent_engine()
        async with server, httpx.AsyncClient(base_url=url) as client:
            head = Head(client.stream("POST", "/v1/completions", json={}))
            with pytest.raises(Shed):
                await head.result(-0.5)
            head.abandon()
            await asyncio.sleep(0.2)
            return accepted, head.task.cancelled()

    accepted, cancelled = asyncio.run(go())
    assert accepted == [] and cancelled


def test_an_engine_that_never_answers_is_let_go(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vllm_stream, "ABANDON_OPEN_S", 0.3)

    async def go() -> tuple[list[int], bool, int]:
        server, url, accepted = await silent_engine()
        async with server, httpx.AsyncClient(base_url=url) as client:
            head = Head(client.stream("POST", "/v1/completions", json={}))
            with pytest.raises(Shed):
                await head.result(0.2)  # the request reached the engine, which says nothing
            head.abandon()
            await asyncio.sleep(0.8)
            return accepted, head.task.done(), len(vllm_stream._BACKGROUND)

    accepted, done, closing = asyncio.run(go())
    assert accepted == [1] and done and closing == 0


def test_a_response_whose_client_left_before_its_first_byte_still_cleans_up() -> None:
    started, cleaned = [], []

    async def body():
        started.append(1)
        yield "data: x\n\n"

    async def cleanup() -> None:
        cleaned.append(1)

    async def receive() -> dict:
        return {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        await asyncio.sleep(0.01)

    scope = {"type": "http", "asgi": {"spec_version": "2.3"}, "method": "POST", "path": "/"}
    asyncio.run(Relayed(body(), cleanup, media_type="text/event-stream")(scope, receive, send))
    assert cleaned == [1]  # the cleanup runs once, whether or not the body ever started
