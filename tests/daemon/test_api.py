"""The control API of a sim daemon started as a subprocess on loopback."""

from __future__ import annotations

import json
import re
import threading
import time

import httpx
import pytest

from superinfer.core import PARAM_BOUNDS
from tests.daemon.conftest import DEFAULTS, TEST_PROFILE, knob_values, start_daemon

pytestmark = pytest.mark.timeout(180)

STATE_KEYS = {"schema_version", "backend", "simulation", "status", "model", "profile", "uptime_s", "params",
              "probe", "tenants", "queues", "kv", "transfer", "counters", "ranking", "rotation_events", "planner"}


def test_healthz(daemon) -> None:
    r = daemon.get("/healthz")
    assert r.status_code == 200
    assert r.json()["status"] == "ok"
    assert r.json()["simulation"] is True


def test_a_wrong_method_is_405_with_every_method_the_path_takes(daemon) -> None:
    for path, allowed in (("/v1/params", "GET, PUT"), ("/v1/tuner", "GET, PUT"),
                          ("/healthz", "GET")):
        r = httpx.request("DELETE", daemon.url + path, headers=daemon.headers(), timeout=10)
        assert r.status_code == 405 and r.headers["allow"] == allowed, (path, r.headers.get("allow"))


def test_state_fields(daemon) -> None:
    r = daemon.post("/v1/completions", json={"prompt": "hello there", "max_tokens": 3})
    assert r.status_code == 200, r.text
    s = daemon.state()
    assert STATE_KEYS <= set(s), STATE_KEYS - set(s)
    assert s["backend"] == "sim" and s["simulation"] is True and s["sim"]["simulation"] is True
    assert s["model"] == "superinfer-sim:llama-3-8b"
    assert s["profile"] == "test-profile"
    assert s["uptime_s"] > 0
    assert set(s["queues"]) >= {"waiting", "rotary", "running"}
    for tier in ("hbm", "dram"):
        assert s["kv"][tier]["total"] > 0 and 0 <= s["kv"][tier]["used"] <= s["kv"][tier]["total"]
    for direction in ("h2d", "d2h"):
        assert {"gbps", "bytes_total", "seconds_total"} <= set(s["transfer"][direction])
    p = s["params"]
    assert {"alpha", "delta_b", "delta_f", "b_xfer", "min_residency", "max_rotations", "version"} <= set(p)
    assert set(PARAM_BOUNDS) <= set(p) and all(p[k] == DEFAULTS[k] for k in PARAM_BOUNDS)  # every knob
    assert p["b_xfer"] == 256  # fixed by the profile: no probe
    assert s["probe"] is None
    assert set(s["tenants"]) == {"chat", "voice"}
    voice = s["tenants"]["voice"]
    assert voice["ttft_slo_s"] == 1.0 and voice["tbt_slo_s"] == 0.05 and voice["weight"] == 4.0
    w = s["tenants"]["chat"]["window"]
    assert w["requests"] >= 1 and w["ttft_attainment"] is not None and w["ttft_p99_s"] >= w["ttft_p50_s"] > 0
    assert w["finished"] >= 1 and 0.0 <= w["slo_attainment"] <= min(w["ttft_attainment"], w["tbt_attainment"])
    assert w["tbt_gaps"] >= 2 and 0.0 <= w["tbt_gap_attainment"] <= 1.0
    assert w["rotations"] >= 0 and w["rotations_per_finished"] == round(w["rotations"] / w["finished"], 6)
    assert s["counters"]["arrived"] >= 1
    assert isinstance(s["rotation_events"], list)


def test_completion_is_marked_synthetic(daemon) -> None:
    r = daemon.post("/v1/completions", json={"prompt": "hi", "max_tokens": 4, "vllm_xargs": {"tenant": "voice"}})
    assert r.status_code == 200, r.text
    assert r.headers["x-superinfer-simulation"] == "true"
    body = r.json()
    assert body["choices"][0]["text"] == " sim0 sim1 sim2 sim3"
    assert body["usage"]["completion_tokens"] == 4
    assert body["superinfer"]["simulation"] is True and body["superinfer"]["tenant"] == "voice"
    assert body["superinfer"]["ttft_s"] > 0


def test_streaming_completion(daemon) -> None:
    chunks = []
    with httpx.stream("POST", daemon.url + "/v1/completions", json={"prompt": "hi", "max_tokens": 5, "stream": True},
                      timeout=30) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("data: "):
                chunks.append(line[6:])
    assert chunks[-1] == "[DONE]"
    texts = [json.loads(c)["choices"][0]["text"] for c in chunks[:-1]]
    assert "".join(texts) == " sim0 sim1 sim2 sim3 sim4"
    assert json.loads(chunks[-2])["choices"][0]["finish_reason"] == "length"


def test_unknown_tenant_rejected_per_profile(daemon) -> None:
    r = daemon.post("/v1/completions", json={"prompt": "hi", "max_tokens": 2, "vllm_xargs": {"tenant": "nobody"}})
    assert r.status_code == 400
    assert "unknown tenant 'nobody'" in r.json()["error"]["message"]
    r = daemon.post("/v1/completions", json={"prompt": "", "max_tokens": 2})
    assert r.status_code == 400 and r.json()["error"]["param"] == "prompt"
    r = daemon.post("/v1/completions", content=b"{not json")
    assert r.status_code == 400


def test_metrics_names(daemon) -> None:
    daemon.post("/v1/completions", json={"prompt": "hello", "max_tokens": 3})
    text = daemon.get("/metrics").text
    names = set(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M))
    kinds = dict(names)
    expected = {
        "superinfer_time_to_first_token_seconds": "histogram",
        "superinfer_inter_token_seconds": "histogram",
        "superinfer_slo_attained_total": "counter",
        "superinfer_slo_violations_total": "counter",
        "superinfer_queue_requests": "gauge",
        "superinfer_kv_blocks_used": "gauge",
        "superinfer_kv_blocks_capacity": "gauge",
        "superinfer_kv_transfer_bytes_total": "counter",
        "superinfer_kv_transfer_seconds_total": "counter",
        "superinfer_rotations_total": "counter",
        "superinfer_tenant_rotations_total": "counter",
        "superinfer_inter_token_slo_attained_total": "counter",
        "superinfer_inter_token_slo_violations_total": "counter",
        "superinfer_preemptions_total": "counter",
        "superinfer_recompute_fallbacks_total": "counter",
        "superinfer_planner_seconds": "histogram",
        "superinfer_event_loop_lag_seconds": "histogram",
        "superinfer_requests_shed_total": "counter",
        "superinfer_scheduler_param": "gauge",
        "superinfer_b_xfer_blocks": "gauge",
        "superinfer_probe_bandwidth_bytes_per_second": "gauge",
        "superinfer_probe_b_xfer_blocks": "gauge",
        "superinfer_requests_arrived_total": "counter",
        "superinfer_requests_finished_total": "counter",
        "superinfer_simulation": "gauge",
    }
    for name, kind in expected.items():
        assert kinds.get(name) == kind, (name, kinds.get(name))
    assert all(n.startswith("superinfer_") for n in kinds)
    samples = [line for line in text.splitlines() if line and not line.startswith("#")]
    for name, kind in kinds.items():
        assert (kind == "counter") == name.endswith("_total"), (name, kind)
    for line in samples:
        labels = set(re.findall(r'(\w+)="', line))
        assert labels <= {"tenant", "slo", "phase", "tier", "direction", "mode", "param", "reason", "le",
                          "backend", "profile", "model", "simulation",
                          # superinfer_tuner_*: bounded by the tuner's own vocabularies
                          "state", "outcome", "source", "window", "action"}, line
    assert 'superinfer_simulation 1.0' in text
    assert re.search(r'superinfer_time_to_first_token_seconds_count\{tenant="chat"\} [1-9]', text)
    assert re.search(r'superinfer_slo_attained_total\{slo="ttft",tenant="chat"\} [1-9]', text)
    assert re.search(r'superinfer_slo_(attained|violations)_total\{slo="both",tenant="chat"\} [1-9]', text)
    assert re.search(r'superinfer_inter_token_slo_attained_total\{tenant="chat"\} [0-9]', text)
    assert 'superinfer_scheduler_param{param="alpha"} 3.0' in text
    assert re.search(r'superinfer_queue_requests\{phase="waiting"\}', text)


def test_openapi_schema(daemon) -> None:
    spec = daemon.get("/openapi.json").json()
    assert "put" in spec["paths"]["/v1/params"]
    for path in ("/healthz", "/v1/state", "/metrics", "/v1/completions"):
        assert path in spec["paths"]
    body = spec["paths"]["/v1/params"]["put"]["requestBody"]["content"]["application/json"]["schema"]
    assert "alpha" in body["properties"]
    assert set(body["properties"]) == set(PARAM_BOUNDS) | {"b_xfer"} and body["additionalProperties"] is False
    assert spec["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"


def test_put_params_needs_token(daemon) -> None:
    before = daemon.get("/v1/params").json()
    r = daemon.put("/v1/params", json={"alpha": 4.0})
    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
    r = daemon.put("/v1/params", json={"alpha": 4.0}, headers={"Authorization": "Bearer wrong"})
    assert r.status_code == 401
    assert daemon.get("/v1/params").json()["version"] == before["version"]
    r = daemon.put("/v1/params", json={"alpha": 4.0, "min_residency": 2}, headers=daemon.headers())
    assert r.status_code == 200, r.text
    after = daemon.get("/v1/params").json()
    assert after["alpha"] == 4.0 and after["min_residency"] == 2 and after["version"] == before["version"] + 1
    on_disk = json.loads((daemon.state_dir / "params.json").read_text())
    assert on_disk["alpha"] == 4.0 and on_disk["tenants"]["voice"]["weight"] == 4.0
    assert 'superinfer_scheduler_param{param="alpha"} 4.0' in daemon.get("/metrics").text
    token = daemon.state_dir / "api-token"
    assert token.stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize("body,param,bound", [
    ({"alpha": 1000}, "alpha", [0.0, 100.0]),
    ({"delta_f": -61}, "delta_f", [-60.0, 60.0]),
    ({"delta_b": 10.5}, "delta_b", [-10.0, 10.0]),
    ({"min_residency": 1.5}, "min_residency", [0, 10000]),
    ({"b_xfer": -1}, "b_xfer", [0, 1000000]),
    ({"alpha": "3"}, "alpha", [0.0, 100.0]),
    ({"slack_gate_s": 3600.5}, "slack_gate_s", [-3600.0, 3600.0]),
    ({"rotation_margin_s": -0.1}, "rotation_margin_s", [0.0, 60.0]),
    ({"hopeless_last": 2}, "hopeless_last", [0, 1]),
    ({"hopeless_last": 0.5}, "hopeless_last", [0, 1]),
    ({"alpha": 4.0, "slack_gate_s": "1"}, "slack_gate_s", [-3600.0, 3600.0]),  # nothing of a bad body applies
])
def test_put_params_out_of_bounds(daemon, body, param, bound) -> None:
    before = daemon.get("/v1/params").json()
    r = daemon.put("/v1/params", json=body, headers=daemon.headers())
    assert r.status_code == 422, r.text
    err = r.json()["error"]
    assert err["param"] == param and err["bound"] == bound
    assert param in err["message"] and str(bound[1]) in err["message"]
    assert daemon.get("/v1/params").json() == before


@pytest.mark.parametrize("key", list(PARAM_BOUNDS))
def test_put_every_knob_bounds(daemon, key) -> None:
    """Every knob of the core: both bounds accepted, just outside rejected with 422 naming it."""
    lo, hi = PARAM_BOUNDS[key]
    before = daemon.get("/v1/params").json()
    try:
        for bad in (lo - 1, hi + 1):
            r = daemon.put("/v1/params", json={key: bad}, headers=daemon.headers())
            assert r.status_code == 422, r.text
            err = r.json()["error"]
            assert err["param"] == key and err["bound"] == [lo, hi] and key in err["message"]
        for good in (lo, hi):
            r = daemon.put("/v1/params", json={key: good}, headers=daemon.headers())
            assert r.status_code == 200 and r.json()[key] == good, r.text
    finally:
        r = daemon.put("/v1/params", json={key: before[key]}, headers=daemon.headers())
        assert r.status_code == 200 and r.json()[key] == before[key]


def test_knobs_round_trip_profile_put_state_persist_restore(tmp_path) -> None:
    """Each knob: the profile's value is live at start (/v1/params, /v1/state, /metrics, params.json); a
    PUT changes it everywhere; SIGTERM persists it in state.json; the next start restores it."""
    pv = {k: knob_values(k)[0] for k in PARAM_BOUNDS}
    uv = {k: knob_values(k)[1] for k in PARAM_BOUNDS}
    profile = TEST_PROFILE.replace("b_xfer = 256", "b_xfer = 256\n" + "".join(f"{k} = {v!r}\n" for k, v in pv.items()))

    def live(d, want: dict) -> None:
        assert {k: d.get("/v1/params").json()[k] for k in want} == want
        assert {k: d.state()["params"][k] for k in want} == want
        text = d.get("/metrics").text
        for k, v in want.items():
            m = re.search(rf'^superinfer_scheduler_param{{param="{k}"}} (\S+)$', text, re.M)
            assert m is not None and float(m.group(1)) == v, (k, m and m.group(0))
        on_disk = json.loads((d.state_dir / "params.json").read_text())
        assert {k: on_disk[k] for k in want} == want

    d = start_daemon(tmp_path, profile_text=profile)
    try:
        live(d, pv)
        assert d.get("/v1/params").json()["source"] == "profile"
        r = d.put("/v1/params", json=uv, headers=d.headers())
        assert r.status_code == 200, r.text
        live(d, uv)
    finally:
        assert d.terminate() == 0, d.output()[-3000:]
    saved = json.loads((d.state_dir / "state.json").read_text())
    assert saved["params"] == uv and saved["profile_params"] == pv
    again = start_daemon(tmp_path, state_dir=d.state_dir, profile_text=profile)
    try:
        live(again, uv)
        assert again.get("/v1/params").json()["source"].startswith("state:")
    finally:
        assert again.terminate() == 0


def test_put_params_bad_bodies(daemon) -> None:
    r = daemon.put("/v1/params", content=b'{"alpha": ', headers=daemon.headers())
    assert r.status_code == 400 and "malformed JSON" in r.json()["error"]["message"]
    r = daemon.put("/v1/params", json={"gamma": 1}, headers=daemon.headers())
    assert r.status_code == 422 and r.json()["error"]["param"] == "gamma"
    r = daemon.put("/v1/params", json=[1, 2], headers=daemon.headers())
    assert r.status_code == 422
    assert daemon.get("/healthz").status_code == 200  # still serving


def test_param_change_reorders_vlt_ranking(daemon) -> None:
    """δ_F shifts every waiting request's VLT: -60 puts waiting requests on top, +60 puts them below the
    running ones. Requests queue because the profile allows 4 sequences and each wants 300 tokens."""
    results: list[int] = []

    def client() -> None:
        r = httpx.post(daemon.url + "/v1/completions", json={"prompt": "x" * 40, "max_tokens": 300}, timeout=120)
        results.append(r.status_code)

    threads = [threading.Thread(target=client) for _ in range(12)]
    for t in threads:
        t.start()

    def top_phase(delta_f: float) -> dict:
        r = daemon.put("/v1/params", json={"delta_f": delta_f}, headers=daemon.headers())
        assert r.status_code == 200
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            s = daemon.state()
            phases = {e["phase"] for e in s["ranking"]}
            if {"waiting", "running"} <= phases and s["params"]["delta_f"] == delta_f:
                time.sleep(0.2)  # let the next iterations plan with the new value
                return daemon.state()["ranking"]
            time.sleep(0.05)
        raise AssertionError(f"no mix of waiting and running requests: {daemon.state()['ranking']}")

    try:
        low = top_phase(-60.0)
        assert low[0]["phase"] == "waiting", low
        assert low[0]["vlt_s"] > 0  # age - S_F - δ_F with δ_F = -60
        high = top_phase(60.0)
        assert high[0]["phase"] == "running", high
        assert all(e["vlt_s"] < 0 for e in high if e["phase"] == "waiting")
    finally:
        daemon.put("/v1/params", json={"delta_f": 0.5}, headers=daemon.headers())
        for t in threads:
            t.join(120)
    assert results == [200] * 12
