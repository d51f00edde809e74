"""Shedding at admission (issue 28): a request whose predicted wait for a first token (waiting requests /
first-token rate under load) already passes its deadline gets 503 at once instead of after the deadline.
The predictor as a specification (busy time only, a window, no prediction before enough evidence), then the
sim backend's door in-process (a real engine thread)."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from superinfer.core.wait import WaitPredictor
from tests.daemon.conftest import completion, sim_daemon
from tests.daemon.test_shedding_http import PROFILE as DEADLINES, config


def test_the_rate_counts_busy_time_only_and_needs_enough_first_tokens() -> None:
    p = WaitPredictor(first_tokens=4)
    p.observe(0.0, 3)
    p.observe(1.0, 2, first_tokens=1)
    p.observe(2.0, 1, first_tokens=1)
    p.observe(3.0, 0, first_tokens=1)
    assert p.rate() is None and p.predicted_wait_s() is None and not p.refuse(0.001)  # 3 < 4 first tokens
    p.observe(50.0, 0)  # 47 s idle: not service time
    p.observe(60.0, 4)
    p.observe(61.0, 3, first_tokens=1)
    assert p.rate() == pytest.approx(4 / 4.0)  # 4 first tokens over 4 busy seconds, not over 61
    assert p.predicted_wait_s() == pytest.approx(4.0)  # 3 waiting + this one, at 1 per second
    assert p.refuse(3.9) and not p.refuse(4.0)


def test_the_rate_follows_the_last_first_tokens_and_forgets_old_evidence() -> None:
    p = WaitPredictor(first_tokens=4, max_age_s=100.0)
    p.observe(0.0, 9)
    for t in range(1, 5):  # 1 per second
        p.observe(float(t), 9, first_tokens=1)
    assert p.rate() == pytest.approx(1.0)
    for t in (6.0, 8.0, 10.0, 12.0):  # the queue builds: one every 2 s, and only the last 4 count
        p.observe(t, 9, first_tokens=1)
    assert p.rate() == pytest.approx(0.5)
    assert p.predicted_wait_s() == pytest.approx(20.0)  # 9 waiting + this one at 0.5 per second
    p.observe(13.0, 0)
    p.observe(200.0, 3)  # after a long quiet spell, evidence older than 100 s is gone
    assert p.rate() is None
    with pytest.raises(ValueError, match="first_tokens"):
        WaitPredictor(first_tokens=0)


@given(st.lists(st.tuples(st.floats(0.0, 5.0), st.integers(0, 3)), max_size=40))
def test_with_nobody_waiting_there_is_no_service_rate_to_predict_from(steps: list[tuple[float, int]]) -> None:
    p = WaitPredictor(first_tokens=1, max_age_s=1e9)
    t = 0.0
    for dt, _ in steps:
        t += dt
        p.observe(t, 0)
    assert p.rate() is None and not p.refuse(0.0)


# deadlines: chat 10 x its 5 s TTFT SLO, voice 0.3 s; one sequence slot; admission shedding on
PROFILE = (DEADLINES.replace("max_queue_ttft_x = 4.0", "max_queue_ttft_x = 10.0\nshed_at_admission = true"))


def test_the_sim_door_refuses_at_once_what_cannot_start_in_time(tmp_path: Path) -> None:
    cfg = config(tmp_path, PROFILE)
    assert cfg.get("slo", "shed_at_admission") is True
    # evidence after two first tokens
    backend, daemon, app = sim_daemon(cfg, tmp_path, predictor=WaitPredictor(first_tokens=2))

    def body(tenant: str, n: int) -> dict:
        return completion(tenant, n, stream=True)

    async def go():
        await backend.start(daemon)
        daemon.ready = True
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://sim", timeout=60) as c:
            flood = [asyncio.create_task(c.post("/v1/completions", json=body("chat", 30))) for _ in range(12)]
            while backend.predictor.rate() is None:  # served one at a time: a measured rate after two
                await asyncio.sleep(0.02)
            t0 = time.monotonic()
            voice = await c.post("/v1/completions", json=body("voice", 5))
            voice_s = time.monotonic() - t0
            chat = asyncio.create_task(c.post("/v1/completions", json=body("chat", 5)))
            served = await asyncio.gather(*flood, chat)
        doc = daemon.state()
        await backend.drain(1.0)
        await backend.close()
        return voice, voice_s, served, doc

    voice, voice_s, served, doc = asyncio.run(go())
    assert voice.status_code == 503 and voice.headers["retry-after"] == "1", voice.text
    err = json.loads(voice.text)["error"]
    assert err["type"] == "overloaded" and "shed at admission" in err["message"]
    assert voice_s < 0.3  # answered before its deadline would have passed
    assert all(r.status_code == 200 and r.text.rstrip().endswith("data: [DONE]") for r in served)  # chat: 50 s
    m = daemon.metrics.registry.get_sample_value
    assert m("superinfer_requests_shed_total", {"tenant": "voice", "reason": "predicted"}) == 1
    assert m("superinfer_requests_arrived_total", {"tenant": "voice"}) == 0  # it never reached the engine
    assert doc["tenants"]["voice"]["shed"] == {"predicted": 1} and doc["tenants"]["voice"]["window"]["shed"] == 1
