"""The ``[engine]`` parallel layout of the vllm backend (issue 14): keys, validation, what vLLM is given.

Keys (registered into the ``[engine]`` section of :data:`superinfer.daemon.schema.SCHEMA` by
:func:`register`, which :mod:`superinfer.daemon.profiles` calls on import):

* ``tensor_parallel_size`` (default 1): ranks that shard every layer; must divide the model's attention
  heads and its MLP size, and divide or be a multiple of its KV heads (vLLM's rules), read from the
  model's ``config.json`` when ``model_path`` is a local directory (from the twin's model profile when
  ``model_path`` is empty; a hub name is left to vLLM, which checks the same at startup);
* ``pipeline_parallel_size`` (default 1): stages of consecutive layers; at most the model's layers;
* ``distributed_executor_backend`` (``mp`` | ``ray``, default ``mp``): vLLM's executor; ``ray`` spans
  hosts (the Ray cluster is the operator's: ``RAY_ADDRESS`` or a local head, docs/daemon.md).

On CPU, vLLM binds each rank's OpenMP threads to one NUMA node and refuses ("Not enough allowed NUMA
nodes to bind threads of 2 local CPUWorkers") when there are fewer nodes than ranks; the daemon then sets
``VLLM_CPU_OMP_THREADS_BIND`` itself, splitting the CPUs it may use into one contiguous list per rank
(``0|1`` on two cores), unless the operator set it.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
from pathlib import Path
from typing import Any

from superinfer.daemon.schema import Key, check_value
from superinfer.sim.layout import kv_heads_per_rank, layout_problems, stage_layers

log = logging.getLogger("superinfer.daemon")

BIND_ENV = "VLLM_CPU_OMP_THREADS_BIND"
EXECUTORS = ("mp", "ray")

PARALLEL_KEYS: dict[str, Key] = {
    "tensor_parallel_size": Key("int", 1, "vLLM: ranks sharding every layer; must divide the model's attention "
                                "heads (read from model_path/config.json)", 1, 1024),
    "pipeline_parallel_size": Key("int", 1, "vLLM: pipeline stages of consecutive layers (at most the model's "
                                  "layers)", 1, 1024),
    "distributed_executor_backend": Key("choice", "mp", "vLLM executor: mp (processes on this host) or ray (a "
                                        "Ray cluster, possibly several hosts)", choices=EXECUTORS),
}


def register(schema: dict[str, dict[str, Key]]) -> None:
    """Add :data:`PARALLEL_KEYS` to ``schema["engine"]`` (idempotent; a key already there is kept)."""
    for name, key in PARALLEL_KEYS.items():
        check_value(key, key.default)
        schema["engine"].setdefault(name, key)


def model_shapes(model_path: str) -> dict[str, int] | None:
    """``heads``, ``kv_heads``, ``layers``, ``intermediate``, ``head_dim`` from a local model's config.json
    (multimodal configs: their ``text_config``); None when there is no readable config.json."""
    path = Path(model_path).expanduser() / "config.json" if model_path else None
    if path is None or not path.is_file():
        return None
    try:
        c = json.loads(path.read_text())
        c = c.get("text_config", c) if isinstance(c.get("text_config"), dict) else c
        heads = int(c["num_attention_heads"])
        return {"heads": heads, "kv_heads": int(c.get("num_key_value_heads") or heads),
                "layers": int(c["num_hidden_layers"]), "intermediate": int(c.get("intermediate_size") or 0) or None,
                "head_dim": int(c.get("head_dim") or c["hidden_size"] // heads)}
    except (OSError, ValueError, KeyError, TypeError, ZeroDivisionError, AttributeError):
        return None


def layout_errors(tp: int, pp: int, model_path: str, twin_model: str) -> tuple[list[str], str]:
    """What vLLM would refuse about ``tp`` x ``pp``, and where the shapes came from."""
    shapes = model_shapes(model_path)
    where = f"{Path(model_path) / 'config.json'}"
    if shapes is None:
        if model_path:
            return [], "vLLM (no local config.json)"
        from superinfer.sim.models import get_model

        m = get_model(twin_model)
        shapes = {"heads": m.heads, "kv_heads": m.kv_heads, "layers": m.layers, "intermediate": m.intermediate}
        where = f"the twin's model profile {m.name}"
    return layout_problems(tp, pp, heads=shapes["heads"], kv_heads=shapes["kv_heads"], layers=shapes["layers"],
                           intermediate=shapes.get("intermediate")), where


def rank_block_bytes(model_path: str, block_size: int, dtype: str, tp: int, pp: int) -> int | None:
    """Bytes of one KV block on one rank: its KV heads (split, or one replicated) for its stage's layers
    (the heaviest stage); None without a readable config.json."""
    shapes = model_shapes(model_path)
    if shapes is None:
        return None
    try:
        c = json.loads((Path(model_path).expanduser() / "config.json").read_text())
        # transformers >= 4.56 writes "dtype", older versions "torch_dtype"
        saved = c.get("dtype") or c.get("torch_dtype") or "bfloat16"
        width = {"float32": 4}.get(dtype if dtype != "auto" else saved, 2)
        layers = max(stage_layers(shapes["layers"], pp))
    except (OSError, ValueError):
        return None
    return 2 * layers * kv_heads_per_rank(shapes["kv_heads"], tp) * shapes["head_dim"] * width * block_size


def vllm_args(tp: int, pp: int, executor: str) -> list[str]:
    """Arguments of ``vllm serve`` for the layout (nothing for the single-rank ``mp`` default)."""
    args: list[str] = []
    if tp > 1:
        args += ["--tensor-parallel-size", str(tp)]
    if pp > 1:
        args += ["--pipeline-parallel-size", str(pp)]
    if tp * pp > 1 or executor != "mp":
        args += ["--distributed-executor-backend", executor]
    return args


def numa_nodes() -> int:
    """NUMA nodes with memory that this process may use (1 when the kernel does not say)."""
    try:
        text = Path("/sys/devices/system/node/has_memory").read_text().strip()
    except OSError:
        return 1
    count = 0
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        count += int(hi) - int(lo) + 1 if hi else 1
    return max(count, 1)


def cpu_thread_binding(world: int, env: dict[str, str], cpus: list[int] | None = None,
                       nodes: int | None = None) -> str | None:
    """``VLLM_CPU_OMP_THREADS_BIND`` for ``world`` local CPU ranks, or None when vLLM's own binding works
    (one rank, enough NUMA nodes) or the operator set it. Raises ValueError when there are fewer usable CPUs
    than ranks."""
    if world <= 1 or BIND_ENV in env:
        return None
    if (numa_nodes() if nodes is None else nodes) >= world:
        return None
    allowed = sorted(os.sched_getaffinity(0)) if cpus is None else sorted(cpus)
    if len(allowed) < world:
        raise ValueError(f"engine.tensor_parallel_size x engine.pipeline_parallel_size = {world} CPU ranks, but "
                         f"this process may use only {len(allowed)} CPU(s) ({allowed})")
    per, extra = divmod(len(allowed), world)
    lists, i = [], 0
    for r in range(world):
        n = per + (1 if r < extra else 0)
        lists.append(",".join(str(c) for c in allowed[i:i + n]))
        i += n
    return "|".join(lists)


def prepare_env(world: int, executor: str, device: str, env: dict[str, str]) -> str | None:
    """Before starting vLLM: check Ray is installed when it is the executor, and on CPU set
    ``VLLM_CPU_OMP_THREADS_BIND`` in ``env`` for several ranks. Returns the binding in force (None: vLLM's
    own). Raises ValueError naming the key."""
    if executor == "ray" and importlib.util.find_spec("ray") is None:
        raise ValueError('engine.distributed_executor_backend = "ray": the ray package is not installed here '
                         "(pip install 'ray[default]'; docs/daemon.md, two hosts)")
    if world <= 1 or not is_cpu(device):
        return None
    binding = cpu_thread_binding(world, env)
    if binding is None:
        return env.get(BIND_ENV)
    env[BIND_ENV] = binding
    log.info("%d CPU ranks: %s=%s (one CPU list per rank)", world, BIND_ENV, binding)
    return binding


def layout_state(tp: int, pp: int, executor: str, *, binding: str | None = None,
                 block_bytes_per_rank: int | None = None) -> dict[str, Any]:
    """The ``parallel`` section of ``/v1/state``."""
    return {"tensor_parallel_size": tp, "pipeline_parallel_size": pp, "world_size": tp * pp,
            "distributed_executor_backend": executor, "cpu_threads_bind": binding,
            "block_bytes_per_rank": block_bytes_per_rank}


def export_layout(registry: Any, tp: int, pp: int) -> None:
    """``superinfer_engine_parallel_size{dim}`` (tensor, pipeline, world) on the daemon's registry."""
    from prometheus_client import Gauge

    g = Gauge("superinfer_engine_parallel_size", "Ranks of the engine's parallel layout: tensor, pipeline, "
              "and world (their product)", ["dim"], registry=registry)
    for dim, v in (("tensor", tp), ("pipeline", pp), ("world", tp * pp)):
        g.labels(dim).set(v)


def is_cpu(device: str) -> bool:
    """Whether vLLM runs on the CPU: ``cpu``, or ``auto`` without CUDA (imports torch for ``auto``)."""
    if device == "cpu":
        return True
    if device == "cuda":
        return False
    import torch

    return not torch.cuda.is_available()


def rank_devices(device: str, world: int) -> list[int]:
    """CUDA device indices the local ranks use (vLLM gives local rank i device i), empty on CPU or for
    one rank. Imports torch only when asked about CUDA."""
    if world <= 1 or device == "cpu":
        return []
    import torch

    if not torch.cuda.is_available():
        return []
    return list(range(min(world, torch.cuda.device_count())))


def probe_each(devices: list[int], probe: Any) -> dict[str, Any]:
    """Run ``probe()`` (a startup probe returning a dict) on each CUDA device in ``devices``; the slowest
    device's result (smallest ``b_xfer_blocks``: every rank's copies must finish in the step), with every
    device's figures under ``ranks``."""
    import torch

    results = []
    for i in devices:
        with torch.cuda.device(i):
            res = probe()
        res["cuda_device"] = i
        results.append(res)
    slowest = dict(min(results, key=lambda r: r["b_xfer_blocks"]))
    slowest["ranks"] = [{k: r[k] for k in ("cuda_device", "device_name", "h2d_gbps", "d2h_gbps", "duplex_h2d_gbps",
                                           "duplex_d2h_gbps", "b_xfer_blocks")} for r in results]
    return slowest
