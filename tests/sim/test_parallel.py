"""The parallel cost model of the twin (issue 14), against hand-computed cases.

Collectives follow NCCL's tuning model (superinfer.sim.fabric); shards follow vLLM's tensor-parallel split;
pipeline stages follow vLLM's ``get_pp_indices``. Every expected number below is worked out by hand from
the datasheet figures in the fabric and the model's config.json shapes.
"""

from __future__ import annotations

import pytest

from superinfer.sim.costmodel import CostModel
from superinfer.sim.fabric import (
    LINK_EFFICIENCY,
    NDR_IB,
    NVLINK4,
    PCIE5,
    allgather_s,
    allreduce_s,
    get_fabric,
    send_s,
)
from superinfer.sim.hardware import get_hardware
from superinfer.sim.layout import Layout, layout_problems, stage_layers
from superinfer.sim.models import BF16_BYTES, get_model
from superinfer.sim.parallel import ParallelCostModel, feasibility, rank_shard, stage_params

L70 = get_model("llama-3-70b")
GH200, H100 = get_hardware("gh200"), get_hardware("h100-pcie")
MIB4 = 4 * 1024 * 1024


# ---- collectives ---------------------------------------------------------------------------------------
def test_allreduce_two_gpus_nvlink_hand_computed() -> None:
    # 2 ranks: 2 steps, algbw = busbw = 450 GB/s x 0.8 = 360 GB/s. Simple: 8.4 + 2 x 3.4 = 15.2 us + S/360 GB/s;
    # LL: 3.6 + 2 x 0.47 = 4.54 us + S/(360/4 GB/s). 4 MiB: Simple 15.2 + 11.65 = 26.85 us < LL 51.14 us.
    assert LINK_EFFICIENCY == 0.8
    assert allreduce_s(MIB4, 2, NVLINK4) == pytest.approx(15.2e-6 + MIB4 / 360e9)
    # 16 KiB: LL wins, 4.54 us + 16384 / 90 GB/s
    assert allreduce_s(16384, 2, NVLINK4) == pytest.approx(4.54e-6 + 16384 / 90e9)


def test_allreduce_four_gpus_pcie_hand_computed() -> None:
    # 4 ranks: 6 steps, algbw = busbw x 4/6 = 63 x 0.8 x 2/3 = 33.6 GB/s; Simple latency 8.4 + 6 x 5.7 = 42.6 us.
    assert allreduce_s(MIB4, 4, PCIE5) == pytest.approx(42.6e-6 + MIB4 / 33.6e9)


def test_allreduce_time_grows_with_tokens_and_vanishes_on_one_rank() -> None:
    hidden = L70.hidden
    times = [allreduce_s(t * hidden * BF16_BYTES, 2, NVLINK4) for t in (1, 16, 256, 4096, 16384)]
    assert all(a < b for a, b in zip(times, times[1:]))
    assert allreduce_s(1 << 30, 1, NVLINK4) == 0.0
    assert allreduce_s(MIB4, 2, NDR_IB) > allreduce_s(MIB4, 2, PCIE5) > allreduce_s(MIB4, 2, NVLINK4)


def test_send_and_allgather_hand_computed() -> None:
    # one step, Simple: 8.4 + 3.4 = 11.8 us + S/360 GB/s (LL: 4.07 us + S/120 GB/s loses at 4 MiB)
    assert send_s(MIB4, NVLINK4) == pytest.approx(11.8e-6 + MIB4 / 360e9)
    # all-gather over 2: 1 step, algbw = busbw x 2 -> 11.8 us + S/720 GB/s
    assert allgather_s(MIB4, 2, NVLINK4) == pytest.approx(11.8e-6 + MIB4 / 720e9)


def test_fabric_tiers_pick_the_slowest_link_a_group_spans() -> None:
    bridge = get_fabric("h100-pcie", "nvlink-bridge")
    assert bridge.link_for_group(0, 2).kind == "nvlink"  # a bridged pair
    assert bridge.link_for_group(2, 2).kind == "nvlink"
    assert bridge.link_for_group(1, 2).kind == "pcie"  # ranks 1 and 2 sit on different bridges
    assert bridge.link_for_group(0, 4).kind == "pcie"
    assert bridge.link_for_group(6, 4).kind == "net"  # ranks 6..9 span two 8-GPU hosts
    nvl2 = get_fabric("gh200")
    assert nvl2.name == "nvl2" and nvl2.link_for_group(0, 2) is NVLINK4 and nvl2.link_for_group(0, 4) is NDR_IB
    assert get_fabric("h100-pcie").link_for_group(0, 8) is PCIE5
    with pytest.raises(ValueError, match="nvlink-bridge, pcie"):
        get_fabric("h100-pcie", "infiniband")


# ---- shards and stages ---------------------------------------------------------------------------------
def test_tp2_halves_per_rank_weights_and_kv_per_token() -> None:
    shard = rank_shard(L70, 2)
    assert shard.kv_bytes_per_token * 2 == L70.kv_bytes_per_token == 327680
    # everything is split in two except the norms (2 per layer + the final one), which every rank keeps
    norms = (2 * L70.layers + 1) * L70.hidden
    assert shard.total_params == (L70.total_params + norms) // 2
    assert shard.total_params * 2 == pytest.approx(L70.total_params, rel=1e-4)


def test_kv_heads_are_replicated_past_their_count() -> None:
    # 8 KV heads: TP=8 gives one per rank, TP=16 still one (replicated twice), as vLLM does
    assert rank_shard(L70, 8).kv_heads == 1 and rank_shard(L70, 16).kv_heads == 1
    assert rank_shard(L70, 16).kv_bytes_per_token == rank_shard(L70, 8).kv_bytes_per_token


def test_layout_problems_name_the_key_and_the_shape() -> None:
    msg = layout_problems(3, 1, heads=64, kv_heads=8, layers=80)
    assert msg and "tensor_parallel_size 3" in msg[0] and "64 attention heads" in msg[0]
    assert layout_problems(2, 200, heads=64, kv_heads=8, layers=80) == [
        "pipeline_parallel_size 200 exceeds the model's 80 layers"]
    assert layout_problems(8, 4, heads=64, kv_heads=8, layers=80, intermediate=28672) == []
    with pytest.raises(ValueError, match="tp: expected an integer >= 1"):
        Layout(0, 1)


def test_stage_layers_follow_vllm_get_pp_indices() -> None:
    assert stage_layers(80, 4) == [20, 20, 20, 20]
    assert stage_layers(80, 3) == [27, 27, 26]  # the remainder goes to the stages before the last
    assert stage_layers(5, 2) == [3, 2]
    assert stage_layers(7, 4) == [2, 2, 2, 1]
    with pytest.raises(ValueError):
        stage_layers(2, 3)


def test_stage_params_sum_to_the_model_with_embedding_first_and_head_last() -> None:
    parts = stage_params(L70, 2)
    assert sum(parts) == L70.total_params
    assert parts[0] - parts[1] == L70.embedding_params - L70.lm_head_params - L70.hidden


# ---- the cost model ------------------------------------------------------------------------------------
ARGS = [(0, 0.0, 1, 512), (512, 512 * 513 / 2, 64, 64 * 1024), (8192, 8192 * 8193 / 2, 0, 0)]


@pytest.mark.parametrize("args", ARGS)
def test_one_gpu_layout_is_the_base_cost_model(args: tuple) -> None:
    m, hw = get_model("llama-3-8b"), GH200
    base, par = CostModel(m, hw, 16), ParallelCostModel(m, hw, 16, Layout(1, 1))
    assert par.iteration_s(*args) == base.iteration_s(*args)
    assert par.block_bytes == base.block_bytes and par.hbm_kv_blocks() == base.hbm_kv_blocks()
    assert par.transfer_s(10, 7) == base.transfer_s(10, 7)


@pytest.mark.parametrize("args", ARGS)
def test_tp2_iteration_is_one_ranks_shard_plus_the_collectives(args: tuple) -> None:
    pre, _, dec, _ = args
    par = ParallelCostModel(L70, GH200, 16, Layout(2, 1))
    shard = CostModel(rank_shard(L70, 2), GH200, 16)
    tokens, seqs = pre + dec, dec + (1 if pre else 0)
    comm = ((2 * 80 + 1) * allreduce_s(tokens * 8192 * 2, 2, NVLINK4)
            + allgather_s(seqs * L70.vocab * 2, 2, NVLINK4))
    assert par.iteration_s(*args) == pytest.approx(shard.iteration_s(*args) + comm)
    assert par.comm(tokens, seqs).pp_s == 0.0


def test_pp2_iteration_is_the_whole_model_plus_one_hop_and_kv_per_rank_halves() -> None:
    m = get_model("llama-3-8b")
    base, par = CostModel(m, GH200, 16), ParallelCostModel(m, GH200, 16, Layout(1, 2))
    args = (512, 512 * 513 / 2, 64, 64 * 1024)
    # hidden states + residual of 576 tokens cross one NVLink hop (the NVL2 pair)
    assert par.iteration_s(*args) == pytest.approx(base.iteration_s(*args) + send_s(2 * 576 * 4096 * 2, NVLINK4))
    assert par.block_bytes * 2 == base.block_bytes  # 16 of 32 layers per rank
    # half the bytes per block over half the link (two micro-batch engines share it): same seconds per block
    assert par.transfer_s(10, 0) == pytest.approx(base.transfer_s(10, 0))
    assert par.hbm_kv_blocks() > 2 * base.hbm_kv_blocks()  # half the weights too


def test_tp_over_pcie_costs_more_than_over_nvlink() -> None:
    bridge = ParallelCostModel(L70, H100, 16, Layout(2, 2), get_fabric("h100-pcie", "nvlink-bridge"))
    pcie = ParallelCostModel(L70, H100, 16, Layout(2, 2))
    assert bridge.comm(256, 256).tp_s < pcie.comm(256, 256).tp_s


def test_weights_that_do_not_fit_are_infeasible_with_the_reason() -> None:
    why = feasibility(L70, H100, Layout(1, 1))
    assert why is not None and why.startswith("weights do not fit") and "141.1 GB" in why
    assert feasibility(L70, H100, Layout(2, 1)) is not None  # 70.6 GB + reserve > 72 GB usable
    assert feasibility(L70, H100, Layout(4, 1)) is None
    assert feasibility(L70, GH200, Layout(2, 1)) is None  # the paper's GH200 NVL2 at TP=2
    assert "attention heads" in feasibility(L70, GH200, Layout(3, 1))
    with pytest.raises(ValueError, match="weights do not fit"):
        ParallelCostModel(L70, H100, 16, Layout(1, 1)).hbm_kv_blocks()


def test_qwen_72b_profile_is_there_and_needs_two_gh200() -> None:
    q = get_model("qwen2.5-72b")
    assert q.kv_bytes_per_token == 327680
    assert feasibility(q, GH200, Layout(1, 1)) is not None and feasibility(q, GH200, Layout(2, 1)) is None
