"""``bench vllm --capacity-share``: paired statistics, option parsing, run order, and one short real run."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from superinfer.bench.engine.paired import (paired_difference, paired_ratio, paired_results, parse_pairs,
                                            run_interleaved, run_order)
from superinfer.sim.metrics import t_interval

unit = st.floats(0.0, 1.0, allow_nan=False)
rate = st.floats(1.0, 1e4, allow_nan=False)


def _run(policy: str, seed: int, slo: float, tput: float, share: float | None = 1.0, rps: float = 2.0) -> dict:
    return {"policy": policy, "seed": seed, "share": share, "rps": rps, "slo_attainment": slo,
            "ttft_attainment": slo, "tbt_attainment": 1.0, "throughput_tok_s": tput}


def test_paired_difference_by_hand() -> None:
    # a - b = 10, 20, 30 pp: mean 20, sd 10, t(0.975, 2) = 4.302653 -> half width 4.302653 * 10 / sqrt(3)
    d = paired_difference([0.9, 0.8, 0.7], [0.8, 0.6, 0.4])
    half = 4.302653 * 10 / math.sqrt(3)
    assert d["per_seed_pp"] == pytest.approx([10, 20, 30])
    assert d["mean_pp"] == pytest.approx(20)
    assert d["ci95_pp"] == pytest.approx([20 - half, 20 + half], rel=1e-6)
    r = paired_ratio([110.0, 90.0], [100.0, 100.0])
    assert r["per_seed"] == pytest.approx([1.1, 0.9]) and r["mean"] == pytest.approx(1.0)
    # ratios 1.1, 0.9: mean 1, sd 0.1 sqrt(2), t(0.975, 1) = 12.706205 -> half width 1.2706205
    assert r["ci95"] == pytest.approx([1 - 1.2706205, 1 + 1.2706205], rel=1e-6)


def test_one_seed_has_no_interval_and_a_zero_throughput_no_ratio() -> None:
    assert paired_difference([0.5], [0.25]) == {"mean_pp": 25.0, "ci95_pp": None, "per_seed_pp": [25.0]}
    r = paired_ratio([10.0, 20.0], [0.0, 10.0])
    assert math.isnan(r["per_seed"][0]) and r["per_seed"][1] == 2.0 and math.isnan(r["mean"])
    with pytest.raises(ValueError, match="2 values against 1"):
        paired_difference([0.1, 0.2], [0.1])


def test_t_interval_matches_the_tuners_old_table() -> None:
    """The tuner's interval moved here: the same t quantiles (then a table up to 10 degrees of freedom)."""
    for df, q in {1: 12.706, 2: 4.303, 5: 2.571, 10: 2.228}.items():
        x = [0.0] * df + [float(df + 1)]  # n = df + 1 values, mean 1, sd sqrt(n): half width q
        lo, hi = t_interval(x)
        assert (hi - lo) / 2 == pytest.approx(q, abs=1e-3) and (lo + hi) / 2 == pytest.approx(1.0)
    assert t_interval([0.3]) == (0.3, 0.3)
    with pytest.raises(ValueError, match="level"):
        t_interval([1.0, 2.0], level=1.5)


@settings(deadline=None)  # the first example imports scipy.stats (t_interval's lazy import)
@given(st.lists(st.tuples(unit, rate), min_size=2, max_size=8))
def test_identical_runs_differ_by_zero(values: list[tuple[float, float]]) -> None:
    att, tput = [v[0] for v in values], [v[1] for v in values]
    d = paired_difference(att, att)
    assert d["mean_pp"] == 0.0 and d["ci95_pp"] == [0.0, 0.0]
    r = paired_ratio(tput, tput)
    assert r["mean"] == pytest.approx(1.0) and r["ci95"] == pytest.approx([1.0, 1.0])


@settings(deadline=None)
@given(st.lists(st.tuples(unit, unit), min_size=2, max_size=8))
def test_swapping_a_and_b_negates(values: list[tuple[float, float]]) -> None:
    a, b = [v[0] for v in values], [v[1] for v in values]
    ab, ba = paired_difference(a, b), paired_difference(b, a)
    assert ba["mean_pp"] == pytest.approx(-ab["mean_pp"], abs=1e-9)
    assert ba["ci95_pp"] == pytest.approx([-ab["ci95_pp"][1], -ab["ci95_pp"][0]], abs=1e-9)
    assert ba["per_seed_pp"] == pytest.approx([-x for x in ab["per_seed_pp"]], abs=1e-12)


def test_paired_results_pair_by_seed_per_load() -> None:
    runs = [_run("lvf", s, 0.9 - 0.1 * s, 120.0, sh) for s in range(2) for sh in (0.5, 1.0)]
    runs += [_run("vllm", s, 0.8 - 0.1 * s, 100.0, sh) for s in range(3) for sh in (0.5, 1.0)]
    out = paired_results(runs, [("lvf", "vllm"), ("lvf", "lvf-hbm")])
    assert [(e["share"], e["a"], e["b"], e["n"], e["seeds"]) for e in out] == [
        (0.5, "lvf", "vllm", 2, [0, 1]), (1.0, "lvf", "vllm", 2, [0, 1])]  # no lvf-hbm runs: no entry
    e = out[0]
    assert e["slo_attainment"]["mean_pp"] == pytest.approx(10) and e["slo_attainment"]["ci95_pp"] == pytest.approx([10, 10])
    assert e["tbt_attainment"]["mean_pp"] == 0 and e["throughput_ratio"]["mean"] == pytest.approx(1.2)


def test_default_pairs_and_bad_pairs() -> None:
    assert parse_pairs(None, ["vllm", "lvf", "lvf-hbm"]) == [("lvf", "vllm"), ("lvf-hbm", "vllm"), ("lvf", "lvf-hbm")]
    assert parse_pairs(None, ["lvf", "lvf-hbm"]) == [("lvf", "lvf-hbm")]
    assert parse_pairs(None, ["vllm"]) == []
    assert parse_pairs("lvf:vllm, lvf:vllm", ["vllm", "lvf"]) == [("lvf", "vllm")]
    import click

    for bad in ("lvf", "lvf:lvf", "lvf:", "lvf:lvf-hbm"):
        with pytest.raises(click.BadParameter):
            parse_pairs(bad, ["vllm", "lvf"])


def test_run_order_rotates_with_seed_and_load_and_runs_are_written_as_they_finish(tmp_path: Path) -> None:
    order = run_order(["a", "b"], 2, 2)
    assert order == [(0, 0, "a"), (0, 0, "b"), (0, 1, "b"), (0, 1, "a"),
                     (1, 0, "b"), (1, 0, "a"), (1, 1, "a"), (1, 1, "b")]
    partial = tmp_path / "x.runs.jsonl"
    seen = []

    def one(policy: str, seed: int, rps: float) -> dict:
        seen.append(len(partial.read_text().splitlines()))
        return {"policy": policy, "seed": seed, "rps": rps}

    runs = run_interleaved(["a", "b"], [(0.5, 1.0), (1.5, 3.0)], 2, one, partial)
    assert seen == list(range(8)) and len(partial.read_text().splitlines()) == 8
    assert [(r["share"], r["seed"], r["policy"]) for r in runs] == [
        (0.5, 0, "a"), (0.5, 0, "b"), (0.5, 1, "a"), (0.5, 1, "b"),
        (1.5, 0, "a"), (1.5, 0, "b"), (1.5, 1, "a"), (1.5, 1, "b")]
    assert {r["rps"] for r in runs if r["share"] == 1.5} == {3.0}


@pytest.mark.parametrize("args, message", [
    (["--capacity-share", "0,1"], "finite number > 0"),
    (["--capacity-share", "1,x"], "not a number"),
    (["--capacity-share", "1,1"], "given twice"),
    (["--capacity-share", "1", "--rps", "2"], "either --rps or --capacity-share"),
    (["--pairs", "lvf:nope"], "not among --policies"),
])
def test_bad_shares_are_usage_errors(tmp_path: Path, args: list[str], message: str) -> None:
    from superinfer.bench.engine.run import bench_vllm

    r = CliRunner().invoke(bench_vllm, ["--build-tiny", str(tmp_path / "m"), *args])
    assert r.exit_code == 2 and message in r.output, r.output
    assert not (tmp_path / "m").exists()  # refused before anything was built


def test_capacity_share_on_the_real_engine(tiny_model: Path, vllm_ok: None, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Capacity at the start and the end, two seeds at it, lvf paired with vllm. Short requests (lmsys in 64
    tokens: ~25 output tokens each) keep it under a minute on two shared cores; at share 1 for 6 s a seed
    gets several arrivals even on a slow host (a seed with none would have no throughput to take a ratio of)."""
    from superinfer.bench.engine.replay import ENGINE_ENV
    from superinfer.bench.engine.run import bench_vllm

    for k, v in ENGINE_ENV.items():  # open_engine sets them for good; restored after this test
        monkeypatch.setenv(k, v)
    out = tmp_path / "out.json"
    r = CliRunner().invoke(bench_vllm, [
        "--model", str(tiny_model), "--workload", "lmsys", "--capacity-share", "1", "--capacity-requests", "8",
        "--duration", "6", "--drain", "30", "--policies", "vllm,lvf", "--seeds", "2", "--num-blocks", "64",
        "--max-model-len", "64", "--ttft-slo", "5", "--tbt-slo", "1", "--json", str(out)])
    assert r.exit_code == 0, r.output
    data = json.loads(out.read_text())
    cap = data["capacity"]
    assert cap["rps"] > 0 and cap["requests"] == 8 and cap["makespan_s"] > 0 and "t=0" in cap["how"]
    assert data["capacity_end"]["rps"] > 0 and data["capacity_end"]["drift"] > 0
    assert len(data["runs"]) == 4 and {x["share"] for x in data["runs"]} == {1.0}
    assert all(x["rps"] == pytest.approx(cap["rps"]) for x in data["runs"])
    assert {x["share"] for x in data["summary"]} == {1.0}
    (pair,) = [e for e in data["paired"] if (e["a"], e["b"]) == ("lvf", "vllm")]
    assert pair["n"] == 2 and pair["share"] == 1.0
    values = [pair[k]["mean_pp"] for k in ("slo_attainment", "tbt_attainment", "ttft_attainment")]
    values += [*pair["slo_attainment"]["ci95_pp"], pair["throughput_ratio"]["mean"], *pair["throughput_ratio"]["ci95"]]
    assert all(math.isfinite(v) for v in values), pair
    assert len((tmp_path / "out.json.runs.jsonl").read_text().splitlines()) == 4
    assert "capacity:" in r.output and "lvf - vllm" in r.output
