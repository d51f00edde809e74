"""First-token deadlines on the daemon's OpenAI endpoint (issue 28): a request still without a first token at
its tenant's deadline is shed with HTTP 503 and ``Retry-After``, counted in ``/metrics`` and the SLO window as a
miss; a request that got its first token is never cut off. Sim backend in-process (a real engine thread)."""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path

import httpx
import pytest

from superinfer.daemon.config import resolve
from superinfer.daemon.profiles import ProfileError
from tests.daemon.conftest import TEST_PROFILE, completion, sim_daemon

# the shared test profile with one sequence slot, deadlines at 4x the TTFT SLO, and 0.3 s for "voice"
PROFILE = (TEST_PROFILE.replace("max_num_seqs = 4", "max_num_seqs = 1")
           .replace('default_tenant = "chat"', 'default_tenant = "chat"\nmax_queue_ttft_x = 4.0')
           .replace("weight = 4.0", "weight = 4.0\nmax_queue_s = 0.3"))


def config(tmp_path: Path, text: str = PROFILE):
    (tmp_path / "p.toml").write_text(text)
    return resolve(None, profile_file=str(tmp_path / "p.toml"),
                   env={"XDG_CONFIG_HOME": str(tmp_path / "c"), "XDG_STATE_HOME": str(tmp_path / "s")})


def test_deadlines_come_from_the_profile(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    deadlines = {t.name: t.max_queue_s for t in cfg.tenants}
    assert deadlines == {"chat": 4.0 * 5.0, "voice": 0.3}  # the [slo] multiple, or the tenant's own
    off = config(tmp_path, PROFILE.replace("max_queue_ttft_x = 4.0\n", "").replace("max_queue_s = 0.3\n", ""))
    assert all(math.isinf(t.max_queue_s) for t in off.tenants)  # no deadline unless the profile says so
    with pytest.raises(ProfileError, match=r"tenants\[1\]\.max_queue_s"):
        config(tmp_path, PROFILE.replace("max_queue_s = 0.3", "max_queue_s = -1"))


def test_a_request_without_a_first_token_at_its_deadline_is_shed_with_503_and_retry_after(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    backend, daemon, app = sim_daemon(cfg, tmp_path)

    async def go():
        await backend.start(daemon)
        daemon.ready = True
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://sim", timeout=30) as c:
            long = asyncio.create_task(c.post("/v1/completions", json=completion("chat", 150, True)))
            await asyncio.sleep(0.2)  # the chat request holds the one sequence slot
            shed = await asyncio.gather(c.post("/v1/completions", json=completion("voice", 5, True)),
                                        c.post("/v1/completions", json=completion("voice", 5, False)))
            done = await long
        doc = daemon.state()
        await backend.drain(1.0)
        await backend.close()
        return done, shed, doc

    done, shed, doc = asyncio.run(go())
    assert done.status_code == 200 and done.text.rstrip().endswith("data: [DONE]")  # never cut off
    for r in shed:
        assert r.status_code == 503, r.text
        assert r.headers["retry-after"] == "1"  # the voice tenant's TTFT SLO, 1 s, in whole seconds
        assert json.loads(r.text)["error"]["type"] == "overloaded"
    m = daemon.metrics.registry.get_sample_value
    assert m("superinfer_requests_shed_total", {"tenant": "voice", "reason": "deadline"}) == 2
    w = doc["tenants"]["voice"]["window"]
    assert w["shed"] == 2 and w["finished"] == 0 and w["slo_attainment"] == 0.0  # shed is a miss
    c = doc["counters"]
    assert c["shed"] == 2 and c["arrived"] == c["finished"] + c["rejected"] + c["shed"]
