"""The grounded twin (``--gpu-costs grounded``): iteration time from GPU terms fitted to measured operators."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from pathlib import Path

from superinfer.cli import main
from superinfer.sim.calibration import load as load_calibration
from superinfer.sim.costmodel import CostModel
from superinfer.sim.grounded import MEASURED_PART, GroundedPricer, shipped_terms, terms_for
from superinfer.sim.hardware import get_hardware
from superinfer.sim.layerops import ELEMENTWISE, GEMMS, shard_of_model
from superinfer.sim.layout import Layout
from superinfer.sim.models import get_model
from superinfer.sim.parallel import ParallelCostModel


CPU_CALIBRATION = str(Path(__file__).resolve().parents[2] / "bench" / "results" / "calibration_tiny_cpu.json")


def grounded(model: str = "qwen2.5-32b", hardware: str = "h200-sxm", tp: int = 1) -> CostModel:
    if tp == 1:
        return CostModel(get_model(model), get_hardware(hardware), 16, gpu_terms=shipped_terms())
    return ParallelCostModel(get_model(model), get_hardware(hardware), 16, Layout(tp, 1), gpu_terms=shipped_terms())


def test_every_hardware_profile_says_which_measured_part_it_takes_its_terms_from():
    terms = shipped_terms()
    for name, part in MEASURED_PART.items():
        hw = get_hardware(name)
        g = terms_for(hw, terms)
        assert g.peak_flops == hw.peak_bf16_flops and g.hbm_bw == hw.hbm_bw
        assert g.gemm_eff_flops == terms.gpus[part].gemm_eff_flops


@pytest.mark.parametrize("tokens", [1, 7, 96, 1000, 4096])
def test_the_tabulated_layer_is_the_fitted_operators_summed(tokens):
    """The hot path's table equals pricing each operator of the shard one by one."""
    m, hw = get_model("llama-3-70b"), get_hardware("h100-sxm")
    pricer = GroundedPricer(m, 4, hw, shipped_terms(), 0.0)
    gpu = terms_for(hw, shipped_terms())
    shard = shard_of_model(m, 4, tokens)
    per_layer = gpu.layer_s(shard, GEMMS + tuple(op for op in ELEMENTWISE if op != "emb"))
    assert pricer.layers_s(np.array([tokens]))[0] == pytest.approx(m.layers * per_layer, rel=1e-9)


def test_a_tp_rank_runs_its_shard_and_decode_is_bandwidth_bound_near_the_measured_share():
    one, four = grounded("llama-3-70b", "h100-sxm"), grounded("llama-3-70b", "h100-sxm", tp=4)
    # a quarter of the weights per rank, plus 2 x 80 + 1 all-reduces at DGX H100's measured ~31 us latency
    assert four.tp_allreduce is not None and 20e-6 < four.tp_allreduce.latency_s < 50e-6
    comm = four.comm(8, 8).tp_s
    assert 161 * four.tp_allreduce.latency_s < comm < 161 * four.tp_allreduce.latency_s + 1e-3
    assert four.iteration_s(0, 0, 8, 8 * 512) - comm < one.iteration_s(0, 0, 8, 8 * 512) / 2.5
    decode = grounded().iteration_s(0, 0, 1, 1)
    weights_s = get_model("qwen2.5-32b").weight_bytes / 4.8e12
    assert weights_s < decode < 1.6 * weights_s + 2e-3


def test_fabrics_without_measurements_keep_nccl_s_model_and_stand_ins_are_stated():
    from superinfer.sim.grounded import link_for
    terms = shipped_terms()
    assert link_for(terms, "h100-pcie", "pcie", 2) is None  # no PCIe-only pair was measured
    assert link_for(terms, "gh200", "nvl2", 2) == terms.all_reduce["h100_dgx/2"]
    assert grounded("llama-3-70b", "h100-pcie", tp=2).tp_allreduce is None


@settings(max_examples=60, deadline=None)
@given(p=st.integers(0, 8192), d=st.integers(0, 256), more=st.integers(1, 512), kv=st.integers(0, 4000))
def test_more_work_never_costs_less(p, d, more, kv):
    cm = grounded()
    base = cm.iteration_s(p, p * (p + 1) / 2, d, d * kv)
    assert cm.iteration_s(p + more, (p + more) * (p + more + 1) / 2, d, d * kv) >= base
    assert cm.iteration_s(p, p * (p + 1) / 2, d, d * (kv + more)) >= base


def test_moe_and_a_calibration_together_with_terms_are_refused():
    with pytest.raises(ValueError, match="mixtral-8x7b: grounded GPU costs have no expert"):
        CostModel(get_model("mixtral-8x7b"), get_hardware("h200-sxm"), 16, gpu_terms=shipped_terms())
    cal = load_calibration(CPU_CALIBRATION)
    with pytest.raises(ValueError, match="not both"):
        CostModel(get_model("llama-3-8b"), get_hardware("gh200"), 16, cal, gpu_terms=shipped_terms())


def test_bench_sim_prices_with_the_grounded_terms_when_asked(tmp_path):
    args = ["bench", "sim", "--model", "llama-3-8b", "--hardware", "h200-sxm", "--workload", "sharegpt",
            "--rps", "20", "--duration", "10", "--seeds", "1", "--policies", "vllm", "--workers", "1", "--json", "-"]
    runs = {}
    for costs in ("datasheet", "grounded"):
        res = CliRunner().invoke(main, args + ["--gpu-costs", costs])
        assert res.exit_code == 0, res.output
        runs[costs] = json.loads(res.output)["runs"][0]
    assert runs["datasheet"]["arrived"] == runs["grounded"]["arrived"]
    assert runs["datasheet"]["ttft_p50_s"] != runs["grounded"]["ttft_p50_s"]
    res = CliRunner().invoke(main, args + ["--gpu-costs", "grounded", "--calibration", CPU_CALIBRATION])
    assert res.exit_code == 2 and "exclude each other" in res.output


def test_long_context_decode_pays_for_reading_its_kv_at_the_measured_attention_bandwidth():
    """On the H200 (attention measured) 64 sequences at 16k context read 64 x 16384 x 256 KiB of KV."""
    cm = grounded()
    short, long = cm.iteration_s(0, 0, 64, 64 * 1024), cm.iteration_s(0, 0, 64, 64 * 16384)
    kv_bytes = 64 * (16384 - 1024) * get_model("qwen2.5-32b").kv_bytes_per_token
    att = shipped_terms().attention["h200"]
    assert long - short == pytest.approx(kv_bytes / (4.8e12 * att.eff_bw), rel=0.02)
