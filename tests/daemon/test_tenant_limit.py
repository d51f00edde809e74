"""A tenant's share of the host at the door (issue 28): ``[[tenants]] max_inflight``. The request one past the
limit gets 429 ``rate_limit_exceeded`` with ``Retry-After`` at once, counted as shed ``tenant_limit`` and as a
miss in that tenant's SLO window; a slot comes back when a request ends, however it ends; other tenants are
not affected. Sim backend in-process (a real engine thread)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest

from superinfer.core import Tenant
from superinfer.daemon.metrics import DaemonMetrics
from superinfer.daemon.profiles import ProfileError
from superinfer.daemon.stats import SloWindow
from superinfer.daemon.tenant_limit import TenantLimit
from tests.daemon.conftest import completion, sim_daemon
from tests.daemon.profiles import profile_toml
from tests.daemon.test_shedding_http import config

# voice: at most 2 requests in flight; chat: no limit
PROFILE = profile_toml(tenants={"voice": {"max_inflight": 2}})


def test_the_limit_comes_from_the_profile_and_bad_values_name_the_key(tmp_path: Path) -> None:
    assert {t.name: t.max_inflight for t in config(tmp_path, PROFILE).tenants} == {"chat": 0, "voice": 2}
    for bad in (-1, 1.5, "two"):
        with pytest.raises(ProfileError, match=r"max_inflight"):
            config(tmp_path, profile_toml(tenants={"voice": {"max_inflight": bad}}))


def test_slots_are_held_per_tenant_and_given_back() -> None:
    m = DaemonMetrics(["a", "b"], backend="sim", profile="test", model="m", simulation=True)
    w = SloWindow(["a", "b"], 60.0)
    limit = TenantLimit([Tenant("a", 2.5, 0.1, max_inflight=1), Tenant("b")], m, w)
    assert limit.enter("a") is None
    r = limit.enter("a")
    assert r is not None and r.status_code == 429 and r.headers["retry-after"] == "3"  # ceil(2.5 s)
    assert json.loads(r.body)["error"]["type"] == "rate_limit_exceeded"
    assert all(limit.enter("b") is None for _ in range(50))  # no limit: never refused
    assert m.registry.get_sample_value("superinfer_requests_shed_total", {"tenant": "a", "reason": "tenant_limit"}) == 1
    assert m.registry.get_sample_value("superinfer_requests_shed_total", {"tenant": "b", "reason": "tenant_limit"}) is None
    assert w.summary()["a"]["shed"] == 1 and w.summary()["a"]["slo_attainment"] == 0.0  # a miss
    limit.leave("a")
    assert limit.enter("a") is None and limit.held["a"] == 1
    limit.leave("a")
    with pytest.raises(RuntimeError, match="without enter"):
        limit.leave("a")
    with pytest.raises(ValueError, match="max_inflight"):
        Tenant("c", max_inflight=-1)


def test_the_request_past_the_limit_gets_429_and_the_slot_comes_back(tmp_path: Path) -> None:
    cfg = config(tmp_path, PROFILE)
    backend, daemon, app = sim_daemon(cfg, tmp_path)

    async def go():
        await backend.start(daemon)
        daemon.ready = True
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://sim", timeout=60) as c:
            # two voice requests in flight (one streamed, one not), then a third and a chat request
            held = [asyncio.create_task(c.post("/v1/completions", json=completion("voice", 200, s))) for s in (True, False)]
            await asyncio.sleep(0.3)
            third, chat = await asyncio.gather(c.post("/v1/completions", json=completion("voice", 5, False)),
                                               c.post("/v1/completions", json=completion("chat", 5, False)))
            done = await asyncio.gather(*held)
            after = await c.post("/v1/completions", json=completion("voice", 5, True))  # the slots came back
        doc = daemon.state()
        await backend.drain(1.0)
        await backend.close()
        return third, chat, done, after, doc

    third, chat, done, after, doc = asyncio.run(go())
    assert third.status_code == 429 and third.headers["retry-after"] == "1", third.text  # voice: TTFT SLO 1 s
    assert "max_inflight" in json.loads(third.text)["error"]["message"]
    assert chat.status_code == 200 and all(r.status_code == 200 for r in done)
    assert after.status_code == 200 and after.text.rstrip().endswith("data: [DONE]")
    m = daemon.metrics.registry.get_sample_value
    assert m("superinfer_requests_shed_total", {"tenant": "voice", "reason": "tenant_limit"}) == 1
    assert m("superinfer_requests_arrived_total", {"tenant": "voice"}) == 3  # the refused one never arrived
    assert doc["tenants"]["voice"]["window"]["shed"] == 1 and doc["tenants"]["chat"]["window"]["shed"] == 0
