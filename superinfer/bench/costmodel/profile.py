"""The project's own operator profiler: one layer's operators on the local GPU, in Vidur's file format.

For each model, TP degree and token count it builds one rank's shard of a layer (:class:`LayerShard`)
with random bf16 weights and activations, and times every operator of
:data:`superinfer.sim.layerops.OPS` (:mod:`.timing`: CUDA graphs of back-to-back launches on a GPU, the
kernels' device time without the host's launch gaps, as Vidur's kernel-level timings are), then the
shard's attention (:mod:`.attention`).

Rows are written as each (model, TP) finishes to ``OUT/compute/<gpu>/<model>/mlp.csv`` (and
``attention.csv``) with the columns of Vidur's files (:func:`superinfer.sim.layerops.header`,
milliseconds), next to ``meta.json`` (device, versions, the
elementwise implementation, the token counts, date), so ``bench costmodel`` reads them as it reads the
shipped ones. The embedding's row count is the shard's vocabulary; weights are random (kernel time does
not depend on values).
"""

from __future__ import annotations

import json
import platform
import statistics
import time
from collections.abc import Callable, Iterable
from datetime import datetime, timezone
from pathlib import Path

import torch

from superinfer.bench.costmodel import kernels
from superinfer.bench.costmodel.timing import DTYPE, GRAPH_FALLBACKS, sample_ms, stats_ms, write_csv
from superinfer.sim.layerops import LayerShard, column, header, shard_of_model

DEFAULT_TOKENS = (1, 2, 4, 8, 16, 32, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096,
                  6144, 8192, 12288, 16384)
def operators(s: LayerShard, device: str, ew) -> dict[str, Callable[[], None]]:
    """One closure per operator over tensors shaped for ``s`` (allocated once, reused by every call)."""
    t, h, hd = s.tokens, s.n_embd, s.head_dim
    g = torch.Generator(device=device).manual_seed(0)

    def rand(*shape: int) -> torch.Tensor:
        return (torch.randn(*shape, generator=g, device=device, dtype=torch.float32) * 0.02).to(DTYPE)

    ids = torch.randint(0, s.vocab, (t,), generator=g, device=device)
    emb_w, x, norm_w, y = rand(s.vocab, h), rand(t, h), rand(h).abs() + 1.0, torch.empty(t, h, device=device, dtype=DTYPE)
    m_qkv, n_qkv, k_qkv = s.gemm("attn_pre_proj")
    w_qkv, qkv = rand(n_qkv, k_qkv), torch.empty(t, n_qkv, device=device, dtype=DTYPE)
    _, n_o, k_o = s.gemm("attn_post_proj")
    w_o, attn = rand(n_o, k_o), rand(t, k_o)
    _, n_up, _ = s.gemm("mlp_up_proj")
    w_up, up = rand(n_up, h), rand(t, n_up)
    _, _, k_down = s.gemm("mlp_down_proj")
    w_down, act = rand(h, k_down), torch.empty(t, k_down, device=device, dtype=DTYPE)
    positions = torch.randint(0, 4096, (t,), generator=g, device=device)
    cos, sin = kernels.rope_cache(4096, hd, device)
    qkv_rope = rand(t, n_qkv)

    def emb() -> None:
        torch.index_select(emb_w, 0, ids, out=y)

    def mlp_act() -> None:
        if s.gated:
            ew.silu_and_mul(up, act)
        else:
            act.copy_(torch.nn.functional.gelu(up, approximate="tanh"))

    return {
        "emb": emb,
        "input_layernorm": lambda: ew.rmsnorm(x, norm_w, y),
        "attn_pre_proj": lambda: torch.matmul(x, w_qkv.t(), out=qkv),
        "attn_rope": lambda: ew.rope(qkv_rope, positions, cos, sin, s.heads + s.kv_heads, hd),
        "attn_post_proj": lambda: torch.matmul(attn, w_o.t(), out=y),
        "post_attention_layernorm": lambda: ew.rmsnorm(x, norm_w, y),
        "mlp_up_proj": lambda: torch.matmul(x, w_up.t(), out=up),
        "mlp_act": mlp_act,
        "mlp_down_proj": lambda: torch.matmul(act, w_down.t(), out=y),
        "add": lambda: ew.add(x, y, y),
    }


def profile_shard(s: LayerShard, device: str, ew, reps: int, trials: int) -> dict[str, object]:
    """One CSV row: every operator's statistics (ms) and the shape columns."""
    row: dict[str, object] = {}
    for op, fn in operators(s, device, ew).items():
        for stat, value in stats_ms(sample_ms(fn, device, reps, trials)).items():
            row[column(op, stat)] = value
    row.update(s.shape_row())
    return row


def run_profile(models: Iterable, tps: Iterable[int], tokens: Iterable[int], out_dir: Path, gpu: str,
                device: str = "cuda", reps: int = 20, trials: int = 7, deadline_s: float | None = None,
                log: Callable[[str], None] = print, attention_points=None) -> dict[str, object]:
    """Profile every (model, TP) that divides the model; write the files; return the metadata.
    Stops cleanly (files complete up to the last finished (model, TP)) when ``deadline_s`` passes.
    ``attention_points``: None for :func:`.attention.points` of each shard, ``[]`` for no attention."""
    from superinfer.bench.costmodel import attention

    if device.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError("device cuda: torch sees no CUDA device (use --device cpu to test the plumbing)")
    ew = kernels.elementwise_ops(device)
    t_end = None if deadline_s is None else time.monotonic() + deadline_s
    tokens = sorted(set(int(t) for t in tokens))
    meta = _environment(device, ew.name, gpu, reps, trials, tokens)
    done: list[dict[str, object]] = []
    for model in models:
        path = out_dir / "compute" / gpu / model.name / "mlp.csv"
        path.parent.mkdir(parents=True, exist_ok=True)
        rows: list[dict[str, object]] = []
        attn_rows: list[dict[str, object]] = []
        for tp in tps:
            if model.heads % tp or model.intermediate % tp:
                continue
            if t_end is not None and time.monotonic() > t_end:
                log(f"deadline reached before {model.name} tp{tp}: stopping")
                meta["stopped_early"] = True
                break
            t0 = time.monotonic()
            for n in tokens:
                rows.append(profile_shard(shard_of_model(model, tp, n), device, ew, reps, trials))
                if device.startswith("cuda"):
                    torch.cuda.empty_cache()
            write_csv(path, header(), rows)
            n_attn = 0
            if attention_points != []:
                shard = shard_of_model(model, tp, 1)
                new = attention.profile_attention(shard, device, max(1, reps // 2), max(1, trials - 2), attention_points)
                attn_rows += new
                n_attn = len(new)
                attention.write(path.with_name("attention.csv"), attn_rows)
            done.append({"model": model.name, "tp": tp, "rows": len(tokens), "attention_rows": n_attn,
                         "seconds": round(time.monotonic() - t0, 1)})
            log(f"{model.name} tp{tp}: {len(tokens)} token counts in {time.monotonic() - t0:.1f} s -> {path}")
    meta["profiled"] = done
    meta["graph_fallbacks"] = GRAPH_FALLBACKS[:20]
    (out_dir / "compute" / gpu / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    return meta


def _environment(device: str, impl: str, gpu: str, reps: int, trials: int, tokens: list[int]) -> dict[str, object]:
    meta: dict[str, object] = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "gpu": gpu, "device": device,
        "torch": torch.__version__, "python": platform.python_version(), "elementwise_impl": impl,
        "gemm_impl": "torch.matmul (cuBLAS on CUDA), as vLLM's unquantized linear layers", "dtype": "bfloat16",
        "timing": (f"CUDA graph of {reps} launches, replayed {trials} times between CUDA events"
                   if device.startswith("cuda") else f"perf_counter, {trials} calls"),
        "tokens": tokens, "units": "milliseconds per call"}
    if device.startswith("cuda"):
        p = torch.cuda.get_device_properties(0)
        meta.update({"device_name": p.name, "sm_count": p.multi_processor_count,
                     "memory_bytes": p.total_memory, "cuda": torch.version.cuda})
        meta.update(peaks(device))
    return meta


def peaks(device: str) -> dict[str, float]:
    """What this GPU reaches on the two roofline terms: a device-to-device copy (bytes read + written per
    second) and an 8192^3 bf16 GEMM (FLOP/s), medians of 10 after warm-up."""
    a = torch.empty(1 << 30, dtype=torch.uint8, device=device)
    b = torch.empty_like(a)
    x = torch.randn(8192, 8192, device=device, dtype=DTYPE)
    y = torch.randn(8192, 8192, device=device, dtype=DTYPE)
    copy = sample_ms(lambda: b.copy_(a), device, reps=5, trials=10)
    gemm = sample_ms(lambda: torch.matmul(x, y), device, reps=5, trials=10)
    return {"copy_bytes_per_s": round(2 * a.numel() / (statistics.median(copy) / 1e3)),
            "gemm_8192_flops": round(2 * 8192**3 / (statistics.median(gemm) / 1e3))}

