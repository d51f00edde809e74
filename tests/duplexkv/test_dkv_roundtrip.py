"""Byte-exact round trips through every backend that runs on this machine.

Device KV is filled with random bytes; the host pool and the device destinations are poisoned (0xFF)
first, so a block that is not copied, copied short or copied to the wrong place shows up. The Triton
backend runs in Triton's interpreter on CPU (the kernel module wraps it explicitly; see
``backends/triton_backend.py``), on KB-sized tensors.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from superinfer.duplexkv import DuplexKVEngine, KVLayout, TransferPlan
from superinfer.duplexkv.merge import Direction, adjacent_runs, merged_ops, naive_ops

DTYPES = [torch.bfloat16, torch.float16, torch.float32, torch.int8]
BACKENDS = ["torch", "triton"]
NUM_BLOCKS = 12


def random_fill(t: torch.Tensor, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    raw = torch.randint(0, 256, (t.numel() * t.element_size(),), dtype=torch.uint8, generator=g)
    t.view(-1).view(torch.uint8).copy_(raw)


def make_layout(kind: str, dtype: torch.dtype) -> tuple[KVLayout, list[torch.Tensor], int]:
    """(layout, tensors, block dim). Sizes are odd on purpose in the int8 case (byte kernel path)."""
    if kind == "block_first":
        t = torch.empty(NUM_BLOCKS, 3, 4, 8, dtype=dtype)
        return KVLayout.block_first(t, segments_per_block=3), [t], 0
    if kind == "vllm_cuda":  # [2, num_blocks, block_size, heads, head_dim] per layer
        ts = [torch.empty(2, NUM_BLOCKS, 4, 2, 8, dtype=dtype) for _ in range(3)]
        return KVLayout.from_layer_tensors(ts, 1), ts, 1
    if kind == "vllm_cpu":  # [num_blocks, heads, block_size, 2 * head_dim] per layer, odd bytes
        ts = [torch.empty(NUM_BLOCKS, 1, 3, 5, dtype=dtype) for _ in range(2)]
        return KVLayout.from_vllm_kv_caches({f"l{i}": t for i, t in enumerate(ts)}, NUM_BLOCKS), ts, 0
    if kind == "vllm_cpu_shared":  # vLLM CPU: per-layer views into ONE allocation (non-zero storage offsets)
        whole = torch.empty(3, NUM_BLOCKS, 1, 3, 5, dtype=dtype)
        ts = [whole[i] for i in range(3)]
        return KVLayout.from_vllm_kv_caches({f"l{i}": t for i, t in enumerate(ts)}, NUM_BLOCKS), ts, 0
    raise ValueError(kind)


def blocks_of(t: torch.Tensor, block_dim: int, ids: list[int]) -> torch.Tensor:
    return t.index_select(block_dim, torch.tensor(ids)).contiguous().view(-1).view(torch.uint8)


def poison(t: torch.Tensor) -> None:
    t.view(-1).view(torch.uint8).fill_(0xFF)


@pytest.mark.parametrize("merge", [True, False], ids=["merged", "naive"])
@pytest.mark.parametrize("kind", ["block_first", "vllm_cuda", "vllm_cpu", "vllm_cpu_shared"])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).split(".")[-1])
@pytest.mark.parametrize("backend", BACKENDS)
def test_round_trip(backend: str, dtype: torch.dtype, kind: str, merge: bool) -> None:
    layout, tensors, bdim = make_layout(kind, dtype)
    for i, t in enumerate(tensors):
        random_fill(t, seed=100 + i)
    original = [t.clone() for t in tensors]
    engine = DuplexKVEngine(layout, 10, backend=backend, merge=merge)
    try:
        poison(engine.pool.tensor)
        src = [2, 3, 4, 9, 0]  # a run of three, then two singles
        engine.wait(engine.submit(TransferPlan().swap_out("r", src)), timeout=60)
        assert sorted(engine.take_released()) == sorted(src)
        for t in tensors:
            poison(t)
        dst = [7, 8, 1, 5, 6]
        engine.wait(engine.submit(TransferPlan().swap_in("r", dst)), timeout=60)
        for t, o in zip(tensors, original):
            assert torch.equal(blocks_of(t, bdim, dst), blocks_of(o, bdim, src))
            untouched = [b for b in range(NUM_BLOCKS) if b not in dst]
            assert bool((blocks_of(t, bdim, untouched) == 0xFF).all()), "bytes written outside the target blocks"
        stats = engine.stats.snapshot()
        assert stats["d2h"]["bytes"] == stats["h2d"]["bytes"] == len(src) * layout.block_bytes
    finally:
        engine.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_merged_and_naive_plans_give_identical_bytes(backend: str) -> None:
    layout, tensors, _ = make_layout("vllm_cuda", torch.bfloat16)
    for i, t in enumerate(tensors):
        random_fill(t, seed=7 + i)
    pools = []
    for merge, unit in ((True, None), (False, None), (True, 64)):
        engine = DuplexKVEngine(layout, 12, backend=backend, merge=merge, max_unit_bytes=unit)
        poison(engine.pool.tensor)
        plan = TransferPlan()
        for i, b in enumerate([5, 6, 7, 11, 1, 2]):
            plan.sync("q", i, b)
        engine.wait(engine.submit(plan), timeout=60)
        pools.append(engine.pool.tensor.clone())
        engine.close()
    assert torch.equal(pools[0], pools[1]) and torch.equal(pools[0], pools[2])


def test_adjacent_runs_and_op_counts() -> None:
    runs = adjacent_runs(np.array([4, 2, 3, 9, 10]), np.array([7, 0, 1, 2, 4]))
    assert runs.tolist() == [[2, 0, 2], [4, 7, 1], [9, 2, 1], [10, 4, 1]]
    t = torch.zeros(16, 64, dtype=torch.uint8)
    layout = KVLayout.block_first(t, segments_per_block=4)
    assert len(layout.fused) == 1
    dev, host = np.arange(4, 12), np.arange(8)
    merged = merged_ops(layout, dev, host, Direction.D2H, 16)
    assert merged.shape[0] == 1 and merged[0, 6] == 8 * 64  # one copy of eight blocks
    assert naive_ops(layout, dev, host, Direction.D2H, 16).shape[0] == 8 * 4
    capped = merged_ops(layout, dev, host, Direction.H2D, 16, max_unit_bytes=128)
    assert capped.shape[0] == 4
    # per-layer layouts merge runs into strided copies: one per segment per run
    layers = [torch.zeros(2, 16, 32, dtype=torch.uint8) for _ in range(3)]
    per_layer = KVLayout.from_layer_tensors(layers, 1)
    ops = merged_ops(per_layer, dev, host, Direction.D2H, 16)
    assert ops.shape[0] == 6 and set(ops[:, 7].tolist()) == {8}


def test_layout_validation() -> None:
    with pytest.raises(ValueError):
        KVLayout.block_first(torch.zeros(4, 10, dtype=torch.uint8), segments_per_block=3)
    with pytest.raises(ValueError):
        KVLayout.from_layer_tensors([torch.zeros(2, 4, 8).transpose(0, 2)], 1)  # not contiguous
    with pytest.raises(ValueError):
        KVLayout.from_vllm_kv_caches({"a": torch.zeros(4, 4, 8)}, 4)  # ambiguous block dim
    with pytest.raises(ValueError):
        KVLayout.from_layer_tensors([torch.zeros(2, 4, 8), torch.zeros(2, 5, 8)], 1)
