"""The ``[engine]`` parallel layout keys (issue 14): strict validation, what vLLM is given, the CPU binding,
and how ``/v1/state`` and ``/metrics`` show the layout. No engine is started here (tests/vllm/test_tp2_*.py
starts one)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from superinfer.daemon.config import resolve
from superinfer.daemon.parallel import (
    BIND_ENV,
    cpu_thread_binding,
    export_layout,
    layout_errors,
    prepare_env,
    rank_block_bytes,
    vllm_args,
)
from superinfer.daemon.profiles import ProfileError
from tests.daemon.profiles import write_profile


def write_model(d: Path, heads: int = 2, kv_heads: int = 1, layers: int = 2, hidden: int = 128) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps({
        "num_attention_heads": heads, "num_key_value_heads": kv_heads, "num_hidden_layers": layers,
        "hidden_size": hidden, "intermediate_size": 256, "torch_dtype": "float32"}))
    return d


def profile(tmp: Path, **engine: Any) -> Path:
    """A profile of one section, ``[engine]``, with the keys ``engine``."""
    return write_profile(tmp / "p.toml", base={}, engine=engine)


def test_defaults_are_one_rank_on_the_mp_executor() -> None:
    cfg = resolve("chat")
    assert (cfg.get("engine", "tensor_parallel_size"), cfg.get("engine", "pipeline_parallel_size"),
            cfg.get("engine", "distributed_executor_backend")) == (1, 1, "mp")
    assert cfg.as_dict()["engine"]["tensor_parallel_size"] == {"value": 1, "source": "default"}


@pytest.mark.parametrize("engine, key, expected", [
    ({"tensor_parallel_size": 0}, "engine.tensor_parallel_size", "an integer within [1, 1024]"),
    ({"pipeline_parallel_size": 1.5}, "engine.pipeline_parallel_size", "an integer"),
    ({"distributed_executor_backend": "slurm"}, "engine.distributed_executor_backend", "'mp', 'ray'"),
], ids=["tp-0", "pp-1.5", "executor-slurm"])
def test_bad_values_name_file_and_key(tmp_path: Path, engine: dict[str, Any], key: str, expected: str) -> None:
    with pytest.raises(ProfileError) as exc:
        resolve(None, profile_file=str(profile(tmp_path, **engine)))
    assert exc.value.key == key and str(tmp_path / "p.toml") in str(exc.value) and expected in str(exc.value)


def test_tp_must_divide_the_heads_of_the_models_config_json(tmp_path: Path) -> None:
    model = write_model(tmp_path / "m", heads=6, kv_heads=2)
    ok = resolve(None, profile_file=str(profile(tmp_path, model_path=model, tensor_parallel_size=2)))
    assert ok.get("engine", "tensor_parallel_size") == 2
    with pytest.raises(ProfileError) as exc:
        resolve(None, profile_file=str(profile(tmp_path, model_path=model, tensor_parallel_size=4)))
    msg = str(exc.value)
    assert exc.value.key == "engine.tensor_parallel_size"
    assert "must divide the model's 6 attention heads" in msg and str(model / "config.json") in msg


def test_pp_is_checked_against_the_layers(tmp_path: Path) -> None:
    model = write_model(tmp_path / "m", layers=2)
    with pytest.raises(ProfileError) as exc:
        resolve(None, profile_file=str(profile(tmp_path, model_path=model, pipeline_parallel_size=4)))
    assert exc.value.key == "engine.pipeline_parallel_size" and "exceeds the model's 2 layers" in str(exc.value)


def test_without_a_model_dir_the_twin_profile_or_vllm_decides(tmp_path: Path) -> None:
    problems, where = layout_errors(3, 1, "", "llama-3-8b")  # no model_path: the twin's profile
    assert problems and "llama-3-8b" in where
    assert layout_errors(3, 1, "meta-llama/Meta-Llama-3-8B", "llama-3-8b") == ([], "vLLM (no local config.json)")
    with pytest.raises(ProfileError, match="engine.tensor_parallel_size"):
        resolve("chat", sets=["engine.tensor_parallel_size=3"])  # the chat profile's twin model: 32 heads


def test_env_and_set_flags_reach_the_keys(tmp_path: Path) -> None:
    cfg = resolve("chat", env={"SUPERINFER_ENGINE_TENSOR_PARALLEL_SIZE": "2"},
                  sets=["engine.distributed_executor_backend=ray"])
    assert cfg.get("engine", "tensor_parallel_size") == 2
    assert cfg.values["engine"]["distributed_executor_backend"].source == "flag:--set engine.distributed_executor_backend"


def test_vllm_arguments() -> None:
    assert vllm_args(1, 1, "mp") == []
    assert vllm_args(2, 1, "mp") == ["--tensor-parallel-size", "2", "--distributed-executor-backend", "mp"]
    assert vllm_args(2, 2, "ray") == ["--tensor-parallel-size", "2", "--pipeline-parallel-size", "2",
                                      "--distributed-executor-backend", "ray"]
    assert vllm_args(1, 1, "ray") == ["--distributed-executor-backend", "ray"]


def test_rank_block_bytes_split_heads_and_layers(tmp_path: Path) -> None:
    # 8 KV heads x 128 dim x 4 layers, fp32, 16 tokens: 2 x 4 x 8 x 128 x 4 x 16 = 524288 bytes on one rank
    model = write_model(tmp_path / "m", heads=32, kv_heads=8, layers=4, hidden=4096)
    assert rank_block_bytes(str(model), 16, "auto", 1, 1) == 524288
    assert rank_block_bytes(str(model), 16, "auto", 2, 1) == 524288 // 2
    assert rank_block_bytes(str(model), 16, "auto", 2, 2) == 524288 // 4
    assert rank_block_bytes(str(model), 16, "auto", 16, 1) == 524288 // 8  # one KV head each, replicated
    assert rank_block_bytes(str(model), 16, "bfloat16", 1, 1) == 524288 // 2
    assert rank_block_bytes(str(tmp_path / "nothing"), 16, "auto", 2, 1) is None


def test_cpu_binding_splits_the_allowed_cpus_one_list_per_rank() -> None:
    assert cpu_thread_binding(2, {}, cpus=[0, 1], nodes=1) == "0|1"
    assert cpu_thread_binding(2, {}, cpus=[0, 1, 2, 3, 4], nodes=1) == "0,1,2|3,4"
    assert cpu_thread_binding(4, {}, cpus=[4, 5, 6, 7], nodes=1) == "4|5|6|7"
    assert cpu_thread_binding(1, {}, cpus=[0], nodes=1) is None  # one rank: vLLM's own binding works
    assert cpu_thread_binding(2, {}, cpus=[0, 1], nodes=2) is None  # a NUMA node per rank: vLLM's own
    assert cpu_thread_binding(2, {BIND_ENV: "nobind"}, cpus=[0, 1], nodes=1) is None  # the operator's
    with pytest.raises(ValueError, match="engine.tensor_parallel_size x engine.pipeline_parallel_size = 4"):
        cpu_thread_binding(4, {}, cpus=[0, 1], nodes=1)


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="binds 2 ranks to 2 of this process's CPUs")
def test_prepare_env_sets_the_binding_on_cpu_only() -> None:
    env: dict[str, str] = {}
    binding = prepare_env(2, "mp", "cpu", env)
    assert binding is not None and env[BIND_ENV] == binding and binding.count("|") == 1
    cuda_env: dict[str, str] = {}
    assert prepare_env(2, "mp", "cuda", cuda_env) is None and BIND_ENV not in cuda_env
    kept = {BIND_ENV: "0|1"}
    assert prepare_env(2, "mp", "cpu", kept) == "0|1"


def test_ray_without_the_package_is_a_config_error() -> None:
    pytest.importorskip("vllm")  # the vllm backend's hosts; ray is not a dependency of the project
    try:
        import ray  # noqa: F401
    except ImportError:
        with pytest.raises(ValueError, match='engine.distributed_executor_backend = "ray"'):
            prepare_env(2, "ray", "cpu", {})
    else:  # pragma: no cover - a host with Ray
        pytest.skip("ray is installed here")


def test_layout_metric_and_state(tmp_path: Path) -> None:
    reg = CollectorRegistry()
    export_layout(reg, 2, 3)
    text = generate_latest(reg).decode()
    for dim, v in (("tensor", 2), ("pipeline", 3), ("world", 6)):
        assert f'superinfer_engine_parallel_size{{dim="{dim}"}} {v}.0' in text
    pytest.importorskip("fastapi")
    from superinfer.daemon.backends.vllm import VllmBackend

    model = write_model(tmp_path / "m")
    cfg = resolve(None, profile_file=str(profile(tmp_path, model_path=model, tensor_parallel_size=2, block_size=32,
                                                 dram_gib=1.0)))
    b = VllmBackend(cfg)
    cmd = b.command(12345, tmp_path / "params.json")
    assert cmd[cmd.index("--tensor-parallel-size") + 1] == "2"
    extra = json.loads(cmd[cmd.index("--kv-transfer-config") + 1])["kv_connector_extra_config"]
    # 1 KV head replicated on both ranks: each parks a full 2 x 2 x 1 x 64 x 4 x 32 = 32 KiB block; 1 GiB in all
    assert b.block_bytes() == 32768 and extra["host_blocks"] == (1 << 30) // (2 * 32768)
    state = b.engine_state()["parallel"]
    assert state["tensor_parallel_size"] == 2 and state["world_size"] == 2 and state["block_bytes_per_rank"] == 32768
