"""The twin's one cost-model builder (superinfer.sim.build) and one run collector (superinfer.sim.collect)."""

from __future__ import annotations

import numpy as np
import pytest

from superinfer.sim.build import build_cost_model, overlaps
from superinfer.sim.collect import Collector
from superinfer.sim.costmodel import CostModel
from superinfer.sim.engine import SimConfig, Simulator
from superinfer.sim.grounded import gpu_cost_terms
from superinfer.sim.hardware import get_hardware
from superinfer.sim.layout import Layout
from superinfer.sim.models import get_model
from superinfer.sim.parallel import ParallelCostModel
from superinfer.sim.workload import Workload, load_workload

L8, GH200 = get_model("llama-3-8b"), get_hardware("gh200")


def prices(cm: CostModel) -> tuple[float, ...]:
    return (cm.iteration_s(512, 512 * 513 // 2, 64, 64 * 1024), cm.iteration_s(0, 0.0, 8, 8 * 4096),
            cm.block_bytes, cm.hbm_kv_blocks(8192), cm.dram_blocks())


@pytest.mark.parametrize("gpu_costs", ["datasheet", "grounded"])
@pytest.mark.parametrize("overlap", [True, False])
def test_the_builder_prices_as_the_cost_model_built_by_hand(gpu_costs: str, overlap: bool) -> None:
    terms, cpu_line = gpu_cost_terms(gpu_costs)
    hand = CostModel(L8, GH200, 16, overlap=overlap, duplex=overlap, gpu_terms=terms, cpu_line=cpu_line)
    built = build_cost_model("llama-3-8b", "gh200", 16, gpu_costs=gpu_costs, overlap=overlap)
    assert type(built) is CostModel and prices(built) == prices(hand)
    assert built.transfer_s(7, 3) == hand.transfer_s(7, 3)


def test_the_builder_builds_a_parallel_layout_and_refuses_a_calibrated_one() -> None:
    hand = ParallelCostModel(get_model("llama-3-70b"), get_hardware("h100-pcie"), 16, Layout(4, 2))
    built = build_cost_model("llama-3-70b", "h100-pcie", 16, layout=Layout(4, 2))
    assert type(built) is ParallelCostModel and prices(built) == prices(hand)
    with pytest.raises(ValueError, match="calibration"):
        build_cost_model("llama-3-70b", "h100-pcie", 16, layout=Layout(4, 2), calibration=object())  # type: ignore[arg-type]
    assert overlaps("lvf") and not overlaps("lvf-nooverlap")


def test_the_collector_of_an_empty_run_is_an_empty_trace() -> None:
    empty = Workload(arrival_s=np.zeros(0), prompt_tokens=np.zeros(0, np.int64), output_tokens=np.zeros(0, np.int64),
                     tenant_ids=np.zeros(0, np.int32), source="test")
    sim = Simulator(empty, CostModel(L8, GH200, 16), SimConfig(policy="lvf"))
    tr = sim.run()
    assert tr.iterations == 0 and tr.window_tokens == 0 and tr.t_first.shape == (0,) and tr.t_shed is not None
    col = Collector(empty, 5.0)
    assert col.window_end == 0.0 and col.deadline == 5.0
    assert col.trace([sim], sim_s=0.0, wall_s=0.0).t_shed is None  # only a shedding loop records sheds


def test_window_tokens_count_the_iterations_begun_in_the_window() -> None:
    w = load_workload("chat", arrival="poisson", rps=20.0, duration_s=5.0, seed=0, max_len=L8.max_model_len)
    tr = Simulator(w, CostModel(L8, GH200, 16), SimConfig(policy="vllm", drain_s=60.0)).run()
    assert 0 < tr.window_tokens < int(tr.outputs.sum())  # the drain produced the rest
    assert np.all(np.isfinite(tr.t_end))  # all finished in the drain
