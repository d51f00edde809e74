"""``nothing_to_plan``: the state in which an engine may skip planning (the vLLM plugin does, every step
it can) must be one in which every policy's plan is "serve the running batch, nothing else"."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from superinfer.core import Phase, Tenant, TenantTable, nothing_to_plan
from superinfer.core.policies import POLICIES
from tests.core.builders import BS, cap, running, snap, waiting
from tests.core.test_properties import knobs

TENANTS = TenantTable([Tenant("a", 5.0, 0.1, 1.0), Tenant("b", 2.0, 0.05, 3.0)])
NOW = 1000.0


def quiet_batch(n: int = 3, tokens: int = 3 * BS - 1):
    """``n`` decoding requests whose full blocks all have a host copy, one block of growth room each."""
    return [running(i, tokens=tokens, synced=tokens // BS, t_arr=NOW - 10 + i, tenant=i % 2) for i in range(n)]


def test_a_synced_decoding_batch_that_fits_has_nothing_to_plan() -> None:
    assert nothing_to_plan(snap(*quiet_batch()), cap(3))


def test_an_empty_engine_has_nothing_to_plan() -> None:
    assert nothing_to_plan(snap(), cap(8))


def test_each_reason_to_plan_is_seen() -> None:
    base = quiet_batch()
    assert not nothing_to_plan(snap(*base, waiting(9, t_arr=NOW)), cap(30)), "a waiting request"
    unsynced = running(9, tokens=2 * BS, synced=1, t_arr=NOW)
    assert not nothing_to_plan(snap(*base, unsynced), cap(30)), "a full block without a host copy"
    growing = [running(i, tokens=BS * (i + 1), synced=i + 1) for i in range(3)]  # each needs a new block
    assert nothing_to_plan(snap(*growing), cap(3))
    assert not nothing_to_plan(snap(*growing), cap(2)), "the step's growth does not fit"
    busy = running(9, tokens=BS - 1, busy=True)
    assert not nothing_to_plan(snap(*base, busy), cap(30)), "a transfer in flight"


@st.composite
def near_quiet_states(draw):
    """Synced running batches (some at a block boundary, so they grow this step) with at most one
    disturbance (an unsynced full block, a waiting request, a busy row, too few free blocks), and params
    over their bounds."""
    disturb = draw(st.sampled_from(["none", "none", "unsynced", "waiting", "busy", "tight"]))
    reqs = []
    for i in range(draw(st.integers(0, 12))):
        computed = draw(st.one_of(st.integers(1, 6 * BS), st.integers(1, 6).map(lambda k: k * BS)))
        prefill = draw(st.sampled_from([0, 0, 0, draw(st.integers(1, 2 * BS))]))
        reqs.append(running(i, tokens=computed, synced=computed // BS, prefill_left=prefill, tenant=i % 2,
                            t_arr=draw(st.floats(NOW - 60, NOW)), t_run=draw(st.floats(NOW - 60, NOW)),
                            residency=draw(st.integers(0, 10)), rotations=draw(st.integers(0, 5)),
                            outputs=draw(st.integers(0, 50)), t_first=NOW - 1.0))
    if reqs and disturb == "unsynced":
        r = reqs[draw(st.integers(0, len(reqs) - 1))]
        r.synced = r.blocks_dram = max(0, r.num_computed // BS - 1)
    if reqs and disturb == "busy":
        reqs[draw(st.integers(0, len(reqs) - 1))].busy = True
    if disturb == "waiting":
        reqs.append(waiting(100, prompt=draw(st.integers(1, 4 * BS)), t_arr=NOW - draw(st.floats(0, 30))))
    need = sum(max(0, -(-r.num_tokens // BS) - r.blocks_hbm) for r in reqs)
    free = max(0, need - draw(st.integers(1, 3))) if disturb == "tight" else need + draw(st.integers(0, 6))
    held = sum(r.blocks_hbm for r in reqs)
    c = cap(free, hbm=held + free + 1, b_xfer=draw(st.integers(0, 12)), tokens=draw(st.integers(64, 600)),
            seqs=draw(st.integers(13, 64)), dram=draw(st.integers(0, 60)))
    return snap(*reqs), c, draw(knobs())


@settings(max_examples=300, deadline=None)
@given(near_quiet_states())
def test_when_nothing_to_plan_every_policy_only_serves_the_batch(state) -> None:
    s, c, params = state
    if not nothing_to_plan(s, c):
        return
    running_ids = set(s.req_id[s.phase == Phase.RUNNING].tolist())
    for name, policy in POLICIES.items():
        p = policy.plan(s, c, params, TENANTS, NOW)
        assert p.victim_ids.shape[0] == 0, f"{name}: a victim"
        assert p.sync_ids.shape[0] == 0, f"{name}: an eager sync"
        assert p.swap_ids.shape[0] == 0, f"{name}: a swap-in"
        assert set(p.sched_ids.tolist()) <= running_ids, f"{name}: an admission"
        if name in ("lvf", "lvf-paper"):
            assert p.fcfs_fallback, f"{name}: not its everything-fits path"


def test_the_property_is_not_vacuous() -> None:
    """The generator reaches both answers on batches of three or more, so the property above is exercised."""
    from hypothesis import find

    quiet = find(near_quiet_states(), lambda x: nothing_to_plan(x[0], x[1]) and len(x[0]) >= 3)
    busy = find(near_quiet_states(), lambda x: not nothing_to_plan(x[0], x[1]) and len(x[0]) >= 3)
    assert len(quiet[0]) >= 3 and len(busy[0]) >= 3
    assert np.all(quiet[0].phase == Phase.RUNNING)


# ---- requests wait, but nothing can be admitted: the plan only serves the batch -------------------------
@st.composite
def blocked_states(draw):
    """Synced running decodes and a few waiting or parked requests, often too big for the free blocks, with
    params over their bounds (so discretionary victims are sometimes allowed)."""
    from tests.core.builders import rotary

    reqs = []
    n_run = draw(st.integers(1, 6))
    for i in range(n_run):
        tokens = draw(st.integers(1, 6 * BS))
        reqs.append(running(i, tokens=tokens, synced=tokens // BS - draw(st.sampled_from([0, 0, 0, 1])) if tokens >= BS else 0,
                            tenant=i % 2, t_arr=NOW - draw(st.floats(1, 60)), t_run=NOW - draw(st.floats(0, 30)),
                            residency=draw(st.integers(0, 10)), rotations=draw(st.integers(0, 5)),
                            outputs=draw(st.integers(1, 80)), t_first=NOW - draw(st.floats(0.5, 40)),
                            prefill_left=draw(st.sampled_from([0, 0, 0, 0, 5]))))
    for j in range(draw(st.integers(1, 4))):
        rid = 100 + j
        if draw(st.booleans()):
            reqs.append(waiting(rid, prompt=draw(st.integers(1, 10 * BS)), t_arr=NOW - draw(st.floats(0, 20)), tenant=j % 2))
        else:
            reqs.append(rotary(rid, tokens=draw(st.integers(1, 10 * BS)), t_arr=NOW - draw(st.floats(1, 60)),
                               t_last=NOW - draw(st.floats(0, 5)), outputs=draw(st.integers(1, 50)),
                               t_first=NOW - draw(st.floats(0.5, 40)), tenant=j % 2))
    held = sum(r.blocks_hbm for r in reqs)
    free = draw(st.integers(0, 12))
    biggest = max(-(-r.num_tokens // BS) for r in reqs)  # a valid state: every request fits an empty device
    c = cap(free, hbm=max(held + free + 1, biggest), b_xfer=draw(st.integers(0, 12)), tokens=draw(st.integers(1, 600)),
            seqs=draw(st.integers(8, 64)), dram=draw(st.integers(0, 400)))
    return snap(*reqs), c, draw(knobs())


@settings(max_examples=400, deadline=None)
@given(blocked_states())
def test_when_only_the_batch_can_be_served_the_plan_does_nothing_else(state) -> None:
    s, c, params = state
    running_ids = set(s.req_id[s.phase == Phase.RUNNING].tolist())
    for name, policy in POLICIES.items():
        if not policy.only_serves_batch(s, c, params, TENANTS, NOW):
            continue
        p = policy.plan(s, c, params, TENANTS, NOW)
        assert p.victim_ids.shape[0] == 0, f"{name}: a victim"
        assert p.sync_ids.shape[0] == 0, f"{name}: an eager sync"
        assert p.swap_ids.shape[0] == 0, f"{name}: a swap-in"
        assert set(p.sched_ids.tolist()) <= running_ids, f"{name}: an admission"


def test_only_serves_batch_is_reached_and_refused() -> None:
    """Both answers occur for lvf over the generator, so the property above is exercised."""
    from hypothesis import find

    lvf = POLICIES["lvf"]
    yes = find(blocked_states(), lambda x: lvf.only_serves_batch(x[0], x[1], x[2], TENANTS, NOW))
    no = find(blocked_states(), lambda x: len(x[0]) >= 3 and not lvf.only_serves_batch(x[0], x[1], x[2], TENANTS, NOW))
    assert np.any(yes[0].phase != Phase.RUNNING) and len(no[0]) >= 3
