"""``superinferd bench overhead`` against the real vLLM engine on CPU: a step splits into device work (forward,
logits, sampler) and host work, and the host's share grows with the batch as a line."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from superinfer.bench.costmodel.files import CpuRow, ProfileError
from superinfer.bench.costmodel.fit import fit_cpu, fit_line
from superinfer.bench.engine.overhead import bench_overhead, summarise


def test_every_decode_step_splits_into_device_and_host_work_and_the_host_grows_with_the_batch(tmp_path):
    out = tmp_path / "host.json"
    r = CliRunner().invoke(bench_overhead, ["--build-tiny", str(tmp_path / "m"), "--batch-sizes", "1,96",
                                            "--steps", "8", "--repeats", "1", "--json", str(out)])
    assert r.exit_code == 0, r.output
    res = json.loads(out.read_text())
    assert res["engine"].startswith("vllm") and [row["batch"] for row in res["rows"]] == [1, 96]
    for row in res["rows"]:
        assert row["steps"] >= 5  # 8 decode steps, the first of each generate is its prefill
        assert 0 < row["device_ms_p50"] < row["step_ms_p50"] and 0 < row["host_ms_p50"] < row["step_ms_p50"]
    one, many = res["rows"]
    assert many["host_ms_p50"] > one["host_ms_p50"], "96 sequences cost the host no more than one"
    fit = res["fit"]
    assert fit["per_seq_s"] > 0 and fit["base_s"] + 96 * fit["per_seq_s"] == pytest.approx(
        many["host_ms_p50"] * 1e-3, rel=1e-6)
    assert "host =" in r.output and "us x batch" in r.output


@pytest.mark.parametrize("sizes", ["8", "0,8", "a,b", "4,4"])
def test_batch_sizes_need_two_distinct_positive_integers(tmp_path, sizes):
    r = CliRunner().invoke(bench_overhead, ["--build-tiny", str(tmp_path / "m"), "--batch-sizes", sizes])
    assert r.exit_code == 2 and "--batch-sizes" in r.output


def test_one_model_source_is_required(tmp_path):
    r = CliRunner().invoke(bench_overhead, [])
    assert r.exit_code == 2 and "exactly one of --model DIR or --build-tiny DIR" in r.output


def test_the_fit_is_least_squares_clipped_at_zero_and_medians_per_batch():
    assert fit_line([(1, 1.0), (3, 2.0), (5, 3.0)]) == pytest.approx((0.5, 0.5))
    assert fit_line([(1, 2.0), (9, 1.0)])[1] == 0.0  # a falling host time is not a negative cost
    with pytest.raises(ValueError, match="two batch sizes"):
        fit_line([(4, 1.0), (4, 2.0)])
    one_batch = [CpuRow("a100", "m", 8, 1, 1.0, "cpu_overheads.csv:2"), CpuRow("a100", "m", 8, 1, 1.2, "cpu_overheads.csv:3")]
    with pytest.raises(ProfileError, match=r"cpu a100/tp1: a line needs at least two batch sizes \(cpu_overheads.csv:2\)"):
        fit_cpu(one_batch)
    s = summarise({1: [(2e-3, 1e-3), (4e-3, 1e-3), (3e-3, 1e-3)], 10: [(6e-3, 2e-3)] * 3})
    assert [row["host_ms_p50"] for row in s["rows"]] == [2.0, 4.0]
    assert s["fit"]["per_seq_s"] == pytest.approx(2e-3 / 9)
