"""Preflight of the vllm backend: what would make vLLM fail, checked in a second, before it loads.

Each check compares one profile key with what this host has and, when vLLM would refuse it (or the
host would run out of memory), returns a :class:`Problem`: one line naming the key, its value, what the
host has, and a value that would work. ``superinferd start`` runs them before launching vLLM (exit 2,
nothing launched); ``superinferd config check`` runs them alone.

Host memory and GPU memory are read as vLLM reads them (:mod:`superinfer.daemon.hostinfo`), so a check
passes when vLLM's does.
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

from superinfer.core import HBM_ONLY_POLICIES
from superinfer.daemon.hostinfo import gpu_memory, host_memory

GIB = 1 << 30
#: memory vLLM's processes take beyond weights and KV, GiB (CPU: measured, see above; CUDA: the context
#: and activation peak per GPU, assumed)
RUNTIME_GIB = {"cpu": 1.5, "cuda": 1.5}
#: the KV block granularity of each device's attention backend (vLLM 0.32
#: ``get_supported_kernel_block_sizes``: cpu_attn ``MultipleOf(32)``; flash_attn/triton_attn ``MultipleOf(16)``)
BLOCK_MULTIPLE = {"cpu": 32, "cuda": 16}
#: rope scalings whose ``factor`` stretches the length vLLM derives from max_position_embeddings
SCALED_ROPE = ("linear", "dynamic", "yarn")
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


def host_facts(device: str) -> HostFacts:
    total, avail = host_memory(device)
    return HostFacts(device, total, avail, gpu_memory() if device == "cuda" else ())


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
        rope = c.get("rope_scaling") or {}
        kind = rope.get("rope_type", rope.get("type")) if isinstance(rope, dict) else None
        if max_pos and kind in SCALED_ROPE and float(rope.get("factor") or 1) > 1:
            max_pos = int(max_pos * float(rope["factor"]))  # vLLM's derived length (get_max_model_len)
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
        out.append(Problem("engine.max_model_len", f"{e('max_model_len')} exceeds the model's length "
                           "(max_position_embeddings, rope-scaled) "
                           f"{model.max_position} ({model.path}/config.json); try engine.max_model_len = "
                           f"{model.max_position} (or 0: the model's own)"))
        max_len = model.max_position
    runtime = RUNTIME_GIB[dev] * GIB
    weights = model.weights or 0
    if dev == "cuda":
        out += _check_gpus(e, host, weights / world, runtime, world)
        kv = e("kv_cache_gib") * GIB or None  # per rank; None: what gpu_memory_utilization leaves
        if kv is None and host.gpus:
            kv = e("gpu_memory_utilization") * min(t for _, t in host.gpus[:world]) - weights / world - runtime
        engine_host = runtime * world  # weights are read through the page cache, which the kernel may reclaim
    else:
        out_kv, kv, engine_host = _check_cpu_kv(e, host, weights, runtime, world)
        out += out_kv
    # the most KV per rank that host memory leaves (CPU); a suggested KV size must fit it too
    kv_room = None if dev == "cuda" else (host.available - weights - runtime * world) / world
    out += _check_kv_length(e, model, kv, max_len, kv_room)
    if get("scheduler", "policy") in HBM_ONLY_POLICIES or any(p.key in MEMORY_KEYS for p in out):
        return out  # no host tier; or the pool is sized once the engine fits
    pool = e("dram_gib") * GIB
    left = host.available - engine_host
    if pool > left * POOL_SHARE:
        fit = _down(left * POOL_SHARE / GIB)
        out.append(Problem("engine.dram_gib", f"{e('dram_gib'):g}: the host KV pool would take {_gib(pool)}, but the "
                           f"host has {_gib(host.available)} available and the engine needs ~{_gib(engine_host)} "
                           f"(KV, weights, runtime) of it; try engine.dram_gib = {fit:g}"
                           + (" (no host tier)" if fit == 0 else "")))
    return out


MEMORY_KEYS = ("engine.kv_cache_gib", "engine.gpu_memory_utilization", "engine.model_path")


def _does_not_fit(what: str, need: float, have: float) -> Problem:
    return Problem("engine.model_path", f"the model does not fit: {what} ~{_gib(need)} against {_gib(have)}; serve a "
                   "smaller model, or split it over more ranks (tensor_parallel_size)")


def _check_cpu_kv(e: Callable[[str], Any], host: HostFacts, weights: float, runtime: float,
                  world: int) -> tuple[list[Problem], float | None, float]:
    """CPU: KV (per rank) + weights + each rank's runtime within host memory; (problems, KV, host bytes)."""
    fixed = weights + runtime * world
    room = host.available - fixed  # for every rank's KV
    if room <= 0:
        return [_does_not_fit("weights and the engine's processes need", fixed, host.available)], None, host.available
    fit = _down(room / world / GIB * 0.5)
    kv = e("kv_cache_gib") * GIB or None
    if kv is None:  # vLLM reserves gpu_memory_utilization of host memory for weights and KV
        want = e("gpu_memory_utilization") * host.total
        if want + runtime * world > host.available:
            return [Problem("engine.gpu_memory_utilization", f"{e('gpu_memory_utilization'):g}: on CPU vLLM reserves "
                            f"this share of host memory ({_gib(want)} of {_gib(host.total)}) and needs ~"
                            f"{_gib(runtime * world)} besides, but {_gib(host.available)} is available; set "
                            f"engine.kv_cache_gib = {fit:g} instead" if fit > 0 else
                            f"{e('gpu_memory_utilization'):g}: host memory is too short for any KV")], None, host.available
        return [], (want - weights) / world, want + runtime * world
    if kv * world > room:
        msg = (f"{e('kv_cache_gib'):g}: KV {_gib(kv)} x {world} rank(s) + weights {_gib(weights)} + engine ~"
               f"{_gib(runtime * world)} exceed the {_gib(host.available)} of host memory available")
        return [Problem("engine.kv_cache_gib", msg + (f"; try engine.kv_cache_gib = {fit:g}" if fit > 0 else
                                                      "; too little is left for any KV"))], None, host.available
    return [], kv, kv * world + fixed


def _check_gpus(e: Callable[[str], Any], host: HostFacts, weights: float, runtime: float, world: int) -> list[Problem]:
    """Each rank's GPU: vLLM claims ``gpu_memory_utilization`` of it (and refuses when that is more than is
    free), and weights, runtime and KV must fit in the claim. No GPU facts (no nvidia-smi): no checks."""
    if not host.gpus:
        return []
    if e("distributed_executor_backend") == "mp" and len(host.gpus) < world:
        return [Problem("engine.tensor_parallel_size", f"{e('tensor_parallel_size')} x pipeline_parallel_size "
                        f"{e('pipeline_parallel_size')} = {world} ranks, but this host has {len(host.gpus)} CUDA "
                        "device(s); lower them, or use distributed_executor_backend = \"ray\" across hosts")]
    util, kv = e("gpu_memory_utilization"), e("kv_cache_gib") * GIB
    for i, (free, total) in enumerate(host.gpus[:world]):
        claim = util * total
        if claim > free:
            fit = math.floor(free / total * 100) / 100
            return [Problem("engine.gpu_memory_utilization", f"{util:g}: vLLM would claim {_gib(claim)} of GPU {i} "
                            f"({_gib(total)}), which has {_gib(free)} free (another process holds the rest); try "
                            f"engine.gpu_memory_utilization = {fit:g}")]
        if weights + runtime >= claim:
            return [_does_not_fit(f"weights per GPU {_gib(weights)} + runtime", weights + runtime, claim)]
        if kv and kv + weights + runtime > claim:
            fit = _down((claim - weights - runtime) / GIB)
            advice = f"try engine.kv_cache_gib = {fit:g}" if fit > 0 else "raise engine.gpu_memory_utilization"
            return [Problem("engine.kv_cache_gib", f"{e('kv_cache_gib'):g}: KV {_gib(kv)} + weights {_gib(weights)} + "
                            f"~{_gib(runtime)} exceed the {_gib(claim)} vLLM may use of GPU {i}; {advice}")]
    return []


def _check_kv_length(e: Callable[[str], Any], model: ModelFacts, kv: float | None, max_len: int | None,
                     kv_room: float | None = None) -> list[Problem]:
    """vLLM refuses to start when the KV cache cannot hold one sequence of ``max_model_len`` tokens. A larger
    KV size is suggested only where it fits ``kv_room`` (bytes per rank; None: not known here)."""
    if not kv or kv <= 0 or not model.block_bytes or not max_len or e("num_gpu_blocks_override"):
        return []
    tokens = int(kv // model.block_bytes) * e("block_size")
    if tokens >= max_len:
        return []
    need = math.ceil(max_len / e("block_size")) * model.block_bytes
    shorter = f"engine.max_model_len = {tokens}" if tokens >= e("block_size") else ""
    bigger = math.ceil(need / GIB * 4) / 4
    key = "engine.kv_cache_gib" if e("kv_cache_gib") else "engine.max_model_len"
    if kv_room is not None and bigger * GIB > kv_room:  # host memory cannot hold one sequence: shorten, or no fix
        key, advice = "engine.max_model_len", (f"try {shorter}" if shorter else
                                               "host memory is too short for one sequence; shorten max_model_len")
    else:
        advice = f"try engine.kv_cache_gib = {bigger:g}" + (f" or {shorter}" if shorter else "")
    return [Problem(key,
                    f"KV of {_gib(kv)} holds {tokens} tokens, fewer than one max_model_len sequence ({max_len}); "
                    + advice)]


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
