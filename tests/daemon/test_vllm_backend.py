"""The vllm backend on CPU with the tiny Llama: a real OpenAI completion carrying a tenant through
``vllm_xargs``, served by vLLM with RotaScheduler + DuplexKVConnector behind the daemon."""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from tests.daemon.conftest import start_daemon
from tests.daemon.profiles import profile_toml, vllm_cpu

pytestmark = pytest.mark.timeout(600)

try:  # skip ONLY when the plugin cannot be imported; any other failure is a test failure
    pytest.importorskip("vllm")
    from superinfer.vllm import DuplexKVConnector, RotaScheduler  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the plugin's state
    pytest.skip(f"superinfer.vllm.RotaScheduler cannot be imported: {exc}", allow_module_level=True)

VLLM_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "TOKENIZERS_PARALLELISM": "false",
}


def test_vllm_backend_serves_completion_with_tenant(tmp_path: Path) -> None:
    from superinfer.daemon.backends.tiny import build_tiny_llama

    model = build_tiny_llama(tmp_path / "tiny", seed=0)
    profile = profile_toml(
        base=vllm_cpu(model),
        engine={"max_num_seqs": 8, "max_num_batched_tokens": 512, "num_gpu_blocks_override": 64, "kv_cache_gib": 1.0,
                "enforce_eager": True, "startup_timeout_s": 400.0},
        slo={"default_tenant": "chat", "unknown_tenant": "reject"},
        tuner={"mode": "shadow", "window_s": 8.0, "min_requests": 5},
        tenants={"chat": {}, "voice": {"tbt_s": 0.05, "weight": 2.0}})
    d = start_daemon(tmp_path, "--device", "cpu", profile_text=profile, env=VLLM_ENV, backend="vllm", timeout=450)
    try:
        s = d.state()
        assert s["backend"] == "vllm" and s["simulation"] is False and s["status"] == "ok"
        assert s["kv"]["hbm"]["total"] == 64
        body = {"model": str(model), "prompt": "the quick brown fox", "max_tokens": 8, "temperature": 0.0,
                "vllm_xargs": {"tenant": "voice"}}
        r = d.post("/v1/completions", json=body)
        assert r.status_code == 200, r.text
        out = r.json()
        assert out["object"] == "text_completion" and out["system_fingerprint"].startswith("vllm-")
        assert out["usage"]["completion_tokens"] == 8 and "superinfer" not in out
        chunks = []
        with httpx.stream("POST", d.url + "/v1/completions", json={**body, "stream": True}, timeout=120) as sr:
            assert sr.status_code == 200
            chunks = [line[6:] for line in sr.iter_lines() if line.startswith("data: ")]
        assert chunks[-1] == "[DONE]"
        streamed = "".join(json.loads(c)["choices"][0]["text"] for c in chunks[:-1])
        assert streamed == out["choices"][0]["text"]  # greedy: same text both ways
        bad = d.post("/v1/completions", json={**body, "vllm_xargs": {"tenant": "nobody"}})
        assert bad.status_code == 400 and "unknown tenant" in bad.json()["error"]["message"]
        s = d.state()
        assert s["tenants"]["voice"]["window"]["requests"] == 1  # the streamed one was timed
        w = s["tenants"]["voice"]["window"]
        assert w["finished"] == 1 and w["slo_attainment"] in (0.0, 1.0)
        assert w["slo_attainment"] <= min(w["ttft_attainment"], w["tbt_attainment"])
        assert w["tbt_gaps"] == len(chunks) - 2  # one event per token, no gap before the first, [DONE]
        assert w["rotations"] is None and w["rotations_per_finished"] is None  # not attributed by this backend
        assert s["tenants"]["chat"]["window"]["requests"] == 0
        assert s["counters"]["arrived"] == s["counters"]["finished"] == 2
        metrics = d.get("/metrics").text
        assert 'superinfer_requests_finished_total{tenant="voice"} 2.0' in metrics
        assert 'superinfer_simulation 0.0' in metrics
        decided = sum(float(v) for v in re.findall(
            r'superinfer_slo_(?:attained|violations)_total\{slo="both",tenant="voice"\} (\S+)', metrics))
        assert decided == 1.0, "the streamed request decided 'both' once"
        gap_counts = sum(float(v) for v in re.findall(
            r'superinfer_inter_token_slo_(?:attained|violations)_total\{tenant="voice"\} (\S+)', metrics))
        assert gap_counts == w["tbt_gaps"]
        # the online tuner (shadow) on the real engine: it was fed exactly the streamed request (the one the
        # proxy can time), has its contract shape, and an operator's write becomes its incumbent
        time.sleep(2.5)  # one serving-loop tick hands the feed to the tuner
        t = d.get("/v1/tuner").json()
        assert t["mode"] == "shadow" and t["requests_seen"] == 1 and s["tuner"]["mode"] == "shadow"
        assert {"state", "frozen", "frozen_reason", "incumbent", "candidate", "phase", "last_decisions",
                "rollbacks_last_hour"} <= set(t)
        r = d.put("/v1/params", json={"alpha": 5.0}, headers=d.headers())
        assert r.status_code == 200
        t = d.get("/v1/tuner").json()
        # shadow adopts the operator's values and does not freeze for them (it may be frozen for low load)
        assert t["incumbent"]["alpha"] == 5.0 and not (t["frozen_reason"] or "").startswith("operator")
        on_disk = json.loads((d.state_dir / "params.json").read_text())
        assert on_disk["alpha"] == 5.0 and on_disk["tenants"]["voice"]["tbt_slo"] == 0.05
        child = s["engine"]["pid"]
    finally:
        code = d.terminate(timeout=120)
    assert code == 0, d.output()[-3000:]
    assert "RotaScheduler" in d.output()
    alive = subprocess.run(["kill", "-0", str(child)], capture_output=True).returncode == 0
    assert not alive, "the vLLM child outlived the daemon"
    saved = json.loads((d.state_dir / "state.json").read_text())
    assert saved["counters"]["arrived"] == saved["counters"]["finished"] == 2
