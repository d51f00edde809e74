"""KV tier accounting: pools, per-request block lists, sync state, lifecycle through EngineState."""

import pytest

from superinfer.core import BlockPool, EngineState, KVLedger, Params, PoolExhausted, TenantTable, get_policy
from superinfer.core.types import Phase

BS = 16


def test_pool_exhaustion_is_typed_and_allocates_nothing():
    pool = BlockPool(4, "dram")
    pool.allocate(3)
    with pytest.raises(PoolExhausted, match="dram pool exhausted: asked for 2 blocks, 1 free"):
        pool.allocate(2)
    assert pool.free == 1


def test_sync_then_swap_out_copies_only_the_tail_and_swap_in_restores_the_order():
    led = KVLedger(hbm_blocks=8, dram_blocks=8)
    dev = led.grow(7, 3)
    pairs = led.start_sync(7, 2)
    assert [d for d, _ in pairs] == dev[:2]
    assert led.blocks(7) == (3, 2, 0)  # in flight: not yet synced (rule 1)
    led.complete_sync(7)
    assert led.blocks(7) == (3, 2, 2)
    tail = led.swap_out(7, copy=1, keep_blocks=3)
    assert [d for d, _ in tail] == [dev[2]]
    assert led.blocks(7) == (0, 3, 0) and led.hbm.free == 8
    host = list(led.host[7])
    loads = led.start_swap_in(7, issue=2) + led.continue_swap_in(7, 2, 1)
    assert [h for h, _ in loads] == host
    led.complete_swap_in(7)
    assert led.blocks(7) == (3, 3, 3)
    led.check()


def run(state, policy, plans=1, now=0.0, b_xfer=100):
    for _ in range(plans):
        p = get_policy(policy).plan(state.snapshot(), state.capacity(b_xfer, 256, 8), Params(), TenantTable(), now)
        state.apply(p, now, lossless_victims=policy == "lvf-paper")
        now += 0.1
        state.complete_transfers(now)
        state.advance(p, now)
        state.check()
    return now


def test_abort_mid_rotation_frees_both_tiers():
    state = EngineState(hbm_blocks=6, dram_blocks=50, block_size=BS)
    state.admit(1, 0.0, 60, 20)
    run(state, "lvf-paper", plans=3)
    state.admit(2, 0.0, 60, 20)  # arrived long ago: lags, rotates 1 out
    run(state, "lvf-paper", plans=1, now=30.0)
    r1 = state.row_of(1)
    assert state.phase[r1] == Phase.ROTARY and state.blocks_dram[r1] > 0
    state.abort(1)
    state.abort(2)
    assert state.ledger.hbm.free == 6 and state.ledger.dram.free == 50
    state.check()


def test_full_dram_victim_falls_back_to_recompute_and_is_counted():
    state = EngineState(hbm_blocks=8, dram_blocks=0, block_size=BS)
    state.admit(1, 0.0, 63, 20)
    state.admit(2, 0.0, 63, 20)
    run(state, "lvf-paper", plans=2)  # both prefill, then both decode into their fourth block
    assert state.counters.preemptions == 0
    run(state, "lvf-paper", plans=1, now=1.0)  # both need a fifth block, none is free: one must go
    r2 = state.row_of(2)
    assert state.phase[r2] == Phase.ROTARY
    assert state.num_computed[r2] == 0 and state.counters.recompute_fallbacks == 1
    state.check()


def test_a_request_too_large_for_hbm_is_rejected_with_a_reason():
    state = EngineState(hbm_blocks=4, dram_blocks=0, block_size=BS)
    assert not state.admit(1, 0.0, 100, 10)
    assert state.rejections == [(1, "needs 7 KV blocks, HBM holds 4")]
    assert state.counters.arrived == state.counters.rejected == 1
    state.check()
