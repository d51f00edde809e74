"""Engine behaviour: eager sync, unsynced tail, pool exhaustion, concurrency, lifecycle, validation."""

from __future__ import annotations

import threading

import pytest
import torch

from superinfer.duplexkv import DuplexKVEngine, HostPoolFull, KVLayout, PlanError, TransferPlan
from superinfer.duplexkv.merge import Direction
from superinfer.duplexkv.pool import HostPool
from tests.duplexkv.dkv_helpers import manual_engine, pattern


def thread_engine(blocks: int = 16, host_blocks: int = 16, block_bytes: int = 256):
    dev = torch.randint(0, 255, (blocks, block_bytes), dtype=torch.uint8)
    return DuplexKVEngine(KVLayout.block_first(dev), host_blocks, backend="torch"), dev


def test_eager_sync_makes_preemption_copy_only_the_unsynced_tail() -> None:
    engine, dev = thread_engine()
    blocks = [3, 4, 5, 6, 7]
    plan = TransferPlan()
    for i in range(3):
        plan.sync("r", i, blocks[i])
    engine.wait(engine.submit(plan), timeout=30)
    assert [engine.is_synced("r", i) for i in range(5)] == [True, True, True, False, False]
    assert engine.unsynced("r", 5) == [3, 4]
    before = dev.clone()
    ticket = engine.wait(engine.submit(TransferPlan().swap_out("r", blocks, num_full=4)), timeout=30)
    assert ticket.bytes_d2h == 2 * 256 and ticket.skipped == 3
    assert sorted(engine.take_released()) == blocks
    dev.zero_()
    engine.wait(engine.submit(TransferPlan().swap_in("r", [10, 11, 12, 13, 14])), timeout=30)
    assert torch.equal(dev[10:15], before[3:8])
    # the partly filled last block goes stale once the request resumes; full blocks stay synced
    assert engine.unsynced("r", 5) == [4]
    engine.close()


def test_sync_is_idempotent() -> None:
    engine, _ = thread_engine()
    engine.wait(engine.submit(TransferPlan().sync("r", 0, 1)), timeout=30)
    ticket = engine.wait(engine.submit(TransferPlan().sync("r", 0, 1)), timeout=30)
    assert ticket.bytes_d2h == 0 and ticket.skipped == 1
    engine.close()


def test_pool_exhaustion_is_typed_and_overwrites_nothing() -> None:
    engine, dev = thread_engine(host_blocks=4)
    engine.wait(engine.submit(TransferPlan().swap_out("a", [0, 1, 2])), timeout=30)
    parked = engine.pool.tensor.clone()
    free_before = engine.pool.free_blocks
    with pytest.raises(HostPoolFull) as info:
        engine.submit(TransferPlan().sync("b", 0, 5).swap_out("c", [6, 7]))
    assert info.value.requested == 3 and info.value.free == 1
    assert engine.pool.free_blocks == free_before
    assert torch.equal(engine.pool.tensor, parked), "a refused plan must not touch the pool"
    # the request whose plan was refused can go on without its host copy; others are unaffected
    dev[8:11].zero_()
    engine.take_released()
    engine.wait(engine.submit(TransferPlan().swap_in("a", [8, 9, 10])), timeout=30)
    assert torch.equal(dev[8:11], parked.view(4, -1)[:3])
    engine.close()


def test_free_request_returns_host_blocks_only_after_copies() -> None:
    engine, dev, ex = manual_engine(host_blocks=2)
    dev[1].copy_(pattern(11))
    engine.submit(TransferPlan().swap_out("a", [1]))
    engine.free_request("a")  # its copy-out is still pending
    assert engine.pool.free_blocks == 1
    ex.drain()
    engine.take_released()
    assert engine.pool.free_blocks == 2
    with pytest.raises(PlanError):
        engine.submit(TransferPlan().swap_in("a", [2]))


def test_plan_validation() -> None:
    engine, _, _ = manual_engine()
    with pytest.raises(PlanError):
        engine.submit(TransferPlan().swap_in("ghost", [1]))
    with pytest.raises(PlanError):
        engine.submit(TransferPlan().sync("a", 0, 99))
    with pytest.raises(PlanError):
        engine.submit(TransferPlan().swap_out("a", [1, 1]))
    with pytest.raises(ValueError):
        TransferPlan().swap_out("a", [1, 2], num_full=3)
    assert engine.pool.free_blocks == engine.pool.num_blocks


def test_host_pool_allocator() -> None:
    pool = HostPool(4, 8, pin=False)
    assert pool.allocate(2) == [0, 1]
    with pytest.raises(HostPoolFull):
        pool.allocate(3)
    with pytest.raises(ValueError):
        pool.free([3])
    pool.free([0])
    with pytest.raises(ValueError):
        pool.free([0])
    assert pool.allocate(1) == [0] and pool.free_blocks == 2


def test_concurrent_submissions_from_two_threads() -> None:
    block_bytes = 512
    engine, dev = thread_engine(blocks=64, host_blocks=64, block_bytes=block_bytes)
    original = dev.clone()
    errors: list[BaseException] = []

    def worker(tag: int) -> None:
        try:
            base = 32 * tag
            for r in range(8):
                req = (tag, r)
                src = [base + 2 * r, base + 2 * r + 1]
                dst = [base + 16 + 2 * r, base + 16 + 2 * r + 1]
                plan = TransferPlan().sync(req, 0, src[0]).swap_out(req, src)
                engine.wait(engine.submit(plan), timeout=60)
                engine.wait(engine.submit(TransferPlan().swap_in(req, dst)), timeout=60)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(t,)) for t in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    for tag in (0, 1):
        base = 32 * tag
        assert torch.equal(dev[base + 16 : base + 32], original[base : base + 16])
    assert engine.stats[Direction.D2H].bytes == 2 * 8 * 2 * block_bytes
    assert engine.pool.free_blocks == 64 - 32
    engine.close()


def test_stats_report_bandwidth() -> None:
    engine, _ = thread_engine()
    engine.wait(engine.submit(TransferPlan().swap_out("r", [1, 2, 3])), timeout=30)
    snap = engine.stats.snapshot()
    assert snap["d2h"]["bytes"] == 3 * 256 and snap["d2h"]["batches"] == 1 and snap["d2h"]["ops"] == 1
    assert snap["d2h"]["seconds"] > 0 and snap["d2h"]["gbps"] > 0
    assert snap["h2d"]["bytes"] == 0 and snap["h2d"]["gbps"] == 0.0
    engine.close()
