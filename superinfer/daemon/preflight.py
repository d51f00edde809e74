"""Preflight of the vllm backend: what would make vLLM fail, checked in a second, before it loads.

Each check compares one profile key with what this host has and, when vLLM would refuse it (or the
host would run out of memory), returns a :class:`Problem`: one line naming the key, its value, what the
host has, and a value that would work. ``superinferd start`` runs them before launching vLLM (exit 2,
nothing launched); ``superinferd config check`` runs them alone.

The memory view copies vLLM's own (``vllm/utils/cpu_resource_utils.py``: NUMA node 0's free + file
cache + reclaimable slab, clamped to the cgroup's limit), so a check passes exactly when vLLM's does.
What the engine needs besides KV and weights (:data:`RUNTIME_GIB`) was measured: the tiny model's API
server, engine core and worker on CPU took 1.66 GiB of MemAvailable with a 0.25 GiB KV cache, so ~1.4 GiB
(2026-12-04, vLLM 0.32). On CUDA the context and the activation peak vLLM profiles are assumed, not measured.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

GIB = 1 << 30
#: memory vLLM's processes take beyond weights and KV, GiB (CPU: measured, see above; CUDA: the context
#: and activation peak per GPU, assumed)
RUNTIME_GIB = {"cpu": 1.5, "cuda": 1.5}
#: the KV block granularity of each device's attention backend (vLLM 0.32
#: ``get_supported_kernel_block_sizes``: cpu_attn ``MultipleOf(32)``; flash_attn/triton_attn ``MultipleOf(16)``)
BLOCK_MULTIPLE = {"cpu": 32, "cuda": 16}
POOL_SHARE = 0.8  # a suggested host pool leaves a fifth of what is free to everything else


@dataclass(frozen=True)
class Problem:
    """One reason vLLM would not start: ``key`` is the profile key to change."""

    key: str
    message: str

    def __str__(self) -> str:
        return f"{self.key}: {self.message}"


@dataclass(frozen=True)
class HostFacts:
    """What the checks read about this host (bytes). ``gpus``: (free, total) per visible CUDA device."""

    device: str
    total: int
    available: int
    gpus: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True)
class ModelFacts:
    """What the checks read about the model: from its ``config.json`` and weight files (None: unknown)."""

    path: str
    local: bool
    weights: int | None = None
    max_position: int | None = None
    block_bytes: int | None = None  # one rank's KV block
    notes: tuple[str, ...] = field(default=())


def _meminfo(path: str) -> dict[str, int]:
    out: dict[str, int] = {}
    try:
        with open(path) as f:
            for line in f:
                parts = line.replace("Node 0 ", "").split()
                if len(parts) >= 2 and parts[1].isdigit():
                    out[parts[0].rstrip(":")] = int(parts[1]) * 1024
    except OSError:
        pass
    return out


def _cgroup_limit() -> tuple[int | None, int]:
    for limit_f, usage_f in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                             ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes")):
        try:
            text = Path(limit_f).read_text().strip()
        except OSError:
            continue
        if not text.isdigit() or int(text) >= 1 << 60:
            return None, 0
        try:
            usage = int(Path(usage_f).read_text().strip())
        except (OSError, ValueError):
            usage = 0
        return int(text), usage
    return None, 0


def host_memory() -> tuple[int, int]:
    """(total, available) bytes of host memory, as vLLM's CPU worker computes them."""
    node = _meminfo("/sys/devices/system/node/node0/meminfo")
    if {"MemTotal", "MemFree", "Active(file)", "Inactive(file)", "SReclaimable"} <= set(node):
        total = node["MemTotal"]
        avail = node["MemFree"] + node["Active(file)"] + node["Inactive(file)"] + node["SReclaimable"]
    else:
        mem = _meminfo("/proc/meminfo")
        total, avail = mem.get("MemTotal", 0), mem.get("MemAvailable", mem.get("MemFree", 0))
    limit, usage = _cgroup_limit()
    if limit is not None and limit < total:
        total, avail = limit, min(avail, max(0, limit - usage))
    return total, avail


def host_facts(device: str) -> HostFacts:
    total, avail = host_memory()
    gpus: tuple[tuple[int, int], ...] = ()
    if device == "cuda":
        import torch

        gpus = tuple(torch.cuda.mem_get_info(i) for i in range(torch.cuda.device_count()))
    return HostFacts(device, total, avail, gpus)


def model_facts(model_path: str, block_bytes: int | None) -> ModelFacts:
    """Weights (the sizes of its ``*.safetensors``, else ``*.bin``) and length limit of a local model."""
    path = Path(model_path).expanduser()
    if not path.is_dir():
        return ModelFacts(model_path, False, notes=(f"{model_path} is not a local directory: weights, length "
                                                    "and KV block size are vLLM's to check",))
    sizes = [p.stat().st_size for p in path.glob("*.safetensors")] or [p.stat().st_size for p in path.glob("*.bin")]
    try:
        c = json.loads((path / "config.json").read_text())
        c = c.get("text_config", c) if isinstance(c.get("text_config"), dict) else c
        max_pos = int(c["max_position_embeddings"]) if "max_position_embeddings" in c else None
    except (OSError, ValueError, TypeError, AttributeError):
        return ModelFacts(model_path, True, sum(sizes) or None, notes=(f"{path / 'config.json'} is unreadable",))
    return ModelFacts(model_path, True, sum(sizes) or None, max_pos, block_bytes)


def _gib(n: float) -> str:
    if abs(n) < GIB / 100:
        return f"{n / (1 << 20):.1f}".rstrip("0").rstrip(".") + " MiB"
    return f"{n / GIB:.2f}".rstrip("0").rstrip(".") + " GiB"


def _down(x: float, step: float = 0.25) -> float:
    return max(0.0, math.floor(x / step) * step)


def check(get: Callable[[str, str], Any], host: HostFacts, model: ModelFacts, world: int = 1) -> list[Problem]:
    """Every problem of the ``[engine]`` settings (``get(section, key)``) on this host; empty: none found."""
    e = lambda key: get("engine", key)  # noqa: E731
    out: list[Problem] = []
    dev = host.device
    mult = BLOCK_MULTIPLE[dev]
    if e("block_size") % mult:
        out.append(Problem("engine.block_size", f"{e('block_size')}: vLLM's {dev.upper()} attention needs a multiple "
                           f"of {mult} tokens; try engine.block_size = {max(mult, e('block_size') // mult * mult)}"))
    max_len = e("max_model_len") or model.max_position
    if e("max_model_len") and model.max_position and e("max_model_len") > model.max_position:
        out.append(Problem("engine.max_model_len", f"{e('max_model_len')} exceeds the model's max_position_embeddings "
                           f"{model.max_position} ({model.path}/config.json); try engine.max_model_len = "
                           f"{model.max_position} (or 0: the model's own)"))
        max_len = model.max_position
    runtime = RUNTIME_GIB[dev] * GIB
    weights = model.weights or 0
    if dev == "cuda":
        out += _check_gpus(e, host, weights / world, runtime, world)
        kv = e("kv_cache_gib") * GIB or None  # per rank; None: what gpu_memory_utilization leaves
        if kv is None and host.gpus:
            total = min(host.gpus[:world])[1]
            kv = e("gpu_memory_utilization") * total - weights / world - runtime
        engine_host = runtime  # weights are read through the page cache, which the kernel may reclaim
    else:
        kv = e("kv_cache_gib") * GIB or None
        if kv is None:  # vLLM reserves gpu_memory_utilization of host memory for weights and KV
            want = e("gpu_memory_utilization") * host.total
            if want + runtime > host.available:
                fit = _down((host.available - weights - runtime) / GIB * 0.5)
                out.append(Problem("engine.gpu_memory_utilization", f"{e('gpu_memory_utilization'):g}: on CPU vLLM "
                                   f"reserves this share of host memory ({_gib(want)} of {_gib(host.total)}) and needs "
                                   f"~{_gib(runtime)} besides, but {_gib(host.available)} is available; set "
                                   f"engine.kv_cache_gib = {fit:g} instead"))
            engine_host = want + runtime
            kv = want - weights if want + runtime <= host.available else None
        else:
            engine_host = kv + weights + runtime
            if engine_host > host.available:
                fit = _down((host.available - weights - runtime) / GIB * 0.5)
                out.append(Problem("engine.kv_cache_gib", f"{e('kv_cache_gib'):g}: KV {_gib(kv)} + weights "
                                   f"{_gib(weights)} + engine ~{_gib(runtime)} exceed the {_gib(host.available)} of host "
                                   f"memory available; try engine.kv_cache_gib = {fit:g}"))
                kv, engine_host = None, host.available
    out += _check_kv_length(e, model, kv, max_len)
    pool = e("dram_gib") * GIB
    left = host.available - engine_host
    memory_failed = any(p.key in ("engine.kv_cache_gib", "engine.gpu_memory_utilization") for p in out)
    if pool > left * POOL_SHARE and not memory_failed:  # the pool is sized once the engine fits
        fit = _down(left * POOL_SHARE / GIB)
        out.append(Problem("engine.dram_gib", f"{e('dram_gib'):g}: the host KV pool would take {_gib(pool)}, but the "
                           f"host has {_gib(host.available)} available and the engine needs ~{_gib(engine_host)} "
                           f"(KV, weights, runtime) of it; try engine.dram_gib = {fit:g}"
                           + (" (0: no host tier)" if fit == 0 else "")))
    return out


def _check_gpus(e: Callable[[str], Any], host: HostFacts, weights: float, runtime: float, world: int) -> list[Problem]:
    if e("distributed_executor_backend") == "mp" and len(host.gpus) < world:
        return [Problem("engine.tensor_parallel_size", f"{e('tensor_parallel_size')} x pipeline_parallel_size "
                        f"{e('pipeline_parallel_size')} = {world} ranks, but this host has {len(host.gpus)} CUDA "
                        "device(s); lower them, or use distributed_executor_backend = \"ray\" across hosts")]
    out: list[Problem] = []
    free, total = min(host.gpus[:world]) if host.gpus else (0, 0)
    kv = e("kv_cache_gib") * GIB
    if kv and kv + weights + runtime > free:
        fit = _down((free - weights - runtime) / GIB)
        out.append(Problem("engine.kv_cache_gib", f"{e('kv_cache_gib'):g}: KV {_gib(kv)} + weights {_gib(weights)} + "
                           f"~{_gib(runtime)} per GPU exceed the {_gib(free)} free on the fullest one; try "
                           f"engine.kv_cache_gib = {fit:g}"))
    elif not kv and e("gpu_memory_utilization") * total > free:
        fit = math.floor(free / total * 100) / 100 if total else 0
        out.append(Problem("engine.gpu_memory_utilization", f"{e('gpu_memory_utilization'):g}: vLLM would claim "
                           f"{_gib(e('gpu_memory_utilization') * total)} of a {_gib(total)} GPU with {_gib(free)} "
                           f"free (another process holds the rest); try engine.gpu_memory_utilization = {fit:g}"))
    elif not kv and e("gpu_memory_utilization") * total - weights - runtime <= 0:
        out.append(Problem("engine.gpu_memory_utilization", f"{e('gpu_memory_utilization'):g} of {_gib(total)} leaves "
                           f"no room for KV after the weights ({_gib(weights)} per GPU); raise it, or "
                           "tensor_parallel_size to split the weights"))
    return out


def _check_kv_length(e: Callable[[str], Any], model: ModelFacts, kv: float | None, max_len: int | None) -> list[Problem]:
    """vLLM refuses to start when the KV cache cannot hold one sequence of ``max_model_len`` tokens."""
    if not kv or kv <= 0 or not model.block_bytes or not max_len or e("num_gpu_blocks_override"):
        return []
    tokens = int(kv // model.block_bytes) * e("block_size")
    if tokens >= max_len:
        return []
    need = math.ceil(max_len / e("block_size")) * model.block_bytes
    return [Problem("engine.kv_cache_gib" if e("kv_cache_gib") else "engine.max_model_len",
                    f"KV of {_gib(kv)} holds {tokens} tokens, fewer than one max_model_len sequence ({max_len}); try "
                    f"engine.kv_cache_gib = {math.ceil(need / GIB * 4) / 4:g} or engine.max_model_len = "
                    f"{max(e('block_size'), tokens)}")]


def report(problems: list[Problem], host: HostFacts, model: ModelFacts) -> dict[str, Any]:
    """The ``--json`` document of ``superinferd config check``."""
    return {"ok": not problems, "problems": [asdict(p) for p in problems], "notes": list(model.notes),
            "host": {"device": host.device, "memory_total_bytes": host.total, "memory_available_bytes": host.available,
                     "gpus": [{"free_bytes": f, "total_bytes": t} for f, t in host.gpus]},
            "model": {"path": model.path, "local": model.local, "weights_bytes": model.weights,
                      "max_position_embeddings": model.max_position, "kv_block_bytes": model.block_bytes}}


def _looks_local(model_path: str) -> bool:
    return model_path.startswith(("/", "./", "../", "~"))


def run(cfg: Any) -> tuple[list[Problem], HostFacts, ModelFacts]:
    """The checks for a resolved :class:`~superinfer.daemon.config.Config`, on this host."""
    from superinfer.daemon.parallel import is_cpu, rank_block_bytes

    g = cfg.get
    model_path = g("engine", "model_path")
    tp, pp = g("engine", "tensor_parallel_size"), g("engine", "pipeline_parallel_size")
    device = "cpu" if is_cpu(cfg.d("device")) else "cuda"
    host = host_facts(device)
    model = model_facts(model_path, rank_block_bytes(model_path, g("engine", "block_size"), g("engine", "dtype"), tp, pp))
    problems: list[Problem] = []
    if g("engine", "tiny_model") and not model.local:
        model = ModelFacts(model_path, False, notes=(f"engine.tiny_model: the model is built at {model_path} at first "
                                                     "start; its own checks run then",))
    elif _looks_local(model_path) and not model.local:
        problems.append(Problem("engine.model_path", f"{model_path}: no such directory (a Hugging Face model directory "
                                "with config.json is expected)"))
    elif model.local and model.max_position is None and model.notes:
        problems.append(Problem("engine.model_path", f"{model_path}: {model.notes[0]}"))
    return problems + check(g, host, model, tp * pp), host, model
