"""The per-iteration plan of every policy, on small hand-built states (design §3.2)."""

import numpy as np

from superinfer.core import Params, Phase, VictimMode, get_policy
from superinfer.core.planner import fits_in_hbm
from tests.core.builders import BS, PARAMS, TENANTS, cap, rotary, running, snap, state, waiting

NOW = 100.0


def plan(policy, s, c, params=PARAMS, now=NOW):
    return get_policy(policy).plan(s, c, params, TENANTS, now)


def sched(p):
    return dict(zip(p.sched_ids.tolist(), p.sched_tokens.tolist()))


# ---- step 0: FCFS when everything fits ------------------------------------------------------------
def test_lvf_is_fcfs_when_everything_fits():
    reqs = (running(1, tokens=40, t_run=NOW - 9), waiting(2, prompt=50, t_arr=NOW - 1), waiting(3, prompt=20, t_arr=NOW - 8))
    s, c = state(*reqs, free=20)
    assert fits_in_hbm(s, c)
    lvf, fcfs = plan("lvf-paper", s, c), plan("fcfs", s, c)
    assert lvf.fcfs_fallback and not fcfs.fcfs_fallback
    assert lvf.decisions() == fcfs.decisions()
    assert sched(lvf) == {1: 1, 2: 50, 3: 20}


def test_fcfs_admits_by_arrival_and_chunks_the_last_prefill():
    s, c = state(waiting(1, prompt=300, t_arr=2.0), waiting(2, prompt=300, t_arr=1.0), free=100, tokens=400)
    assert sched(plan("fcfs", s, c)) == {2: 300, 1: 100}


def test_max_num_seqs_bounds_admission():
    s, c = state(running(1), waiting(2, t_arr=1.0), waiting(3, t_arr=2.0), free=100, seqs=2)
    assert sched(plan("fcfs", s, c)) == {1: 1, 2: 32}


# ---- FCFS preemption: newest first, recompute, nothing admitted --------------------------------------
def test_fcfs_preempts_the_newest_running_request_and_recomputes_it():
    # Both running requests fill their block exactly; each needs one new block; one block is free.
    a, b = running(1, tokens=BS * 2, t_run=1.0), running(2, tokens=BS * 2, t_run=2.0)
    s, c = state(a, b, waiting(3, t_arr=0.5), free=1)
    p = plan("fcfs", s, c)
    assert p.victim_ids.tolist() == [2]
    assert p.victim_mode.tolist() == [VictimMode.RECOMPUTE] and p.victim_d2h.tolist() == [0]
    assert sched(p) == {1: 1}  # and the waiting request is not admitted in a step that preempted


def test_priority_preempts_the_largest_priority_value():
    a = running(1, tokens=BS * 2, t_run=2.0, priority=5)
    b = running(2, tokens=BS * 2, t_run=1.0, priority=0)
    s, c = state(a, b, free=1)
    assert plan("priority", s, c).victim_ids.tolist() == [1]


def test_sjf_admits_shortest_predicted_first():
    s, c = state(waiting(1, t_arr=0.0, pred_remaining=500), waiting(2, t_arr=1.0, pred_remaining=5), free=2)
    assert sched(plan("sjf", s, c)) == {2: 32}


def test_sarathi_serves_decodes_first_within_its_small_budget():
    pre = running(1, tokens=64, prefill_left=2000, t_run=0.0)
    dec = running(2, tokens=64, t_run=1.0)
    s, c = state(pre, dec, free=1000, tokens=8192)
    p = plan("sarathi", s, c, params=Params(sarathi_token_budget=256))
    assert sched(p) == {2: 1, 1: 255}
    assert sched(plan("fcfs", s, c))[1] == 2000  # vLLM's running order gives the prefill the budget


def test_vllm_offload_reloads_parked_blocks_instead_of_recomputing():
    parked = rotary(1, tokens=BS * 3, t_arr=0.0)
    s, c = state(parked, free=10)
    p = plan("vllm-offload", s, c)
    assert p.swap_ids.tolist() == [1] and p.swap_blocks.tolist() == [3]
    assert sched(p) == {}  # it joins the batch once the copy has completed


def test_vllm_offload_stores_full_blocks_eagerly():
    s, c = state(running(1, tokens=BS * 3 + 5), free=10)
    p = plan("vllm-offload", s, c)
    assert dict(zip(p.sync_ids.tolist(), p.sync_blocks.tolist())) == {1: 3}  # the partial block waits


# ---- LVF under pressure ------------------------------------------------------------------------------
def pressure():
    """Two long-running requests fill HBM; a request past its TTFT SLO and a lagging rotary wait."""
    old = running(1, tokens=BS * 4 - 1, t_run=NOW - 30, synced=2)  # decoding into its last slot
    young = running(2, tokens=BS * 4 - 1, t_run=NOW - 1, synced=3)
    late = waiting(3, prompt=BS * 3, t_arr=NOW - 8)
    lag = rotary(4, tokens=BS * 2, t_last=NOW - 1)
    return old, young, late, lag


def test_lvf_serves_largest_vlt_first_and_preempts_from_the_tail():
    reqs = pressure()
    s, c = state(*reqs, free=0)
    p = plan("lvf-paper", s, c)
    assert not p.fcfs_fallback
    ids, vlt = p.ranking()
    assert ids.tolist() == [4, 3, 2, 1]
    assert p.victim_ids.tolist() == [1, 2]  # the most-served requests make room
    assert not p.victim_forced.any()
    assert set(p.swap_ids.tolist()) == {4} and sched(p) == {3: BS * 3}


def test_lvf_victim_copies_only_its_unsynced_tail():
    s, c = state(*pressure(), free=0)
    p = plan("lvf-paper", s, c)
    d2h = dict(zip(p.victim_ids.tolist(), p.victim_d2h.tolist()))
    assert d2h == {1: 2, 2: 1}  # request 1 had 2 of its 4 blocks synced, request 2 had 3
    assert (p.victim_mode == VictimMode.SWAP).all()


def test_lvf_never_preempts_a_request_ranked_at_or_above_the_candidate():
    fresh = waiting(3, prompt=BS * 3, t_arr=NOW)  # VLT -5.5, below both running requests
    old = running(1, tokens=BS * 4 - 5, t_run=NOW - 3)  # VLT -3: it has had less service than fresh lags
    s, c = state(old, fresh, free=0)
    p = plan("lvf-paper", s, c)
    assert p.victim_ids.size == 0
    assert sched(p) == {1: 1}


def test_lvf_transfer_budget_caps_swap_ins_per_direction():
    many = [rotary(10 + i, tokens=BS * 4, t_last=NOW - 2 - i) for i in range(5)]
    s, c = state(*many, free=100, b_xfer=6)
    p = plan("lvf-paper", s, c)
    # FCFS fallback (everything fits), budget still respected; the second swap-in is partial.
    assert p.h2d_blocks <= 6
    assert p.swap_blocks.tolist() == [4, 2]


def test_lvf_continues_a_partial_swap_in_first():
    loading = rotary(1, tokens=BS * 8, t_last=NOW - 0.2)
    loading.blocks_hbm, loading.h2d_pending = 8, 5
    other = rotary(2, tokens=BS * 2, t_last=NOW - 3)
    s, c = state(loading, other, free=10, b_xfer=6)
    p = plan("lvf-paper", s, c)
    assert dict(zip(p.swap_ids.tolist(), p.swap_blocks.tolist())) == {1: 5, 2: 1}


def test_min_residency_guards_a_fresh_swap_in_from_discretionary_preemption():
    old, young, late, lag = pressure()
    old.residency = young.residency = 1
    s, c = state(old, young, late, lag, free=0)
    p = plan("lvf-paper", s, c, params=Params(min_residency=4))
    assert p.victim_ids.size == 0


def test_rotation_cap_guards_against_starvation():
    old, young, late, lag = pressure()
    old.rotations = young.rotations = 3
    s, c = state(old, young, late, lag, free=0)
    assert plan("lvf-paper", s, c, params=Params(max_rotations=3)).victim_ids.size == 0
    assert plan("lvf-paper", s, c, params=Params(max_rotations=4)).victim_ids.size == 2


def test_forced_preemption_ignores_guards_so_running_requests_can_always_grow():
    a = running(1, tokens=BS * 2, t_run=NOW - 5, residency=0, rotations=99)
    b = running(2, tokens=BS * 2, t_run=NOW - 1, residency=0, rotations=99)
    s, c = state(a, b, free=1)
    p = plan("lvf-paper", s, c, params=Params(max_rotations=1))
    assert p.victim_ids.tolist() == [1] and p.victim_forced.tolist() == [True]
    assert sched(p) == {2: 1}


def test_full_dram_makes_a_victim_fall_back_to_recompute():
    a = running(1, tokens=BS * 2 + 3, t_run=NOW - 5)
    b = running(2, tokens=BS * 2, t_run=NOW - 1)
    s, c = state(a, b, free=0, dram=0)
    p = plan("lvf-paper", s, c)
    assert p.victim_ids.tolist() == [1]
    assert p.victim_mode.tolist() == [VictimMode.RECOMPUTE] and p.victim_d2h.tolist() == [0]


def test_eager_sync_goes_to_likeliest_victims_first_within_the_budget():
    a = running(1, tokens=BS * 3, t_run=NOW - 9)
    b = running(2, tokens=BS * 3, t_run=NOW - 1)
    w = waiting(3, prompt=BS * 7, t_arr=NOW)  # makes memory pressure: not everything fits
    s, c = state(a, b, w, free=2, b_xfer=4)
    p = plan("lvf-paper", s, c)
    assert dict(zip(p.sync_ids.tolist(), p.sync_blocks.tolist())) == {1: 3, 2: 1}


def test_plan_is_deterministic():
    s, c = state(*pressure(), free=0)
    assert plan("lvf-paper", s, c).decisions() == plan("lvf-paper", s, c).decisions()


def test_running_requests_keep_their_decode_token_before_prefill_chunks():
    dec = running(1, tokens=BS * 2, t_run=NOW - 50)
    late = waiting(2, prompt=BS * 40, t_arr=NOW - 9)
    s, c = snap(dec, late), cap(30, hbm=60, tokens=100)
    p = plan("lvf-paper", s, c)
    assert sched(p) == {1: 1, 2: 99}
    assert p.victim_ids.size == 0  # a chunk that fits needs no victim
    assert int(p.alloc_blocks[p.alloc_ids == 2][0]) == 7


def test_phase_enum_is_ordered():
    assert Phase.WAITING < Phase.ROTARY < Phase.RUNNING
    assert np.int8(Phase.RUNNING) == 2


def test_lvf_admits_nothing_ranked_below_a_request_it_just_preempted():
    victim = running(1, tokens=BS * 4 - 1, t_run=NOW - 1)  # VLT -1
    late = waiting(2, prompt=BS * 2, t_arr=NOW - 8)  # VLT 2.5, needs 2 blocks: preempts request 1
    early = waiting(3, prompt=BS, t_arr=NOW - 2.5)  # VLT -3: would fit in what is left over
    s, c = state(victim, late, early, free=0)
    p = plan("lvf-paper", s, c)
    assert p.victim_ids.tolist() == [1]
    assert sched(p) == {2: BS * 2}


# ---- the admission walk goes on past a spent budget (LVF only) ----------------------------------------
def test_lvf_walks_on_to_swap_ins_when_the_token_budget_is_spent():
    big = running(1, tokens=BS * 10, t_run=NOW - 1)
    late = waiting(2, prompt=BS * 4, t_arr=NOW - 9)  # VLT 3.5: takes the 49 tokens left
    next_new = waiting(3, prompt=BS, t_arr=NOW - 8)  # VLT 2.5: no tokens left
    parked = rotary(4, tokens=BS * 2, t_last=NOW - 0.5)  # VLT 1.2: a swap-in needs no tokens
    s, c = state(big, late, next_new, parked, free=8, tokens=50)
    p = plan("lvf-paper", s, c)
    assert not p.fcfs_fallback
    assert sched(p) == {1: 1, 2: 49}
    assert dict(zip(p.swap_ids.tolist(), p.swap_blocks.tolist())) == {4: 2}


def test_lvf_walks_on_to_new_requests_when_the_link_is_spent():
    big = running(1, tokens=BS * 10, t_run=NOW - 1)
    first = rotary(2, tokens=BS * 3, t_last=NOW - 2)  # VLT 5.7: takes the whole link
    second = rotary(3, tokens=BS * 2, t_last=NOW - 1.5)  # VLT 4.2: no link left
    new = waiting(4, prompt=BS, t_arr=NOW - 6)  # VLT 0.5: needs tokens, not the link
    s, c = state(big, first, second, new, free=7, b_xfer=3)
    p = plan("lvf-paper", s, c)
    assert not p.fcfs_fallback
    assert dict(zip(p.swap_ids.tolist(), p.swap_blocks.tolist())) == {2: 3}
    assert sched(p) == {1: 1, 4: BS}


def test_other_policies_stop_at_the_first_candidate_that_does_not_fit():
    parked = rotary(1, tokens=BS * 3, t_arr=1.0)  # preempted: first in vLLM's queue, takes the link
    second = rotary(2, tokens=BS * 2, t_arr=2.0)  # no link left: the walk stops here
    new = waiting(3, prompt=BS, t_arr=3.0)
    s, c = state(parked, second, new, free=50, b_xfer=3)
    p = plan("fcfs", s, c)
    assert dict(zip(p.swap_ids.tolist(), p.swap_blocks.tolist())) == {1: 3}
    assert sched(p) == {}
