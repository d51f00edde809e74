"""Overload on the real engine through the daemon's HTTP endpoint (issue 28, short form): vLLM on CPU (the
tiny Llama, 96 KV blocks) behind ``superinferd start --backend vllm``, flooded by streaming clients. Every
request gets a whole completion or a 503 with ``Retry-After`` within its deadline plus its TTFT SLO; an
accepted stream is never cut off; ``/metrics`` counts what the clients saw; ``/v1/state`` stays responsive."""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path

import httpx
import numpy as np
import pytest

from tests.daemon.conftest import start_daemon

pytestmark = pytest.mark.timeout(600)
pytest.importorskip("vllm")

VLLM_ENV = {"VLLM_CPU_OMP_THREADS_BIND": "nobind", "TOKENIZERS_PARALLELISM": "false"}
# max_queue_ttft_x 0.5 x the chat tenant's TTFT SLO of 2 s (profiles/cpu-demo.toml): long enough for the first
# prefill steps on a slow shared host, far too short for the queue: 96 KV blocks hold about 14 of these prompts,
# and a place frees only when a request ends its 200 tokens
DEADLINE_S = 1.0
TTFT_SLO_S = 2.0
CLIENTS, TOKENS = 64, 200  # ~13 k prompt tokens at once: 26 steps of 512 prefill tokens before the last starts


async def flood(url: str) -> tuple[list[tuple[int, float, str, dict]], list[float]]:
    """CLIENTS streaming requests at once, and /v1/state polled beside them: (status, seconds to the answer's
    headers, body, headers) per request; /v1/state latencies."""
    polls: list[float] = []
    done = asyncio.Event()

    async def one(c: httpx.AsyncClient, i: int) -> tuple[int, float, str, dict]:
        t0 = time.monotonic()
        body = {"model": "tiny-llama", "prompt": f"request {i}: " + "the quick brown fox " * 50, "max_tokens": TOKENS,
                "stream": True, "ignore_eos": True, "stream_options": {"include_usage": True}}
        async with c.stream("POST", "/v1/completions", json=body) as r:
            waited = time.monotonic() - t0
            text = "".join([chunk async for chunk in r.aiter_text()])
            return r.status_code, waited, text, dict(r.headers)

    async def poll(c: httpx.AsyncClient) -> None:
        while not done.is_set():
            t0 = time.monotonic()
            (await c.get("/v1/state")).raise_for_status()
            polls.append(time.monotonic() - t0)
            await asyncio.sleep(0.2)

    async with httpx.AsyncClient(base_url=url, timeout=httpx.Timeout(300.0)) as c:
        poller = asyncio.create_task(poll(c))
        answers = await asyncio.gather(*(one(c, i) for i in range(CLIENTS)))
        done.set()
        await poller
    return answers, polls


def test_overload_sheds_with_503_and_retry_after_and_counts_add_up(tmp_path: Path) -> None:
    d = start_daemon(tmp_path, "--profile", "cpu-demo", "--device", "cpu", "--set", "load.rps=0",
                     "--set", f"slo.max_queue_ttft_x={DEADLINE_S / TTFT_SLO_S}", profile_text=None, backend="vllm",
                     env=VLLM_ENV, timeout=450)
    try:
        answers, polls = asyncio.run(flood(d.url))
        served = [a for a in answers if a[0] == 200]
        shed = [a for a in answers if a[0] == 503]
        assert len(served) + len(shed) == CLIENTS, [a[0] for a in answers]
        assert served and shed, "the flood was meant to overload the engine, and the engine to serve some"
        for _, waited, text, _ in served:  # whole streams: every token (the usage event counts them; vLLM
            # may merge several steps' text into one event when its output queue backs up), then [DONE]
            assert text.rstrip().endswith("data: [DONE]"), text[-300:]
            usage = re.findall(r'"completion_tokens":(\d+)', text)
            assert usage and int(usage[-1]) == TOKENS, usage
        for _, waited, text, headers in shed:
            assert headers["retry-after"] == "2" and '"overloaded"' in text
            assert waited <= DEADLINE_S + TTFT_SLO_S, waited
        metrics = d.get("/metrics").text
        m = re.search(r'^superinfer_requests_shed_total\{reason="deadline",tenant="chat"\} ([0-9.]+)', metrics, re.M)
        assert m and int(float(m.group(1))) == len(shed)
        c = d.state()["counters"]
        assert c["shed"] == len(shed) and c["finished"] == len(served) and c["arrived"] == CLIENTS
        assert float(np.percentile(polls, 99)) <= 0.2 or max(polls) <= 0.5, sorted(polls)[-5:]
    finally:
        code = d.terminate(timeout=300)
    assert code == 0, d.output()[-3000:]
