"""``InlineExecutor``: batches run in the caller's thread at launch, byte-exact, in rule order; what a CPU
serving engine's KV worker uses (worker threads there slowed every engine step ~2x: the executor's docstring)."""

from __future__ import annotations

import pytest
import torch

from superinfer.duplexkv import DuplexKVEngine, KVLayout, TransferPlan
from superinfer.duplexkv import executor as executor_mod
from superinfer.duplexkv.executor import InlineExecutor
from superinfer.duplexkv.fences import HostFence
from superinfer.duplexkv.merge import Direction
from tests.duplexkv.test_dkv_roundtrip import blocks_of, make_layout, poison, random_fill


def test_a_round_trip_completes_at_submit_byte_exact() -> None:
    layout, tensors, bdim = make_layout("vllm_cpu_shared", torch.float32)
    for i, t in enumerate(tensors):
        random_fill(t, seed=11 + i)
    original = [t.clone() for t in tensors]
    engine = DuplexKVEngine(layout, 10, backend="torch", executor=InlineExecutor)
    try:
        out = engine.submit(TransferPlan().swap_out("r", [2, 3, 4, 9]))
        assert out.done(), "an inline batch is complete when submit returns"
        for t in tensors:
            poison(t)
        back = engine.submit(TransferPlan().swap_in("r", [7, 8, 1, 5]))
        assert back.done()
        engine.wait(back)
        for t, o in zip(tensors, original):
            assert torch.equal(blocks_of(t, bdim, [7, 8, 1, 5]), blocks_of(o, bdim, [2, 3, 4, 9]))
        assert engine.stats.snapshot()["h2d"]["bytes"] == 4 * layout.block_bytes
    finally:
        engine.close()


def test_a_dependency_not_complete_in_time_fails_the_batch_and_copies_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(executor_mod, "INLINE_WAIT_S", 0.01)
    ex = InlineExecutor(_Recorder())
    handle = ex.launch(Direction.D2H, torch.zeros((1, 8), dtype=torch.int64).numpy(), 32, [HostFence()])
    assert handle.done() and handle.error is not None and ex.backend.runs == 0


class _Recorder:
    """A backend that counts the batches it was asked to run."""

    runs = 0

    def bind(self, bases: object) -> None: ...

    def run(self, ops: object, stream: object = None) -> None:
        self.runs += 1

    def close(self) -> None: ...


def test_the_kv_worker_copies_inline_on_a_cpu_engine() -> None:
    from superinfer.vllm.kvworker import KVWorker

    w = KVWorker(host_blocks=4, backend="torch")
    w.register({f"l{i}": torch.zeros(6, 1, 32, 8) for i in range(2)})  # vLLM CPU: [blocks, heads, block, 2*dim]
    try:
        assert isinstance(w.engine.executor, InlineExecutor)
    finally:
        w.close()
