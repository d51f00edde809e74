"""Pinned-memory registration, backend selection, and the CUDA paths (skipped without a GPU)."""

from __future__ import annotations

import pytest
import torch

from superinfer.duplexkv import BackendUnavailable, DuplexKVEngine, KVLayout, TransferPlan, pinned
from superinfer.duplexkv.backends import make_backend

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def test_register_is_a_noop_without_cuda_and_validates() -> None:
    t = torch.zeros(1024, dtype=torch.uint8)
    with pytest.raises(ValueError):
        pinned.register(t[::2])
    with pytest.raises(ValueError):
        pinned.register(t, chunk_bytes=0)
    if not torch.cuda.is_available():
        region = pinned.register(t)
        assert not region.pinned
        region.unregister()


def test_backend_selection(monkeypatch: pytest.MonkeyPatch) -> None:
    cpu = torch.device("cpu")
    assert make_backend("auto", cpu).name == "torch"
    assert make_backend("triton", cpu).name == "triton"
    monkeypatch.setenv("SUPERINFER_KV_BACKEND", "triton")
    assert make_backend("auto", cpu).name == "triton"
    with pytest.raises(ValueError):
        make_backend("magic", cpu)
    if not torch.cuda.is_available():
        with pytest.raises(BackendUnavailable):
            make_backend("cuda", cpu)


@cuda
def test_pinned_chunks_cover_the_tensor() -> None:
    t = torch.zeros(3 << 20, dtype=torch.uint8)
    region = pinned.register(t, chunk_bytes=1 << 20)
    try:
        assert len(region.chunks) == 3 and pinned.is_registered(t)
    finally:
        region.unregister()
    assert not pinned.is_registered(t)


@cuda
@pytest.mark.parametrize("backend", ["torch", "triton", "cuda"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32, torch.int8])
def test_cuda_round_trip(backend: str, dtype: torch.dtype) -> None:
    layers = [torch.randn(2, 32, 16, 8, 128, device="cuda").to(dtype) for _ in range(4)]
    original = [t.clone() for t in layers]
    engine = DuplexKVEngine(KVLayout.from_layer_tensors(layers, 1), 32, backend=backend)
    try:
        assert engine.pool.pinned
        engine.pool.tensor.fill_(0xFF)
        src = [1, 2, 3, 4, 10, 20, 21]
        engine.wait(engine.submit(TransferPlan().swap_out("r", src)), timeout=60)
        for t in layers:
            t.view(-1).view(torch.uint8).fill_(0xFF)
        dst = [5, 6, 7, 8, 0, 30, 31]
        engine.wait(engine.submit(TransferPlan().swap_in("r", dst)), timeout=60)
        for t, o in zip(layers, original):
            assert torch.equal(t[:, dst].view(torch.uint8), o[:, src].view(torch.uint8))
    finally:
        engine.close()


@cuda
def test_cuda_duplex_both_directions_in_one_plan() -> None:
    dev = torch.randint(0, 255, (64, 1 << 16), dtype=torch.uint8, device="cuda")
    before = dev.clone()
    engine = DuplexKVEngine(KVLayout.block_first(dev), 64)
    try:
        engine.wait(engine.submit(TransferPlan().swap_out("b", list(range(32, 48)))), timeout=60)
        engine.take_released()
        ticket = engine.submit(TransferPlan().swap_out("a", list(range(0, 16))).swap_in("b", list(range(16, 32))))
        engine.wait(ticket, timeout=60)
        assert ticket.bytes_d2h == ticket.bytes_h2d == 16 << 16
        assert torch.equal(dev[16:32], before[32:48])
        engine.wait(engine.submit(TransferPlan().swap_in("a", list(range(48, 64)))), timeout=60)
        assert torch.equal(dev[48:64], before[0:16])
    finally:
        engine.close()
