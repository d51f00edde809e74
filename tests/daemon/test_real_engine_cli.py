"""The real engine in one command (issue 31): ``superinferd start --profile cpu-demo --device cpu`` builds the
tiny model, serves it through vLLM with RotaScheduler and DuplexKV under KV pressure, answers a real
OpenAI client under the short served name, shows rotations in ``superinferd top``, and stops cleanly. An
engine that fails to load, or dies while serving, is reported with vLLM's own root-cause line."""

from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path

import pytest

from tests.daemon.conftest import run_cli, start_daemon

pytestmark = pytest.mark.timeout(600)
pytest.importorskip("vllm")
openai = pytest.importorskip("openai")

VLLM_ENV = {"VLLM_CPU_OMP_THREADS_BIND": "nobind", "TOKENIZERS_PARALLELISM": "false"}


def group_gone(pgid: int) -> bool:
    """No process is left in the vLLM child's process group (server, engine core, workers)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


def cli_env(tmp: Path) -> dict[str, str]:
    from tests.daemon.conftest import base_env

    return base_env(tmp)


def test_cpu_demo_serves_a_real_client_under_kv_pressure(tmp_path: Path) -> None:
    d = start_daemon(tmp_path, "--profile", "cpu-demo", "--device", "cpu", "--set", "load.rps=4", profile_text=None,
                     backend="vllm", env=VLLM_ENV, timeout=450)
    try:
        assert "serving model 'tiny-llama'" in d.output()
        client = openai.OpenAI(base_url=d.url + "/v1", api_key="unused", max_retries=0, timeout=120)
        assert [m.id for m in client.models.list().data] == ["tiny-llama"]
        out = client.completions.create(model="tiny-llama", prompt="the quick brown fox", max_tokens=16,
                                        temperature=0.0, extra_body={"ignore_eos": True})
        assert out.model == "tiny-llama" and out.usage.completion_tokens == 16
        stream = client.completions.create(model="tiny-llama", prompt="when memory runs out", max_tokens=12,
                                           stream=True, stream_options={"include_usage": True},
                                           extra_body={"ignore_eos": True, "vllm_xargs": {"tenant": "batch"}})
        chunks = list(stream)
        # vLLM merges the tokens a slow reader has not taken yet into one chunk: count tokens by the usage line
        assert len([c for c in chunks if c.choices and c.choices[0].text]) >= 2, "it streamed"
        assert [c.usage.completion_tokens for c in chunks if c.usage] == [12]
        with pytest.raises(openai.NotFoundError) as err:
            client.completions.create(model="gpt-4o", prompt="hello", max_tokens=2)
        assert "this daemon serves 'tiny-llama'" in str(err.value)
        # the directory it was loaded from is also accepted (the name vLLM used to be given)
        r = d.post("/v1/completions", json={"model": str(d.state_dir / "tiny-llama"), "prompt": "a", "max_tokens": 2})
        assert r.status_code == 200 and r.json()["model"] == "tiny-llama"

        # memory binds: the daemon's own traffic ([load]) fills 96 KV blocks and KV rotates through the host pool
        deadline, top = time.monotonic() + 180, {}
        while time.monotonic() < deadline:
            once = run_cli("top", "--once", "--state-dir", str(d.state_dir), env=cli_env(tmp_path), timeout=120)
            top = dict(line.split("=", 1) for line in once.stdout.splitlines() if "=" in line)
            if top.get("counters.rotations", "null") not in ("null", "0"):  # null: not published yet
                break
            time.sleep(2)
        assert int(top["counters.rotations"]) > 0, top
        assert top["backend"] == "vllm" and top["kv.hbm.total"] == "96" and int(top["kv.dram.total"]) > 0
        s = d.state()
        assert s["load"]["sent"] > 0 and s["load"]["errors"] == 0
        assert s["engine"]["plugin"]["scheduler"]["steps"] > 0
        metrics = d.get("/metrics").text
        assert re.search(r"^superinfer_rotations_total [1-9]", metrics, re.M)
        assert 'superinfer_requests_rejected_total{reason="unknown_model",tenant="chat"} 1.0' in metrics
        child = s["engine"]["pid"]
    finally:
        code = d.terminate(timeout=300)
    assert code == 0, d.output()[-3000:]
    assert group_gone(child), "vLLM's processes outlived the daemon"
    c = json.loads((d.state_dir / "state.json").read_text())["counters"]
    assert c["failed"] == 0 and c["arrived"] == c["finished"] + c["rejected"] + c["aborted"], c
    assert json.loads((d.state_dir / "state.json").read_text())["error"] is None


def test_an_engine_that_cannot_load_says_why(tmp_path: Path) -> None:
    from superinfer.daemon.backends.tiny import build_tiny_llama

    model = build_tiny_llama(tmp_path / "bad")
    cfg = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**cfg, "architectures": ["NoSuchForCausalLM"]}))
    d = start_daemon(tmp_path, "--profile", "cpu-demo", "--device", "cpu", "--set", f"engine.model_path={model}",
                     "--set", "engine.tiny_model=false", "--set", "scheduler.b_xfer=32", "--set", "load.rps=0",
                     profile_text=None, backend="vllm", env=VLLM_ENV, wait_ready=False)
    assert d.proc.wait(300) == 1, d.output()[-3000:]
    said = [line for line in d.output().splitlines() if "failed to start" in line]
    assert said and "vLLM exited with 1 while loading" in said[0] and "NoSuchForCausalLM" in said[0], said
    r = run_cli("status", "--state-dir", str(d.state_dir), env=cli_env(tmp_path))
    assert r.returncode == 3 and "failed: vLLM exited with 1" in r.stdout and "NoSuchForCausalLM" in r.stdout
    r = run_cli("status", "--json", "--state-dir", str(d.state_dir), env=cli_env(tmp_path))
    assert "NoSuchForCausalLM" in json.loads(r.stdout)["last_run"]["error"]


def test_an_engine_that_dies_while_serving_is_reported(tmp_path: Path) -> None:
    d = start_daemon(tmp_path, "--profile", "cpu-demo", "--device", "cpu", "--set", "load.rps=0", "--set",
                     "scheduler.b_xfer=32", profile_text=None, backend="vllm", env=VLLM_ENV, timeout=450)
    child = d.state()["engine"]["pid"]
    os.kill(child, signal.SIGKILL)
    assert d.proc.wait(60) == 1, d.output()[-3000:]
    assert "vLLM was killed by SIGKILL" in d.output()
    saved = json.loads((d.state_dir / "state.json").read_text())
    assert saved["error"].startswith("vLLM was killed by SIGKILL")
    # the server was killed, not its engine core and workers: the daemon ended them too
    assert group_gone(child), "vLLM's engine core outlived its server and the daemon"
