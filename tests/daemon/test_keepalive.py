"""An idle keep-alive connection outlives the usual client pool expiry (httpx / the OpenAI SDK: 5 s).

With uvicorn's default (5 s) the daemon closed idle connections exactly when such clients reuse them;
a completion sent at that moment failed on the client (httpx ``ReadError``) and never reached the
engine: the load test lost about one request in three runs (client 1999 OK, daemon 1999 arrived)."""

from __future__ import annotations

import http.client
import json
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from superinfer.daemon.server import KEEP_ALIVE_S

from .conftest import start_daemon

pytestmark = pytest.mark.timeout(120)

HTTPX_KEEPALIVE_EXPIRY_S = 5.0  # httpx.Limits' default, which the OpenAI SDK keeps


def test_keep_alive_outlasts_client_pool_expiry() -> None:
    assert KEEP_ALIVE_S > HTTPX_KEEPALIVE_EXPIRY_S + 5.0  # margin for a loaded host's late timers


def test_idle_connection_reused_after_client_expiry(tmp_path: Path) -> None:
    d = start_daemon(tmp_path)
    try:
        u = urlsplit(d.url)
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
        body = json.dumps({"prompt": "hello there", "max_tokens": 2})
        headers = {"Content-Type": "application/json"}
        conn.request("POST", "/v1/completions", body, headers)
        r = conn.getresponse()
        assert r.status == 200, r.read()
        r.read()
        sock = conn.sock
        assert sock is not None  # HTTP/1.1 keep-alive: the connection stays open
        time.sleep(HTTPX_KEEPALIVE_EXPIRY_S + 1.0)  # idle past the old 5 s server timeout
        conn.request("POST", "/v1/completions", body, headers)  # same socket; raises if the server closed it
        assert conn.sock is sock
        r = conn.getresponse()
        assert r.status == 200, r.read()
        assert json.loads(r.read())["usage"]["completion_tokens"] == 2
        conn.close()
        c = d.state()["counters"]
        assert c["arrived"] == c["finished"] == 2
    finally:
        assert d.terminate() == 0, d.output()[-4000:]
