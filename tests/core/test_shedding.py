"""First-token deadlines (issue 28, the core and the twin): a request still without a first token at its
tenant's ``max_queue_s`` is shed, wherever it is and whatever it holds; nothing else is; nothing is lost;
every policy is held to the same deadline; shed requests are misses in every attainment."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from superinfer.core import EngineState, Params, Tenant, TenantTable, get_policy
from superinfer.core.policies import POLICIES
from superinfer.sim.run import RunSpec, run_one
from tests.core.builders import BS

DEADLINES = TenantTable([Tenant("fast", 1.0, 0.1, max_queue_s=4.0), Tenant("patient", 5.0, 0.1)])


def test_a_tenant_without_a_deadline_is_never_shed_and_bad_deadlines_are_refused() -> None:
    assert math.isinf(Tenant().max_queue_s)
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="max_queue_s must be > 0"):
            Tenant("x", max_queue_s=bad)
    state = EngineState(hbm_blocks=64, dram_blocks=0, block_size=BS)
    state.admit(0, 0.0, 8, 4, tenant=0)
    state.admit(1, 0.0, 8, 4, tenant=1)
    assert state.shed_expired(3.9, DEADLINES.max_queue_s) == []
    assert state.shed_expired(1000.0, DEADLINES.max_queue_s) == [0]  # "patient" has no deadline
    assert state.counters.shed == 1 and len(state) == 1
    state.check()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(sorted(POLICIES)), st.integers(0, 2**31 - 1), st.integers(24, 80), st.integers(0, 300))
def test_random_runs_shed_only_late_requests_without_a_first_token(name: str, seed: int, hbm: int, dram: int) -> None:
    """Overloaded random runs with deadlines: every shed request had no first token and had waited past its
    deadline; the ledger and table agree after every shed; nothing is lost (finished + shed == arrived)."""
    rng = np.random.default_rng(seed)
    state = EngineState(hbm_blocks=hbm, dram_blocks=dram, block_size=BS)
    policy, params = get_policy(name), Params(min_residency=2, max_rotations=3)
    arrived_at: dict[int, tuple[float, int]] = {}
    now, rid = 0.0, 0
    for it in range(5000):
        if it < 200:
            for _ in range(rng.poisson(1.5)):  # more than the engine serves: queues build
                tenant = int(rng.integers(0, 2))
                if state.admit(rid, now, int(rng.integers(1, 6 * BS)), int(rng.integers(1, 3 * BS)), tenant=tenant):
                    arrived_at[rid] = (now, tenant)
                rid += 1
        elif len(state) == 0:
            break
        first_token = {int(k) for k, r in zip(state.req_id[state.live_rows()], state.live_rows()) if state.outputs[r] > 0}
        for shed in state.shed_expired(now, DEADLINES.max_queue_s):
            t_arr, tenant = arrived_at[shed]
            assert shed not in first_token and now - t_arr > DEADLINES.max_queue_s[tenant]
        state.check()
        p = policy.plan(state.snapshot(), state.capacity(b_xfer=8, token_budget=64, max_num_seqs=8), params,
                        DEADLINES, now)
        state.apply(p, now, lossless_victims=name in ("lvf", "lvf-paper"))
        now += 0.05
        state.complete_transfers(now)
        state.advance(p, now)
        state.check()
    c = state.counters
    assert len(state) == 0 and c.arrived == c.finished + c.rejected + c.shed and c.shed_with_kv <= c.shed


REASONING = RunSpec(policy="lvf", rps=5.0, seed=1, workload="reasoning", arrival="poisson", duration_s=90.0,
                    model="qwen2.5-32b", hardware="gh200", block_size=16, max_num_seqs=256,
                    max_num_batched_tokens=8192, b_xfer=None, params=Params(),
                    tenants=TenantTable([Tenant("default", 10.0, 0.1, max_queue_s=40.0)]), drain_s=3000.0)


@pytest.mark.parametrize("policy", ["vllm", "sarathi", "lvf"])
def test_the_twin_bounds_every_wait_and_counts_the_shed_as_misses(policy: str) -> None:
    r = run_one(replace(REASONING, policy=policy))
    assert r["shed"] > 0, "5 req/s of reasoning traffic is past every policy's knee"
    assert r["served_ttft_p99_s"] <= 40.0 + 10.0  # deadline + TTFT SLO (the bound)
    assert r["ttft_p99_s"] <= 40.0 + 10.0  # shed requests are censored at their deadline, not left waiting
    assert r["arrived"] == r["finished"] + r["rejected"] + r["shed"]  # the drain finished the rest
    assert r["slo_attainment"] <= 1.0 - r["shed_share"] + 1e-12  # every shed request is a miss


def test_without_deadlines_the_twin_is_unchanged() -> None:
    base = replace(REASONING, tenants=TenantTable([Tenant("default", 10.0, 0.1)]), duration_s=60.0)
    r = run_one(base)
    assert r["shed"] == 0 and r["shed_with_kv"] == 0
    again = run_one(replace(base, tenants=TenantTable([Tenant("default", 10.0, 0.1, max_queue_s=1e9)])))
    assert {k: again[k] for k in ("slo_attainment", "ttft_p99_s", "throughput_tok_s", "rotations")} == \
        {k: r[k] for k in ("slo_attainment", "ttft_p99_s", "throughput_tok_s", "rotations")}


def test_shedding_at_admission_refuses_at_arrival_and_keeps_every_bound() -> None:
    """With ``shed_at_admission`` the twin refuses at arrival what the measured queue says cannot start by its
    deadline (shed the moment it arrived); nothing is lost, the bound holds, and it only adds to the shed."""
    spec = replace(REASONING, policy="vllm", rps=6.0, duration_s=60.0)  # stock vLLM far past its knee
    deadline_only, early = run_one(spec), run_one(replace(spec, shed_at_admission=True))
    assert deadline_only["shed_predicted"] == 0
    assert 0 < early["shed_predicted"] <= early["shed"]
    assert early["arrived"] == early["finished"] + early["rejected"] + early["shed"]
    assert early["served_ttft_p99_s"] <= 40.0 + 10.0
    # refused at once, so the censored TTFT of the shed falls: its p99 over all requests is no worse
    assert early["ttft_p99_s"] <= deadline_only["ttft_p99_s"] + 1e-9
