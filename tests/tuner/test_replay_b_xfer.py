"""A tuner's write of ``b_xfer`` reaches the twin's transfer budget from the next iteration, as the
daemon's sim backend applies it; a policy with no host tier has no budget to move."""

from __future__ import annotations

from superinfer.core import Tenant, TenantTable
from superinfer.sim.build import build_cost_model
from superinfer.sim.engine import SimConfig
from superinfer.sim.metrics import run_metrics
from superinfer.sim.workload import load_workload
from superinfer.tuner.offline.evaluate import TwinEnv
from superinfer.tuner.offline.replay import replay

TABLE = TenantTable([Tenant("default", ttft_slo=10.0, tbt_slo=0.1)])


def long_outputs():
    """Reasoning traffic past what HBM holds on the GH200 twin: the host tier is in use."""
    return load_workload("reasoning", rps=3.0, duration_s=120, seed=0, tenants={"default": 1.0})


def rotations(policy: str, schedule=()) -> tuple[int, int, float]:
    """(rotations, most blocks swapped in by one iteration, SLO attainment) of the replay."""
    w = long_outputs()
    cm = build_cost_model("qwen2.5-32b", "gh200", 16)
    res = replay(w, cm, SimConfig(policy=policy, tenants=TABLE, drain_s=30.0, seed=0), schedule=schedule)
    m = run_metrics(res.trace, TABLE, w.duration_s)
    return int(m["rotations"]), int(m["max_swap_in_blocks_per_iter"]), float(m["slo_attainment"])


def test_a_b_xfer_write_changes_the_twins_transfer_budget() -> None:
    moved, most, _ = rotations("lvf")
    assert moved > 0 and most > 64  # the workload needs the host tier, and more than 64 blocks at once
    assert rotations("lvf", [(0.0, {"b_xfer": 0})])[:2] == (0, 0)  # no budget: nothing moves
    fewer, capped, _ = rotations("lvf", [(0.0, {"b_xfer": 64})])
    assert 0 < capped <= 64 and fewer != moved  # the written budget binds every iteration after it


def test_no_host_tier_no_budget_to_tune() -> None:
    assert rotations("lvf-hbm", [(0.0, {"b_xfer": 4})]) == rotations("lvf-hbm")
    assert TwinEnv(policy="lvf-hbm").b_xfer_max() == 0 and TwinEnv(policy="vllm").b_xfer_max() == 0
    assert TwinEnv().b_xfer_max() > 0 and TwinEnv(b_xfer=100).b_xfer_max() == 100


def test_a_setting_with_b_xfer_runs_the_twin_at_that_budget() -> None:
    cfg = TwinEnv().sim_config(TABLE, {"b_xfer": 123.0, "alpha": 2.0}, 0)
    assert cfg.b_xfer == 123 and cfg.params.alpha == 2.0
    assert TwinEnv(b_xfer=50).sim_config(TABLE, {}, 0).b_xfer == 50
