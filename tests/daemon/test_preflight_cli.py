"""Each preflight failure of issue 31, as an operator meets it: ``superinferd start --backend vllm`` on this
CPU host with a real (tiny) model directory exits 2 within seconds with one line naming the key, its value,
what the host has and a value that would work, and launches no engine; ``superinferd config check`` says
the same without starting anything."""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

import pytest

from superinfer.daemon.preflight import host_memory
from tests.daemon.conftest import SUPERINFERD, base_env
from tests.daemon.profiles import vllm_cpu, write_profile

pytestmark = pytest.mark.timeout(300)
pytest.importorskip("vllm")


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from superinfer.daemon.backends.tiny import build_tiny_llama

    return build_tiny_llama(tmp_path_factory.mktemp("m") / "tiny")


def run(tmp: Path, model: Path, *args: str) -> subprocess.CompletedProcess:
    profile = write_profile(tmp / "p.toml", base=vllm_cpu(model))  # fits any host: 0.25 GiB of KV, 0.25 GiB pool
    cmd = [*SUPERINFERD, *args, "--profile-file", str(profile), "--device", "cpu", "--state-dir", str(tmp / "s")]
    return subprocess.run(cmd, capture_output=True, text=True, env=base_env(tmp), timeout=120)


def start(tmp: Path, model: Path, *sets: str) -> tuple[subprocess.CompletedProcess, float]:
    t0 = time.monotonic()
    r = run(tmp, model, "start", "--backend", "vllm", "--port", "0", *(a for s in sets for a in ("--set", s)))
    return r, time.monotonic() - t0


AVAIL_GIB = host_memory()[1] / (1 << 30)


@pytest.mark.parametrize("sets, key, says", [
    # the step 4: the default 64 GiB pool; here a pool no host has
    (("engine.dram_gib=1000000",), "engine.dram_gib", r"host has [0-9.]+ GiB available .* try engine\.dram_gib = [0-9.]+"),
    # step 2: KV larger than the host's memory
    (("engine.kv_cache_gib=1000000",), "engine.kv_cache_gib", r"exceed the [0-9.]+ GiB of host memory available; "
                                                               r"try engine\.kv_cache_gib = [0-9.]+"),
    # step 3: the block size vLLM's CPU attention refuses
    (("engine.block_size=16",), "engine.block_size", r"multiple of 32 tokens; try engine\.block_size = 32"),
    # the model's shape against the layout: the tiny model has 2 attention heads
    (("engine.tensor_parallel_size=4",), "engine.tensor_parallel_size", r"must divide the model's 2 attention heads"),
    # a length the model does not have
    (("engine.max_model_len=4096",), "engine.max_model_len", r"rope-scaled\) 1024 .* try "
                                                              r"engine\.max_model_len = 1024"),
])
def test_each_preflight_failure_is_one_line_and_exit_2(tmp_path: Path, model: Path, sets: tuple[str, ...], key: str,
                                                     says: str) -> None:
    r, took = start(tmp_path, model, *sets)
    assert r.returncode == 2, r.stdout + r.stderr
    lines = [line for line in r.stderr.splitlines() if line.startswith("superinferd: ")]
    named = [line for line in lines if key in line]
    assert len(named) == 1, lines
    assert re.search(says, named[0]), named[0]
    assert "starting vLLM" not in r.stderr and "vllm.entrypoints" not in r.stderr  # no engine launched
    assert not (tmp_path / "s").exists()  # not even the state dir was made
    assert took < 60, f"preflight took {took:.0f} s"


def test_config_check_passes_a_fitting_profile_and_explains(tmp_path: Path, model: Path) -> None:
    r = run(tmp_path, model, "config", "check")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "ok: profile p fits this host" in r.stdout and "max_position_embeddings 1024" in r.stdout
    r = run(tmp_path, model, "config", "check", "--json")
    doc = json.loads(r.stdout)
    assert doc["ok"] is True and doc["problems"] == [] and doc["model"]["kv_block_bytes"] == 2 * 2 * 64 * 4 * 32
    assert abs(doc["host"]["memory_available_bytes"] / (1 << 30) - AVAIL_GIB) < 4  # the host as vLLM sees it


def test_config_check_lists_every_problem_at_once(tmp_path: Path, model: Path) -> None:
    r = run(tmp_path, model, "config", "check", "--json", "--set", "engine.block_size=16", "--set",
            "engine.dram_gib=1000000", "--set", "engine.max_model_len=2048")
    assert r.returncode == 2
    doc = json.loads(r.stdout)
    assert doc["ok"] is False
    assert {p["key"] for p in doc["problems"]} == {"engine.block_size", "engine.dram_gib", "engine.max_model_len"}
    assert not (tmp_path / "s").exists()  # nothing was started, not even the state dir
