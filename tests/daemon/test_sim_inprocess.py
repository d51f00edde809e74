"""The whole sim backend in-process: a real engine thread, a stand-in host with real config, params,
metrics and SLO windows, and the OpenAI routes called through ASGI (no subprocess, no socket)."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from pathlib import Path

import httpx
from fastapi import FastAPI

from superinfer.daemon.backends.sim import SimBackend
from superinfer.daemon.backends.sim_http import synthetic_text
from superinfer.daemon.config import Config, resolve
from superinfer.daemon.metrics import DaemonMetrics
from superinfer.daemon.params import ParamStore
from superinfer.daemon.stats import SloWindow
from tests.daemon.conftest import TEST_PROFILE, sim_daemon

STATE_KEYS = {"queues", "kv", "transfer", "counters", "ranking", "rotation_events", "planner", "sim"}


@dataclass
class Host:
    """What a backend sees of the daemon (``superinfer.daemon.backends.base.Host``)."""

    cfg: Config
    store: ParamStore
    metrics: DaemonMetrics
    slo: SloWindow
    ready: bool = True
    draining: bool = False
    tuner: object = None


def make(tmp_path: Path) -> tuple[SimBackend, Host, FastAPI]:
    (tmp_path / "test.toml").write_text(TEST_PROFILE)
    cfg = resolve(None, profile_file=str(tmp_path / "test.toml"),
                  env={"XDG_CONFIG_HOME": str(tmp_path / "c"), "XDG_STATE_HOME": str(tmp_path / "s")})
    backend = SimBackend(cfg)
    names = [t.name for t in cfg.tenants]
    host = Host(cfg, ParamStore(cfg.params(), 256, cfg.tenants, tmp_path / "params.json", "test"),
                DaemonMetrics(names, backend="sim", profile=cfg.profile, model=backend.model_name(), simulation=True),
                SloWindow(names, 60.0))
    app = FastAPI()
    backend.register_routes(app, host)
    return backend, host, app


def client(app: FastAPI) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://sim", timeout=30.0)


def test_backend_serves_completions_in_process(tmp_path):
    backend, host, app = make(tmp_path)

    async def go():
        await backend.start(host)
        async with client(app) as c:
            models = (await c.get("/v1/models")).json()
            one = await c.post("/v1/completions", json={"prompt": "hello world", "max_tokens": 5,
                                                        "vllm_xargs": {"tenant": "voice"}})
            streamed = await c.post("/v1/completions", json={"prompt": [1, 2, 3], "max_tokens": 4, "stream": True})
            bad = await c.post("/v1/completions", json={"prompt": "x", "max_tokens": 0})
            unknown = await c.post("/v1/completions", json={"prompt": "x", "vllm_xargs": {"tenant": "nobody"}})
            malformed = await c.post("/v1/completions", content=b"{not json")
        state = backend.engine_state()
        drained = await backend.drain(1.0)
        await backend.close()
        return models, one, streamed, bad, unknown, malformed, state, drained

    models, one, streamed, bad, unknown, malformed, state, drained = asyncio.run(go())
    assert models["data"] == [{"id": "superinfer-sim:llama-3-8b", "object": "model", "owned_by": "superinfer",
                               "simulation": True}]
    assert one.status_code == 200 and one.headers["x-superinfer-simulation"] == "true"
    body = one.json()
    assert body["choices"][0]["text"] == synthetic_text(0, 5)
    assert body["usage"] == {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8}
    assert body["superinfer"]["tenant"] == "voice" and body["id"] == "cmpl-sim-0"
    assert streamed.status_code == 200 and streamed.headers["content-type"].startswith("text/event-stream")
    events = [line.removeprefix("data: ") for line in streamed.text.split("\n\n") if line]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert "".join(ch["choices"][0]["text"] for ch in chunks) == synthetic_text(0, 4)
    assert chunks[0]["id"] == "cmpl-sim-1" and chunks[-1]["usage"]["completion_tokens"] == 4
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "max_tokens"
    assert unknown.status_code == 400 and unknown.json()["error"]["param"] == "vllm_xargs.tenant"
    assert malformed.status_code == 400 and "malformed JSON" in malformed.json()["error"]["message"]
    # the /v1/state part and the metrics agree with what was served
    assert set(state) == STATE_KEYS
    assert state["counters"]["arrived"] == state["counters"]["finished"] == 2
    assert state["queues"] == {"waiting": 0, "rotary": 0, "running": 0, "inflight_http": 0}
    assert state["planner"]["iterations"] >= 5 and state["sim"]["replay"] is None
    assert state["kv"]["hbm"]["total"] == backend.twin.hbm_blocks and state["kv"]["block_bytes"] == backend.cm.block_bytes
    m = host.metrics.registry.get_sample_value
    assert m("superinfer_requests_arrived_total", {"tenant": "voice"}) == 1
    assert m("superinfer_requests_finished_total", {"tenant": "chat"}) == 1
    assert m("superinfer_generation_tokens_total", {"tenant": "chat"}) == 4
    assert m("superinfer_iterations_total") == state["planner"]["iterations"]
    assert drained == {"aborted": 0, "counters": state["counters"]}
    assert backend.crashed is None and not backend._thread.is_alive()


def test_stop_admission_refuses_and_the_drain_deadline_aborts_waiters(tmp_path):
    backend, host, app = make(tmp_path)

    async def go():
        await backend.start(host)
        async with client(app) as c:
            long = asyncio.create_task(c.post("/v1/completions", json={"prompt": "x", "max_tokens": 8000}))
            for _ in range(500):
                if backend.counters()["arrived"]:
                    break
                await asyncio.sleep(0.01)
            assert backend.inflight() == 1, "the long request is in the twin"
            backend.stop_admission()
            refused = await c.post("/v1/completions", json={"prompt": "x"})
            drained = await backend.drain(0.1)
            aborted = await long
        await backend.close()
        return refused, drained, aborted

    refused, drained, aborted = asyncio.run(go())
    assert refused.status_code == 503 and refused.headers["retry-after"] == "5"
    assert refused.json()["error"]["message"].startswith("draining")
    assert drained["aborted"] == 1 and drained["counters"]["aborted"] == 1
    assert aborted.status_code == 503 and aborted.json()["error"]["message"].startswith("aborted")
    assert backend.inflight() == 0 and backend.crashed is None


WINDOW_KEYS = {"requests", "finished", "shed", "ttft_attainment", "tbt_attainment", "slo_attainment", "tbt_gaps",
               "tbt_gap_attainment", "rotations", "rotations_per_finished", "ttft_p50_s", "ttft_p99_s",
               "tbt_p50_s", "tbt_p99_s"}


def test_state_document_carries_the_slo_window(tmp_path):
    """``Daemon.state()`` (the ``/v1/state`` document) of a daemon serving through the sim backend: every
    tenant's window has both-SLO attainment, pooled-gap attainment and rotations per finished request,
    agreeing with the answers the clients got and with ``/metrics``."""
    from superinfer.daemon.server import Daemon

    (tmp_path / "test.toml").write_text(TEST_PROFILE)
    cfg = resolve(None, profile_file=str(tmp_path / "test.toml"),
                  env={"XDG_CONFIG_HOME": str(tmp_path / "c"), "XDG_STATE_HOME": str(tmp_path / "s")})
    backend, daemon, app = sim_daemon(cfg, tmp_path)
    sent = [("chat", 6)] * 3 + [("voice", 5)] * 3 + [("voice", 1)]

    async def go():
        await backend.start(daemon)
        daemon.ready = True
        async with client(app) as c:
            answers = await asyncio.gather(*(c.post("/v1/completions", json={
                "prompt": "x" * 400, "max_tokens": n, "vllm_xargs": {"tenant": t}}) for t, n in sent))
        doc = daemon.state()
        await backend.drain(1.0)
        await backend.close()
        return answers, doc

    answers, doc = asyncio.run(go())
    assert all(a.status_code == 200 for a in answers), [a.text for a in answers]
    slos = {t.name: t for t in cfg.tenants}
    m = daemon.metrics.registry.get_sample_value
    for name in ("chat", "voice"):
        w = doc["tenants"][name]["window"]
        assert set(w) == WINDOW_KEYS
        mine = [(n, a.json()["superinfer"]) for (t, n), a in zip(sent, answers) if t == name]
        both = sum(s["ttft_s"] <= slos[name].ttft_slo and (s["tbt_mean_s"] or 0.0) <= slos[name].tbt_slo
                   for _, s in mine)
        assert w["finished"] == w["requests"] == len(mine)
        assert w["slo_attainment"] == round(both / len(mine), 6)
        assert w["tbt_gaps"] == sum(n - 1 for n, _ in mine) > 0
        assert w["tbt_gap_attainment"] == round(
            m("superinfer_inter_token_slo_attained_total", {"tenant": name}) / w["tbt_gaps"], 6)
        assert m("superinfer_slo_attained_total", {"tenant": name, "slo": "both"}) == both
        assert m("superinfer_slo_violations_total", {"tenant": name, "slo": "both"}) == len(mine) - both
        # the sim attributes rotations to tenants: a number (none at this load), not null
        assert w["rotations"] == m("superinfer_tenant_rotations_total", {"tenant": name}) == 0
        assert w["rotations_per_finished"] == 0.0
    assert doc["slo_window_s"] == 60.0 and doc["simulation"] is True
