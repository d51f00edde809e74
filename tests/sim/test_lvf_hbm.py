"""``lvf-hbm`` on the twin (issue 27): RotaSched v2 with no host tier. It is ``lvf`` with a zero DRAM pool,
decision for decision, and under KV pressure the gap between the two is what rotation adds."""

from __future__ import annotations

from dataclasses import replace

from superinfer.core import Params, TenantTable, core_policy_name
from superinfer.sim.run import RunSpec, run_one

REASONING = RunSpec(policy="lvf", rps=4.0, seed=1, workload="reasoning", arrival="poisson", duration_s=60.0,
                    model="qwen2.5-32b", hardware="gh200", block_size=16, max_num_seqs=256,
                    max_num_batched_tokens=8192, b_xfer=None, params=Params(), tenants=TenantTable(), drain_s=120.0)
KEYS = ("slo_attainment", "ttft_attainment", "tbt_attainment", "throughput_tok_s", "preemptions",
        "recompute_fallbacks")


def test_lvf_hbm_is_lvf_without_a_host_tier() -> None:
    assert core_policy_name("lvf-hbm") == "lvf"
    hbm = run_one(replace(REASONING, policy="lvf-hbm"))
    zero = run_one(replace(REASONING, dram_blocks=0))
    assert hbm["rotations"] == 0 and {k: hbm[k] for k in KEYS} == {k: zero[k] for k in KEYS}


def test_where_memory_binds_rotation_is_what_lvf_adds() -> None:
    spec = replace(REASONING, duration_s=90.0)
    lvf, hbm = run_one(spec), run_one(replace(spec, policy="lvf-hbm"))
    assert lvf["rotations"] > 0 and hbm["preemptions"] > 0
    assert lvf["slo_attainment"] > hbm["slo_attainment"]
