"""The operator profiler: what a row means, its fused kernels against torch, the files it writes."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from superinfer.sim.layerops import GEMMS, OPS, LayerShard, column, header, shard_of_model
from superinfer.cli import main
from superinfer.sim.models import get_model

ROOT = Path(__file__).resolve().parents[2]


def shard(tp: int = 1, tokens: int = 16, **kw) -> LayerShard:
    base = dict(n_head=64, n_kv_head=8, n_embd=8192, n_expanded_embd=28672, vocab_size=128256, gated=True)
    base.update(kw)
    return LayerShard(tp=tp, tokens=tokens, **base)


def test_a_tp_shard_splits_heads_intermediate_and_vocab_but_replicates_kv_heads_past_their_count():
    s = shard(tp=8)
    assert s.gemm("attn_pre_proj") == (16, (8 + 2 * 1) * 128, 8192)
    assert s.gemm("attn_post_proj") == (16, 8192, 8 * 128)
    assert s.gemm("mlp_up_proj") == (16, 2 * 3584, 8192)
    assert s.gemm("mlp_down_proj") == (16, 8192, 3584)
    assert shard(tp=16, n_head=64).kv_heads == 1  # 8 KV heads over 16 ranks: one replicated each
    assert s.vocab == 16032


def test_a_layer_s_gemm_flops_add_up_to_the_model_profile_s_per_layer_matmul_params():
    m = get_model("llama-3-70b")
    per_layer = m.attn_params_per_layer + m.expert_params
    for tp in (1, 2, 4, 8):
        s = shard_of_model(m, tp, 1)
        flops = sum(s.gemm_flops(op) for op in GEMMS)
        assert flops * tp == 2 * per_layer


def test_the_shape_is_checked_with_a_message():
    with pytest.raises(ValueError, match="n_head 64 is not divisible by tp 3"):
        shard(tp=3)
    with pytest.raises(ValueError, match="tokens: expected an integer > 0"):
        shard(tokens=0)


def test_the_fused_triton_kernels_compute_what_the_torch_reference_does():
    code = textwrap.dedent("""
        import torch
        from superinfer.bench.costmodel import kernels
        tri, ref = kernels.TritonOps(), kernels.TorchOps()
        g = torch.Generator().manual_seed(1)
        r = lambda *s: torch.randn(*s, generator=g).to(torch.bfloat16)
        x, w = r(3, 40), r(40)
        a, b = torch.empty(3, 40, dtype=torch.bfloat16), torch.empty(3, 40, dtype=torch.bfloat16)
        tri.rmsnorm(x, w, a); ref.rmsnorm(x, w, b)
        assert torch.allclose(a.float(), b.float(), atol=2e-2, rtol=2e-2), (a, b)
        up = r(3, 2 * 24)
        a, b = torch.empty(3, 24, dtype=torch.bfloat16), torch.empty(3, 24, dtype=torch.bfloat16)
        tri.silu_and_mul(up, a); ref.silu_and_mul(up, b)
        assert torch.allclose(a.float(), b.float(), atol=2e-2, rtol=2e-2)
        cos, sin = kernels.rope_cache(64, 8, "cpu")
        pos = torch.tensor([0, 5, 63])
        qkv = r(3, 4 * 8)  # 2 q heads, 1 k head rotated; 1 v head left alone
        q1, q2 = qkv.clone(), qkv.clone()
        tri.rope(q1, pos, cos, sin, 3, 8); ref.rope(q2, pos, cos, sin, 3, 8)
        assert torch.allclose(q1.float(), q2.float(), atol=2e-2, rtol=2e-2)
        assert torch.equal(q1[:, 24:], qkv[:, 24:]) and not torch.equal(q1[:, 8:16], qkv[:, 8:16])
        a = torch.empty(3, 40, dtype=torch.bfloat16)
        tri.add(x, x, a)
        assert torch.allclose(a.float(), (x + x).float(), atol=1e-2, rtol=1e-2)
        print("ok")
    """)
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-3000:]


def test_opprofile_on_the_cpu_writes_rows_in_the_shipped_profiles_format(tmp_path):
    res = CliRunner().invoke(main, ["bench", "opprofile", "--out", str(tmp_path), "--device", "cpu", "--gpu", "cpu",
                                    "--models", "llama-3-8b", "--tp", "8,3", "--tokens", "2,1", "--trials", "2",
                                    "--attention-points", "decode:2:64,prefill:1:32"])
    assert res.exit_code == 0, res.output
    path = tmp_path / "compute" / "cpu" / "llama-3-8b" / "mlp.csv"
    rows = list(csv.DictReader(path.open()))
    assert list(rows[0]) == header()
    assert [(r["num_tensor_parallel_workers"], r["num_tokens"]) for r in rows] == [("8", "1"), ("8", "2")]
    for r in rows:
        assert all(float(r[column(op)]) > 0 for op in OPS)
        assert float(r[column("attn_pre_proj", "min")]) <= float(r[column("attn_pre_proj", "max")])
    meta = json.loads((tmp_path / "compute" / "cpu" / "meta.json").read_text())
    assert meta["elementwise_impl"] == "torch" and meta["profiled"] == [
        {"model": "llama-3-8b", "tp": 8, "rows": 2, "attention_rows": 2, "seconds": meta["profiled"][0]["seconds"]}]
    attn = list(csv.DictReader((path.parent / "attention.csv").open()))
    assert [(r["phase"], r["batch_size"], r["kv_len"], r["num_tensor_parallel_workers"]) for r in attn] == [
        ("decode", "2", "64", "8"), ("prefill", "1", "32", "8")]
    assert all(float(r[column("attention")]) > 0 for r in attn)


def test_opprofile_refuses_bad_options_with_the_option_named(tmp_path):
    res = CliRunner().invoke(main, ["bench", "opprofile", "--out", str(tmp_path), "--device", "cpu", "--tokens", "a"])
    assert res.exit_code == 2 and "--tokens" in res.output
    res = CliRunner().invoke(main, ["bench", "opprofile", "--out", str(tmp_path), "--device", "cpu", "--models", "gpt-9"])
    assert res.exit_code == 2 and "unknown model 'gpt-9'" in res.output
    res = CliRunner().invoke(main, ["bench", "opprofile", "--out", str(tmp_path), "--device", "cpu",
                                    "--attention-points", "decode:2"])
    assert res.exit_code == 2 and "phase:batch:kv_len" in res.output
