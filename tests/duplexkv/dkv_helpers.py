"""Builders and the ordering-rule scenarios shared by the DuplexKV tests.

Each ``scenario_ruleN`` drives a :class:`DuplexKVEngine` over a :class:`ManualExecutor`, completing
batches adversarially (newest first, as soon as their dependencies allow), with a "scheduler" that
reuses a device block the moment the engine reports it free. It returns the list of violated
expectations: empty when the rule holds. The mutation tests replace one rule with a permissive version
and require a non-empty list, so each scenario is shown to detect the removal of its rule.
"""

from __future__ import annotations

import torch

from superinfer.duplexkv import DuplexKVEngine, HostFence, KVLayout, TransferPlan
from superinfer.duplexkv.manual import ManualExecutor

BLOCKS = 8
BLOCK_BYTES = 48
POISON = 0xFF


def manual_engine(host_blocks: int = 8) -> tuple[DuplexKVEngine, torch.Tensor, ManualExecutor]:
    dev = torch.zeros(BLOCKS, BLOCK_BYTES, dtype=torch.uint8)
    engine = DuplexKVEngine(KVLayout.block_first(dev), host_blocks, backend="torch", executor=ManualExecutor)
    engine.pool.tensor.fill_(POISON)
    return engine, dev, engine.executor  # type: ignore[return-value]


def pattern(seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 255, (BLOCK_BYTES,), dtype=torch.uint8, generator=g)  # never all 0xFF


def reuse_released(engine: DuplexKVEngine, dev: torch.Tensor) -> list[int]:
    """A scheduler that hands freed blocks to another request at once (which overwrites them)."""
    freed = engine.take_released()
    for b in freed:
        dev[b].fill_(POISON)
    return freed


def park(engine: DuplexKVEngine, dev: torch.Tensor, ex: ManualExecutor, req: str, data: torch.Tensor, tmp: int) -> None:
    """Put ``data`` as block 0 of ``req`` in the host pool (via device block ``tmp``), fully completed."""
    dev[tmp].copy_(data)
    engine.submit(TransferPlan().swap_out(req, [tmp]))
    ex.drain()
    engine.take_released()
    dev[tmp].fill_(POISON)


def scenario_rule1() -> list[str]:
    """(1) A block whose eager sync is still in flight is not synced; its preemption must not free it."""
    engine, dev, ex = manual_engine()
    a = pattern(1)
    dev[1].copy_(a)
    engine.submit(TransferPlan().sync("a", 0, 1))
    problems = []
    if engine.is_synced("a", 0):
        problems.append("synced before its copy completed")
    engine.submit(TransferPlan().swap_out("a", [1]))
    reuse_released(engine, dev)  # block 1 must not be listed yet
    ex.drain()
    reuse_released(engine, dev)
    engine.submit(TransferPlan().swap_in("a", [5]))
    ex.drain()
    if not torch.equal(dev[5], a):
        problems.append("swapped-in bytes differ from the bytes synced")
    return problems


def scenario_rule2() -> list[str]:
    """(2) Device blocks given up by a swap-out are not reused before their copy-out completed."""
    problems = []
    # (a) the freed list waits for the copy-out
    engine, dev, ex = manual_engine()
    a = pattern(2)
    dev[1].copy_(a)
    engine.submit(TransferPlan().swap_out("a", [1]))
    if 1 in reuse_released(engine, dev):
        problems.append("device block released before its copy-out completed")
    ex.drain()
    reuse_released(engine, dev)
    engine.submit(TransferPlan().swap_in("a", [6]))
    ex.drain()
    if not torch.equal(dev[6], a):
        problems.append("(a) parked bytes corrupted by early reuse")
    # (b) a later copy into the block (a scheduler trusting its own free list) waits for the copy-out
    engine, dev, ex = manual_engine()
    b = pattern(3)
    park(engine, dev, ex, "b", b, tmp=3)
    dev[1].copy_(a)
    engine.submit(TransferPlan().swap_out("a", [1]))
    engine.submit(TransferPlan().swap_in("b", [1]))
    ex.drain()
    if not torch.equal(dev[1], b):
        problems.append("(b) swapped-in bytes wrong")
    engine.take_released()
    engine.submit(TransferPlan().swap_in("a", [6]))
    ex.drain()
    if not torch.equal(dev[6], a):
        problems.append("(b) copy-out read the block after it was overwritten")
    return problems


def scenario_rule3() -> list[str]:
    """(3) An H2D waits for a pending D2H of its host block, or both are cancelled in place."""
    problems = []
    # (a) swap-in elsewhere while the sync that fills the host block is still pending
    engine, dev, ex = manual_engine()
    a = pattern(4)
    dev[1].copy_(a)
    engine.submit(TransferPlan().sync("a", 0, 1))
    engine.submit(TransferPlan().swap_out("a", [1]))
    engine.submit(TransferPlan().swap_in("a", [5]))
    ex.drain()
    if not torch.equal(dev[5], a):
        problems.append("(a) swap-in read the host block before the copy-out wrote it")
    # (b) swap-in into the very block whose copy-out is pending: cancel the copy-in and the release
    engine, dev, ex = manual_engine()
    dev[2].copy_(a)
    engine.submit(TransferPlan().swap_out("a", [2]))
    ticket = engine.submit(TransferPlan().swap_in("a", [2]))
    if ticket.bytes_h2d != 0:
        problems.append("(b) copied into a block that still holds the data")
    ex.drain()
    if 2 in reuse_released(engine, dev):
        problems.append("(b) block released although the request kept it")
    if not torch.equal(dev[2], a):
        problems.append("(b) device bytes lost")
    return problems


def scenario_rule4() -> list[str]:
    """(4) A D2H waits for the compute that wrote the block."""
    engine, dev, ex = manual_engine()
    a = pattern(5)
    compute = HostFence()
    engine.record_compute([1], compute)
    engine.submit(TransferPlan().sync("a", 0, 1))
    ex.drain()  # the copy may run now only if nothing holds it back
    dev[1].copy_(a)  # the compute writes the block ...
    compute.signal()  # ... and finishes
    ex.drain()
    engine.submit(TransferPlan().swap_out("a", [1]))
    ex.drain()
    engine.take_released()
    engine.submit(TransferPlan().swap_in("a", [4]))
    ex.drain()
    return [] if torch.equal(dev[4], a) else ["host copy taken before the compute wrote the block"]


def scenario_rule5() -> list[str]:
    """(5) Compute reads a swapped-in block only after its H2D completed."""
    engine, dev, ex = manual_engine()
    a = pattern(6)
    park(engine, dev, ex, "a", a, tmp=2)
    engine.submit(TransferPlan().swap_in("a", [5]))
    problems = []
    if not engine.read_fences([5]):
        problems.append("no fence for compute to wait on while the swap-in is pending")
    seen = None
    while True:  # compute starts as early as the engine lets it
        if engine.readable([5]):
            seen = dev[5].clone()
            break
        if not ex.drain(limit=1):
            break
    if seen is None or not torch.equal(seen, a):
        problems.append("compute read the block before its swap-in completed")
    return problems


def scenario_rule6() -> list[str]:
    """(6) A plan that swaps out a block and swaps another request into it keeps the copies apart."""
    engine, dev, ex = manual_engine()
    a, b = pattern(7), pattern(8)
    park(engine, dev, ex, "b", b, tmp=3)
    dev[1].copy_(a)
    engine.submit(TransferPlan().swap_out("a", [1]).swap_in("b", [1]))
    ex.drain()
    problems = []
    if not torch.equal(dev[1], b):
        problems.append("swap-in bytes wrong")
    engine.take_released()
    engine.submit(TransferPlan().swap_in("a", [6]))
    ex.drain()
    if not torch.equal(dev[6], a):
        problems.append("copy-out and copy-in of one block raced inside one batch")
    return problems


SCENARIOS = {1: scenario_rule1, 2: scenario_rule2, 3: scenario_rule3, 4: scenario_rule4, 5: scenario_rule5, 6: scenario_rule6}
