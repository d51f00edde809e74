"""`bench costmodel` and `calibrate --profiles`: the reader's errors, the scores, and fits that hold on
profiles they were not fitted on."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from superinfer.bench.costmodel import fit
from superinfer.bench.costmodel.cli import SHIPPED_PROFILES
from superinfer.bench.costmodel.files import ProfileError, Profiles, read_profiles
from superinfer.sim.layerops import GEMMS
from superinfer.bench.costmodel.score import hardware_for, score
from superinfer.cli import main


@pytest.fixture(scope="module")
def shipped() -> Profiles:
    return read_profiles(SHIPPED_PROFILES)


def only(p: Profiles, *, gpu: str | None = None, models: tuple[str, ...] = (), exclude: bool = False) -> Profiles:
    keep = [r for r in p.compute if (gpu is None or r.gpu == gpu) and ((r.model in models) != exclude or not models)]
    return Profiles(keep, [], [], p.files)


def fitted(p: Profiles) -> fit.Terms:
    return fit.fit(p, hardware_for)


def copy_one(tmp_path: Path, rel: str, mutate=None) -> Path:
    """A profile folder holding one shipped file, optionally with its rows changed."""
    src = SHIPPED_PROFILES / rel
    dst = tmp_path / "prof" / rel
    dst.parent.mkdir(parents=True)
    if mutate is None:
        shutil.copy(src, dst)
    else:
        rows = list(csv.reader(src.open()))
        mutate(rows)
        with dst.open("w", newline="") as f:
            csv.writer(f).writerows(rows)
    return tmp_path / "prof"


# ---- what the files say and how bad input is refused -----------------------------------------------
def test_every_shipped_row_is_read(shipped):
    assert len(shipped.compute) == 1824 + 261 + 1044 + 1044 + 3 * 92
    assert len(shipped.all_reduce) == 4496 + 2982 + 1988 and len(shipped.cpu) == 78
    assert {r.gpu for r in shipped.compute} == {"a100", "h100", "h200"}
    assert len(shipped.attention) == 3 * 4 * 25 and {a.phase for a in shipped.attention} == {"decode", "prefill"}


def test_a_bad_number_is_named_by_file_line_and_column(tmp_path):
    def bad(rows):
        rows[5][rows[0].index("time_stats.mlp_up_proj.median")] = "fast"
    root = copy_one(tmp_path, "compute/h100/llama-2-7b/mlp.csv", bad)
    with pytest.raises(ProfileError, match=r"llama-2-7b/mlp.csv:6: column 'time_stats.mlp_up_proj.median': "
                                           r"expected a number, got 'fast'"):
        read_profiles(root)


def test_an_unknown_file_or_a_missing_column_is_refused_and_the_cli_exits_2(tmp_path):
    def drop_size(rows):
        i = rows[0].index("size")
        for r in rows:
            del r[i]
    root = copy_one(tmp_path, "network/h100_dgx/all_reduce.csv", drop_size)
    with pytest.raises(ProfileError, match=r"all_reduce.csv:1: missing column\(s\) size"):
        read_profiles(root)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "latency.csv").write_text("a,b\n1,2\n")
    res = CliRunner().invoke(main, ["bench", "costmodel", "--profiles", str(tmp_path / "other")])
    assert res.exit_code == 2 and "latency.csv: unknown profile file" in res.output


def test_a_gpu_folder_without_a_hardware_profile_asks_for_hardware(tmp_path):
    root = tmp_path / "p"
    shutil.copytree(SHIPPED_PROFILES / "compute" / "h100" / "llama-2-7b", root / "compute" / "b200" / "llama-2-7b")
    res = CliRunner().invoke(main, ["bench", "costmodel", "--profiles", str(root)])
    assert res.exit_code == 2 and "GPU folder 'b200'" in res.output and "--hardware" in res.output
    res = CliRunner().invoke(main, ["bench", "costmodel", "--profiles", str(root), "--hardware", "h100-sxm", "--json", "-"])
    assert res.exit_code == 0 and json.loads(res.output)["compute"]["rows"] == 1044


# ---- the built-in twin, scored as it is -------------------------------------------------------------
def test_the_built_in_twin_is_scored_per_gpu_model_tp_and_token_band(shipped):
    report = score(shipped)
    c = report["compute"]
    assert c["rows"] == len(shipped.compute) and report["model"] == "built-in"
    keys = {(g["gpu"], g["model"], g["tp"], g["tokens"]) for g in c["groups"]}
    assert ("h100", "llama-2-70b", 8, "64-511") in keys and ("a100", "phi-2", 1, "2048+") in keys
    # it prices no norm, RoPE, activation or add: the layer's error is at least their share
    for g in c["by_model"]:
        assert g["layer_bias_pct"] < g["bias_pct"]
    assert {"below_1MiB", "from_1MiB"} <= set(report["all_reduce"])


# ---- the fit --------------------------------------------------------------------------------------
def test_the_fit_meets_the_targets_on_the_files_it_was_fitted_on(shipped):
    report = score(shipped, terms=fitted(shipped))
    for g in report["compute"]["by_model"]:
        assert g["layer_median_ape_pct"] <= 8 and g["layer_p90_ape_pct"] <= 20, g
        assert g["median_ape_pct"] <= 8 and g["p90_ape_pct"] <= 20, g
    assert report["all_reduce"]["from_1MiB"]["median_ape_pct"] <= 10
    assert report["all_reduce"]["below_1MiB"]["median_ape_pct"] <= 25


@pytest.mark.parametrize("gpu,train,test", [
    ("h100", ("llama-2-70b",), "llama-2-7b"),
    ("a100", ("llama-3-8b",), "phi-2"),
    ("h200", ("llama-3-70b", "qwen2.5-32b"), "llama-3-8b"),
])
def test_a_fit_holds_on_a_model_it_was_not_fitted_on(shipped, gpu, train, test):
    terms = fitted(only(shipped, gpu=gpu, models=train))
    held_out = only(shipped, gpu=gpu, models=(test,))
    g = score(held_out, terms=terms)["compute"]["by_model"][0]
    assert g["model"] == test and g["layer_median_ape_pct"] <= 10 and g["layer_p90_ape_pct"] <= 25, g


def test_fitted_efficiencies_are_physical_shares_of_the_datasheet(shipped):
    """Bytes counted as elements would double the bandwidth share, a whole layer counted for a TP shard
    would multiply FLOP/s by the TP degree: both leave the 0.1-1.1 band or the per-TP error."""
    terms = fitted(shipped)
    for g in terms.gpus.values():
        assert 0.5 <= g.gemm_eff_flops <= 0.95 and 0.6 <= g.gemm_eff_bw <= 1.05, g
        assert 0.3 <= g.elementwise_eff_bw <= 1.0 and g.gemm_fixed_s < 20e-6, g
    by_tp = score(only(shipped, gpu="h100"), terms=terms)["compute"]["groups"]
    for tp in (1, 2, 4, 8):
        errs = [g["median_ape_pct"] for g in by_tp if g["tp"] == tp]
        assert np.median(errs) <= 12, (tp, errs)


def test_measured_attention_is_fitted_and_decode_reads_kv_near_the_hbm_peak(shipped):
    """Decode attention is a read of the KV cache: the fit's bandwidth share sits near 1 (it would double
    with KV counted in elements, or fall by the TP degree with KV heads counted whole)."""
    att = fitted(shipped).attention["h200"]
    assert 0.8 <= att.eff_bw <= 1.05 and 0.3 <= att.eff_flops <= 0.9 and att.fixed_s < 20e-6
    report = score(Profiles([], [], [], [], shipped.attention), terms=fitted(shipped))["attention"]
    decode = next(g for g in report["by_phase"] if g["phase"] == "decode")
    assert decode["median_ape_pct"] <= 8 and decode["p90_ape_pct"] <= 30


def test_times_in_seconds_instead_of_milliseconds_are_caught_by_the_fit(shipped):
    rows = only(shipped, gpu="h100", models=("llama-2-7b",)).compute
    wrong = [type(r)(r.gpu, r.model, r.shard, {k: v / 1e3 for k, v in r.ms.items()}, r.where) for r in rows]
    with pytest.raises(ProfileError, match="milliseconds"):
        fit.fit_gpu(wrong, hardware_for("h100"))


def test_the_sharded_gemm_is_what_a_tp_rank_runs(shipped):
    """At TP 8 a rank's GEMMs do 1/8 of TP 1's FLOPs; the measured times fall with it (large batches)."""
    rows = {(r.shard.tp, r.shard.tokens): r for r in only(shipped, gpu="h200", models=("llama-3-70b",)).compute}
    one, eight = rows[(1, 16384)], rows[(8, 16384)]
    assert sum(one.shard.gemm_flops(op) for op in GEMMS) == 8 * sum(eight.shard.gemm_flops(op) for op in GEMMS)
    ratio = sum(one.ms[op] for op in GEMMS) / sum(eight.ms[op] for op in GEMMS)
    assert 6 <= ratio <= 9


def test_calibrate_profiles_writes_a_terms_file_that_bench_costmodel_scores(tmp_path):
    root = copy_one(tmp_path, "compute/h100/llama-2-70b/mlp.csv")
    out = tmp_path / "terms.json"
    res = CliRunner().invoke(main, ["calibrate", "--profiles", str(root), "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert "h100 (h100-sxm, 1044 rows): GEMMs reach" in res.output
    terms = fit.load(out)
    assert set(terms.gpus) == {"h100"} and terms.gpus["h100"].rows == 1044
    res = CliRunner().invoke(main, ["bench", "costmodel", "--profiles", str(root), "--terms", str(out), "--json", "-"])
    data = json.loads(res.output)
    assert data["model"] == "fitted terms" and data["compute"]["median_ape_pct"] < 8


def test_a_terms_file_with_a_typo_is_refused_with_the_key(tmp_path):
    obj = fit.to_json_dict(fitted(Profiles(read_profiles(SHIPPED_PROFILES / "compute" / "h200").compute, [], [], [])))
    obj["gpus"]["h200"]["gemm_eff_flop"] = obj["gpus"]["h200"].pop("gemm_eff_flops")
    path = tmp_path / "t.json"
    path.write_text(json.dumps(obj))
    with pytest.raises(ValueError, match="gpus.h200: unknown key.*gemm_eff_flop; missing key.*gemm_eff_flops"):
        fit.load(path)
    res = CliRunner().invoke(main, ["bench", "costmodel", "--terms", str(path)])
    assert res.exit_code == 2 and "gemm_eff_flop" in res.output
