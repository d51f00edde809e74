"""Attention on one TP shard, timed on the local GPU (``attention.csv`` beside a model's ``mlp.csv``).

The shipped profiles have no attention, yet at long contexts decode attention (reading the KV cache)
is much of a step. This times ``torch.nn.functional.scaled_dot_product_attention`` (FlashAttention or
cuDNN kernels on Hopper, grouped-query heads native) for the shard's query and KV heads:

* ``decode``: ``batch`` sequences of one query token each over ``kv_len`` cached tokens;
* ``prefill``: one causal sequence of ``kv_len`` tokens (queries = keys).

vLLM reads the KV cache through block tables (paged); this reads contiguous KV, so it measures the
same FLOPs and bytes without the page indirection. Timing as :func:`~.timing.sample_ms`. One row per
point: the shape columns of :data:`COLUMNS` and ``time_stats.attention.<stat>`` in milliseconds.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch

from superinfer.bench.costmodel.timing import DTYPE, sample_ms, stats_ms, write_csv
from superinfer.sim.layerops import STATS, LayerShard, column

COLUMNS = ("phase", "n_head", "n_kv_head", "n_embd", "num_tensor_parallel_workers", "batch_size", "kv_len")
DECODE_BATCHES = (1, 4, 16, 64, 256)
DECODE_KV_LENS = (256, 1024, 4096, 16384)
PREFILL_LENS = (128, 512, 2048, 8192, 16384)
MAX_KV_BYTES = 40 << 30


def header() -> list[str]:
    return list(COLUMNS) + [column("attention", s) for s in STATS]


def attention_fn(shard: LayerShard, phase: str, batch: int, kv_len: int, device: str) -> Callable[[], None]:
    """One call of the shard's attention over freshly allocated q, k, v (reused across calls)."""
    hd = shard.head_dim
    q_len = 1 if phase == "decode" else kv_len
    g = torch.Generator(device=device).manual_seed(0)
    q = torch.randn(batch, shard.heads, q_len, hd, generator=g, device=device, dtype=DTYPE)
    k = torch.randn(batch, shard.kv_heads, kv_len, hd, generator=g, device=device, dtype=DTYPE)
    v = torch.randn(batch, shard.kv_heads, kv_len, hd, generator=g, device=device, dtype=DTYPE)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    causal = phase == "prefill"
    return lambda: sdpa(q, k, v, is_causal=causal, enable_gqa=shard.heads != shard.kv_heads)


def points(shard: LayerShard, decode_batches=DECODE_BATCHES, decode_kv=DECODE_KV_LENS,
           prefill=PREFILL_LENS) -> list[tuple[str, int, int]]:
    """(phase, batch, kv_len) to time, dropping those whose KV would exceed :data:`MAX_KV_BYTES`."""
    per_token = 2 * shard.kv_heads * shard.head_dim * 2
    out = [("decode", b, n) for b in decode_batches for n in decode_kv if b * n * per_token <= MAX_KV_BYTES]
    return out + [("prefill", 1, n) for n in prefill]


def profile_attention(shard: LayerShard, device: str, reps: int, trials: int,
                      pts: list[tuple[str, int, int]] | None = None) -> list[dict[str, object]]:
    """Time every point of one shard (default :func:`points`); one row each."""
    rows = []
    for phase, batch, kv_len in pts if pts is not None else points(shard):
        stats = stats_ms(sample_ms(attention_fn(shard, phase, batch, kv_len, device), device, reps, trials))
        rows.append({"phase": phase, "n_head": shard.n_head, "n_kv_head": shard.n_kv_head, "n_embd": shard.n_embd,
                     "num_tensor_parallel_workers": shard.tp, "batch_size": batch, "kv_len": kv_len,
                     **{column("attention", s): v for s, v in stats.items()}})
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
    return rows


def write(path: Path, rows: list[dict[str, object]]) -> None:
    write_csv(path, header(), rows)
