"""Replicas behind a load balancer, and pipeline micro-batch engines, on the twin (superinfer.sim.fleet)."""

from __future__ import annotations

import numpy as np
import pytest

from superinfer.core import TenantTable
from superinfer.sim.costmodel import CostModel
from superinfer.sim.engine import SimConfig, Simulator
from superinfer.sim.fleet import Fleet
from superinfer.sim.hardware import get_hardware
from superinfer.sim.layout import Layout
from superinfer.sim.metrics import run_metrics
from superinfer.sim.models import get_model
from superinfer.sim.parallel import ParallelCostModel
from superinfer.sim.workload import Workload, load_workload

L8, GH200 = get_model("llama-3-8b"), get_hardware("gh200")


def chat(rps: float, duration: float = 20.0, seed: int = 0) -> Workload:
    return load_workload("chat", arrival="poisson", rps=rps, duration_s=duration, seed=seed, max_len=L8.max_model_len)


@pytest.mark.parametrize("policy", ["vllm", "lvf"])
def test_a_one_engine_fleet_is_the_simulator(policy: str) -> None:
    w = chat(30.0, duration=10.0)
    cm = CostModel(L8, GH200, 16)
    cfg = SimConfig(policy=policy, hbm_blocks=1500)  # KV pressure: preemption, rotation
    alone = run_metrics(Simulator(w, cm, cfg).run(), TenantTable(), w.duration_s)
    fleet = run_metrics(Fleet(w, cm, cfg).run(), TenantTable(), w.duration_s)
    assert alone["preemptions"] > 0
    assert {k: v for k, v in fleet.items() if k not in ("wall_s", "sim_per_wall")} == \
        {k: v for k, v in alone.items() if k not in ("wall_s", "sim_per_wall")}


def test_round_robin_deals_requests_in_turn() -> None:
    w = chat(20.0)
    f = Fleet(w, CostModel(L8, GH200, 16), SimConfig(policy="vllm"), replicas=3, balancer="round-robin")
    f.run()
    assert list(f.assigned[:7]) == [0, 1, 2, 0, 1, 2, 0]
    counts = np.bincount(f.assigned, minlength=3)
    assert counts.max() - counts.min() <= 1 and counts.sum() == len(w)


def skewed(n: int = 200, gap_s: float = 0.05) -> Workload:
    """Every other request is long (1,000 output tokens), the rest short (20): round-robin over two
    replicas hands all the long ones to replica 0."""
    out = np.where(np.arange(n) % 2 == 0, 1000, 20)
    return Workload(arrival_s=np.arange(n) * gap_s, prompt_tokens=np.full(n, 200), output_tokens=out,
                    tenant_ids=np.zeros(n, np.int32), duration_s=n * gap_s)


def test_least_loaded_balances_what_round_robin_skews() -> None:
    w = skewed()
    cm, cfg = CostModel(L8, GH200, 16), SimConfig(policy="vllm", hbm_blocks=800)
    tokens = {}
    for balancer in ("round-robin", "least-loaded"):
        f = Fleet(w, cm, cfg, replicas=2, balancer=balancer)
        f.run()
        tokens[balancer] = np.bincount(f.assigned, weights=w.output_tokens, minlength=2)
    assert tokens["round-robin"][0] == 100 * 1000 and tokens["round-robin"][1] == 100 * 20
    lo, hi = sorted(tokens["least-loaded"])
    assert hi / lo < 2  # outstanding-request counts keep most long ones apart (round-robin: 50x)


def test_replicas_split_the_load() -> None:
    w = chat(40.0)
    cm, cfg, tenants = CostModel(L8, GH200, 16), SimConfig(policy="vllm", hbm_blocks=3000), TenantTable()
    one = run_metrics(Fleet(w, cm, cfg).run(), tenants, w.duration_s)
    four = run_metrics(Fleet(w, cm, cfg, replicas=4).run(), tenants, w.duration_s)
    assert one["ttft_attainment"] < 0.6  # one replica with 3,000 blocks (48k tokens) is overloaded at 40 req/s
    assert four["ttft_attainment"] > 0.95 and four["slo_attainment"] > one["slo_attainment"]
    assert four["finished"] == four["arrived"] == one["arrived"]


def test_pipeline_replica_is_pp_micro_batch_engines_sharing_its_pool() -> None:
    w = chat(20.0)
    cm = ParallelCostModel(L8, GH200, 16, Layout(1, 2))
    f = Fleet(w, cm, SimConfig(policy="lvf", max_num_seqs=256), pp=2)
    per_rank = cm.hbm_kv_blocks(8192)
    assert [e.hbm_blocks for e in f.engines] == [per_rank // 2] * 2
    assert [e.cfg.max_num_seqs for e in f.engines] == [128, 128]
    assert [e.dram_blocks for e in f.engines] == [cm.dram_blocks() // 2] * 2
    m = run_metrics(f.run(), TenantTable(), w.duration_s)
    assert set(np.unique(f.assigned)) == {0, 1} and m["finished"] == m["arrived"]


def test_fleet_arguments_are_validated() -> None:
    w, cm = chat(1.0, 2.0), CostModel(L8, GH200, 16)
    with pytest.raises(ValueError, match="balancer"):
        Fleet(w, cm, SimConfig(policy="vllm"), balancer="random")
    with pytest.raises(ValueError, match="replicas"):
        Fleet(w, cm, SimConfig(policy="vllm"), replicas=0)
    with pytest.raises(ValueError, match="cannot be split"):
        Fleet(w, cm, SimConfig(policy="vllm", hbm_blocks=1), pp=2)
